// The public API (include/vkllm/vkllm.h) over the internal modules: artifact or HF folder ->
// program + weights + tokenizer; sessions own an executor (KV cache) each.
#include <filesystem>

#include "core/error.h"
#include "hf/checkpoint.h"
#include "runtime/generate.h"
#include "runtime/model_impl.h"
#include "runtime/reference.h"
#include "tokenizer/tokenizer.h"
#include "vkllm/vkllm.h"

namespace vkllm {

namespace fs = std::filesystem;

Model::Model(std::unique_ptr<ModelImpl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<Model> Model::open(const std::string& path, const ModelOptions& options) {
  if (options.backend != "vulkan" && options.backend != "cpu")
    fail("unknown backend '{}' (choose vulkan or cpu)", options.backend);
  auto impl = std::make_unique<ModelImpl>();
  impl->options = options;
  if (fs::is_directory(path)) {
    if (options.backend != "cpu")
      fail("{}: a Hugging Face folder runs only on the CPU reference backend (--backend cpu); export it to an artifact for the GPU", path);
    impl->open_hf_dir(path);
  } else {
    impl->open_artifact(path);
  }
  return std::shared_ptr<Model>(new Model(std::move(impl)));
}

const ModelInfo& Model::info() const { return impl_->info; }

std::vector<int32_t> Model::encode(const std::string& text, bool add_special) const {
  return impl_->tokenizer().encode(text, add_special);
}

std::string Model::decode(const std::vector<int32_t>& ids) const { return impl_->tokenizer().decode(ids); }

std::string Model::chat_prompt(const std::string& user_message) const {
  return apply_chat_template(chat_family_for(impl_->desc.arch), {{"user", user_message}}, true);
}

struct Session::Impl {
  std::shared_ptr<Model> model;
  std::unique_ptr<Executor> executor;
  int pos = 0;
  GenerationStats stats;
};

Session::Session(std::shared_ptr<Model> model) : impl_(std::make_unique<Impl>()) {
  if (!model) fail("Session needs a model");
  impl_->model = model;
  impl_->executor = model->impl().make_executor();
}

Session::~Session() = default;

void Session::reset() { impl_->pos = 0; }

const GenerationStats& Session::stats() const { return impl_->stats; }

std::vector<int32_t> Session::generate(const std::string& prompt, const GenerationOptions& opts,
                                       const TokenCallback& on_token) {
  // Llama's BOS comes from the chat text itself (<|begin_of_text|>), so no special tokens here.
  return generate(impl_->model->encode(prompt, false), opts, on_token);
}

std::vector<int32_t> Session::generate(const std::vector<int32_t>& prompt, const GenerationOptions& opts,
                                       const TokenCallback& on_token) {
  ModelImpl& m = impl_->model->impl();
  if (opts.max_new_tokens < 0) fail("max_new_tokens must be >= 0");
  SamplingParams sp{opts.temperature, opts.top_p, opts.seed};
  std::vector<int> eos;
  if (opts.stop_at_eos) eos.assign(m.info.eos_ids.begin(), m.info.eos_ids.end());
  StreamDecoder dec(m.tokenizer());
  GenerateStats st;
  std::vector<int32_t> out = vkllm::generate(
      *impl_->executor, m.program(), prompt, opts.max_new_tokens, sp, eos, impl_->pos,
      [&](int32_t id) { return on_token ? on_token(id, dec.push(id)) : true; }, &st);
  if (on_token) {
    std::string tail = dec.flush();
    if (!tail.empty()) on_token(-1, tail);
  }
  impl_->pos = st.end_pos;
  impl_->stats = GenerationStats{st.prompt_tokens, st.generated_tokens, st.prefill_ms, st.decode_ms,
                                 st.stopped_by_eos, st.stopped_by_callback};
  return out;
}

}  // namespace vkllm
