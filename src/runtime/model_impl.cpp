#include "runtime/model_impl.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>

#include "artifact/load.h"
#include "artifact/reader.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "hf/checkpoint.h"
#include "ir/kv_ring.h"
#include "runtime/reference.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/tokenizer.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm {

namespace {

// The CPU interpreter reads the weights where they are (mapped or in memory): nothing to load.
class CpuLoaded final : public LoadedProgram {
 public:
  CpuLoaded(const Program& p, const WeightSource& w) : p_(p), w_(w) {}
  std::unique_ptr<Executor> make_executor() override { return make_cpu_executor(p_, w_); }
  std::unique_ptr<BatchExecutor> make_batch_executor(int num_blocks, int block_tokens, int max_rows,
                                                     int window_blocks) override {
    return make_cpu_batch_executor(p_, w_, num_blocks, block_tokens, max_rows, window_blocks);
  }
  std::string device_name() const override { return "cpu"; }

 private:
  const Program& p_;
  const WeightSource& w_;
};

// The same program with `rows` KV cache rows (a shorter context: smaller caches).
Program with_context(const Program& p, int rows) {
  Program q = p;
  q.max_ctx = rows;
  for (TensorDecl& t : q.tensors)
    if (t.kind == TensorKind::KVCache) t.shape[0] = rows;
  return q;
}

}  // namespace

Model::Impl::Impl() = default;
Model::Impl::~Impl() = default;

void Model::Impl::open(const std::string& path) {
  if (options.backend != "vulkan" && options.backend != "cpu")
    fail("unknown backend '{}' (choose vulkan or cpu)", options.backend);
  if (options.context_length < 0)
    fail("context length {} is negative (0 chooses the model's maximum)", options.context_length);
  if (std::filesystem::is_directory(path))
    open_hf_dir(path);  // the fp32 reference program, on either backend
  else
    open_artifact(path);
  // Sliding-window layers keep only the rows their window and a forward need (ir/kv_ring.h).
  resized = with_ring_caches(program());
  info.architecture = arch_name(desc.arch);
  info.backend = options.backend;
  info.vocab_size = desc.vocab;
  info.context_length = program().max_ctx;
  for (const TensorDecl& t : program().tensors)
    if (t.kind == TensorKind::KVCache) info.kv_cache_bytes += dtype_nbytes(t.dtype, t.shape);
  info.eos_ids.assign(desc.eos_ids.begin(), desc.eos_ids.end());
  try {
    load();
  } catch (...) {
    finish_tokenizer();  // (its error first, as the open's earlier stage)
    throw;
  }
  finish_tokenizer();
  if (chat) info.chat_template = chat->describe();
  info.device_name = loaded->device_name();
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

void Model::Impl::finish_tokenizer() {
  if (!tokenizer_parse_.valid()) return;
  const auto t0 = std::chrono::steady_clock::now();
  tokenizer_parse_.get();
  open_tokenizer_ms = ms_since(t0);
}

void Model::Impl::open_hf_dir(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  HfCheckpoint ckpt(dir);
  desc = ckpt.desc();
  if (options.context_length > desc.max_pos)
    fail("{}: context length {} exceeds the model's max_position_embeddings {}", dir,
         options.context_length, desc.max_pos);
  const int ctx =
      options.context_length > 0 ? options.context_length : std::min(desc.max_pos, 4096);
  reference = load_reference_model(ckpt, ctx);
  open_model_ms = ms_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  // tokenizer_config.json is optional, as in export and in an artifact (no file: no specials).
  const std::string cfg = ckpt.tokenizer_config_path();
  tok = std::make_unique<Tokenizer>(Tokenizer::from_files(
      ckpt.tokenizer_json_path(), std::filesystem::exists(cfg) ? cfg : std::string()));
  // The chat template as the artifact would carry it: chat_template.jinja, else the config's.
  const std::string jinja = dir + "/chat_template.jinja";
  chat = std::make_unique<ChatRenderer>(ChatRenderer::make(
      desc.arch, *tok,
      chat_template_of(std::filesystem::exists(cfg) ? read_text_file(cfg) : std::string(),
                       std::filesystem::exists(jinja) ? read_text_file(jinja) : std::string(), dir),
      dir));
  open_tokenizer_ms = tokenizer_parse_ms = ms_since(t1);
  info.recipe = "non-quantized";
  for (auto& w : reference->weights.data) info.weight_bytes += w.size();
}

void Model::Impl::open_artifact(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  ReadOptions ro;
  ro.check_data_hash =
      false;  // header, metadata and embedded files are still hash-checked; `verify` checks all
  artifact = std::make_unique<ArtifactReader>(path, ro);
  desc = artifact->desc();
  const int max_ctx = artifact->program().max_ctx;
  if (options.context_length > max_ctx)
    fail("{}: context length {} exceeds the artifact's {} (export with a larger --max-context)",
         path, options.context_length, max_ctx);
  if (options.context_length > 0 && options.context_length < max_ctx)
    resized = with_context(artifact->program(), options.context_length);
  open_model_ms = ms_since(t0);
  // The tokenizer, the chat template, the embedded files (the load check verify and export run),
  // on a thread of their own while the backend loads (~0.3 s for a 128K-token vocabulary).
  tokenizer_parse_ = std::async(std::launch::async, [this] {
    const auto t1 = std::chrono::steady_clock::now();
    ArtifactLoad parts = load_artifact(*artifact);
    tok = std::make_unique<Tokenizer>(std::move(parts.tokenizer));
    chat = std::make_unique<ChatRenderer>(std::move(parts.chat));
    tokenizer_parse_ms = ms_since(t1);
  });
  info.recipe = artifact->recipe_name();
  info.weight_bytes = artifact->data_size();
}

const Program& Model::Impl::program() const {
  if (resized) return *resized;
  if (artifact) return artifact->program();
  if (reference) return reference->lowered.program;
  fail("no model loaded");
}

const WeightSource& Model::Impl::weights() const {
  if (artifact) return *artifact;
  if (reference) return reference->weights;
  fail("no model loaded");
}

const Tokenizer& Model::Impl::tokenizer() const {
  if (!tok) fail("this model has no tokenizer");
  return *tok;
}

void Model::Impl::load() {
  if (options.backend == "cpu") {
    loaded = std::make_shared<CpuLoaded>(program(), weights());
    return;
  }
#ifdef VKLLM_WITH_VULKAN
  VulkanOptions vo;
  vo.device = options.device;
  loaded = load_vulkan_program(program(), weights(), vo);
#else
  fail(
      "this build has no Vulkan backend (built with -DVKLLM_WITH_VULKAN=OFF); use the cpu backend");
#endif
}

}  // namespace vkllm
