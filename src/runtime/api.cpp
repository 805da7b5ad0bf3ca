// The public API (include/vkllm/vkllm.h) over the internal modules: artifact or HF folder ->
// program + weights loaded once + tokenizer (Model::Impl, model_impl.cpp); each session owns an
// executor (KV cache, activations) made from the model's loaded program.
#include <mutex>

#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/model_impl.h"
#include "tokenizer/tokenizer.h"
#include "vkllm/vkllm.h"

#ifndef VKLLM_VERSION_STRING
#error "the build defines VKLLM_VERSION_STRING (the project version)"
#endif

namespace vkllm {

const char* version() {
  return VKLLM_VERSION_STRING;
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<Model> Model::open(const std::string& path, const ModelOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->open(path);
  return std::shared_ptr<Model>(new Model(std::move(impl)));
}

const ModelInfo& Model::info() const {
  return impl_->info;
}

std::vector<int32_t> Model::encode(const std::string& text, bool add_special) const {
  return impl_->tokenizer().encode(text, add_special);
}

std::string Model::decode(const std::vector<int32_t>& ids) const {
  return impl_->tokenizer().decode(ids);
}

std::string Model::chat_prompt(const std::string& user_message) const {
  return chat_prompt(std::vector<ChatTurn>{{"user", user_message}});
}

std::string Model::chat_prompt(const std::vector<ChatTurn>& conversation) const {
  std::vector<ChatMessage> msgs;
  for (const ChatTurn& t : conversation) msgs.push_back({t.role, t.content});
  return apply_chat_template(chat_family_for(impl_->desc.arch), msgs, true);
}

struct Session::Impl {
  std::shared_ptr<Model> model;
  std::unique_ptr<Executor> executor;
  int pos = 0;                   // KV cache rows filled
  std::vector<int32_t> pending;  // returned tokens not yet in the KV cache (fed first next time)
  GenerationStats stats;
};

Session::Session(std::shared_ptr<Model> model) : impl_(std::make_unique<Impl>()) {
  if (!model) fail("a session needs a model (Model::open returned none)");
  impl_->model = std::move(model);
  Model::Impl& m = *impl_->model->impl_;
  std::lock_guard<std::mutex> lock(m.run_mu);
  impl_->executor = m.loaded->make_executor();
}

Session::~Session() {
  std::lock_guard<std::mutex> lock(impl_->model->impl_->run_mu);
  impl_->executor.reset();
}

void Session::reset() {
  impl_->pos = 0;
  impl_->pending.clear();
}

int Session::context_tokens() const {
  return impl_->pos + static_cast<int>(impl_->pending.size());
}

const GenerationStats& Session::stats() const {
  return impl_->stats;
}

const std::shared_ptr<Model>& Session::model() const {
  return impl_->model;
}

std::vector<int32_t> Session::generate(const std::string& prompt, const GenerationOptions& opts,
                                       const TokenCallback& on_token) {
  // Llama's BOS comes from the chat text itself (<|begin_of_text|>), so no special tokens here.
  return generate(impl_->model->encode(prompt, false), opts, on_token);
}

std::vector<int32_t> Session::generate(const std::vector<int32_t>& prompt,
                                       const GenerationOptions& opts,
                                       const TokenCallback& on_token) {
  Model::Impl& m = *impl_->model->impl_;
  if (opts.max_new_tokens < 0) fail("max_new_tokens is {}; it must be >= 0", opts.max_new_tokens);
  if (!(opts.temperature >= 0) || !(opts.top_p >= 0 && opts.top_p <= 1))
    fail("temperature {} must be >= 0 and top_p {} in [0, 1]", opts.temperature, opts.top_p);
  for (int32_t id : prompt)
    if (id < 0 || id >= m.info.vocab_size)
      fail("prompt token id {} is outside the vocabulary [0, {})", id, m.info.vocab_size);
  std::vector<int32_t> input = impl_->pending;
  input.insert(input.end(), prompt.begin(), prompt.end());
  if (input.empty())
    fail("the prompt is empty and the session has no generated token to continue from");
  SamplingParams sp{opts.temperature, opts.top_p, opts.seed};
  std::vector<int> eos;
  if (opts.stop_at_eos) eos.assign(m.info.eos_ids.begin(), m.info.eos_ids.end());
  StreamDecoder dec(m.tokenizer());
  GenerateStats st;
  std::vector<int32_t> out;
  {
    std::lock_guard<std::mutex> lock(m.run_mu);
    out = vkllm::generate(
        *impl_->executor, m.program(), input, opts.max_new_tokens, sp, eos, impl_->pos,
        [&](int32_t id) { return on_token ? on_token(id, dec.push(id)) : true; }, &st);
  }
  if (on_token) {
    std::string tail = dec.flush();
    if (!tail.empty()) on_token(-1, tail);
  }
  // The loop feeds every returned token but the last one back; that one goes first next time.
  const size_t fed = static_cast<size_t>(st.end_pos - impl_->pos) - input.size();
  impl_->pos = st.end_pos;
  impl_->pending.assign(out.begin() + static_cast<std::ptrdiff_t>(std::min(fed, out.size())),
                        out.end());
  impl_->stats = GenerationStats{st.prompt_tokens, st.generated_tokens, st.prefill_ms,
                                 st.decode_ms,     st.stopped_by_eos,   st.stopped_by_callback};
  return out;
}

}  // namespace vkllm
