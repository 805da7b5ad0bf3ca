#include "runtime/model_impl.h"

#include "artifact/reader.h"
#include "core/error.h"
#include "hf/checkpoint.h"
#include "runtime/reference.h"
#include "tokenizer/tokenizer.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm {

ModelImpl::ModelImpl() = default;
ModelImpl::~ModelImpl() = default;

void ModelImpl::open_hf_dir(const std::string& dir) {
  HfCheckpoint ckpt(dir);
  desc = ckpt.desc();
  const int ctx = options.context_length > 0 ? std::min(options.context_length, desc.max_pos) : std::min(desc.max_pos, 4096);
  reference = load_reference_model(ckpt, ctx);
  tok = std::make_unique<Tokenizer>(Tokenizer::from_files(ckpt.tokenizer_json_path(), ckpt.tokenizer_config_path()));
  info.architecture = arch_name(desc.arch);
  info.recipe = "non-quantized";
  info.backend = options.backend;
  info.device_name = options.backend == "cpu" ? "cpu" : "vulkan";
  info.vocab_size = desc.vocab;
  info.context_length = ctx;
  info.eos_ids.assign(desc.eos_ids.begin(), desc.eos_ids.end());
  for (auto& w : reference->weights.data) info.weight_bytes += w.size();
}

const Program& ModelImpl::program() const {
  if (artifact) return artifact->program();
  if (reference) return reference->lowered.program;
  fail("no model loaded");
}

const WeightSource& ModelImpl::weights() const {
  if (artifact) return *artifact;
  if (reference) return reference->weights;
  fail("no model loaded");
}

const Tokenizer& ModelImpl::tokenizer() const {
  if (!tok) fail("this model has no tokenizer");
  return *tok;
}

std::unique_ptr<Executor> ModelImpl::make_executor() const {
  if (options.backend == "cpu") return make_cpu_executor(program(), weights());
#ifdef VKLLM_WITH_VULKAN
  VulkanOptions vo;
  vo.device = options.device;
  return make_vulkan_executor(program(), weights(), vo);
#else
  fail("this build has no Vulkan backend (built with -DVKLLM_WITH_VULKAN=OFF); use --backend cpu");
#endif
}

void ModelImpl::open_artifact(const std::string& path) {
  ReadOptions ro;
  ro.check_data_hash = false;  // header, metadata and embedded files are still hash-checked; `verify` checks all
  artifact = std::make_unique<ArtifactReader>(path, ro);
  desc = artifact->desc();
  if (options.context_length > artifact->program().max_ctx)
    fail("{}: --seq_len {} exceeds the artifact's context length {} (export with a larger --max-context)", path,
         options.context_length, artifact->program().max_ctx);
  if (!artifact->has_file("tokenizer.json")) fail("{}: the artifact embeds no tokenizer", path);
  tok = std::make_unique<Tokenizer>(Tokenizer::from_text(
      std::string(artifact->file("tokenizer.json")),
      artifact->has_file("tokenizer_config.json") ? std::string(artifact->file("tokenizer_config.json")) : "{}", path));
  info.architecture = arch_name(desc.arch);
  info.recipe = artifact->recipe_name();
  info.backend = options.backend;
  info.device_name = options.backend == "cpu" ? "cpu" : "vulkan";
  info.vocab_size = desc.vocab;
  info.context_length = artifact->program().max_ctx;
  info.eos_ids.assign(desc.eos_ids.begin(), desc.eos_ids.end());
  info.weight_bytes = artifact->data_size();
}

}  // namespace vkllm
