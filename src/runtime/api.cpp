// The public API (include/vkllm/vkllm.h) over the internal modules: artifact or HF folder ->
// program + weights loaded once + tokenizer (Model::Impl, model_impl.cpp); each session owns an
// executor (KV cache, activations) made from the model's loaded program.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "runtime/generate.h"
#include "runtime/model_impl.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/tokenizer.h"
#include "vkllm/vkllm.h"

#ifndef VKLLM_VERSION_STRING
#error "the build defines VKLLM_VERSION_STRING (the project version)"
#endif

namespace vkllm {

const char* version() {
  return VKLLM_VERSION_STRING;
}

std::shared_ptr<const Constraint> json_schema_constraint(const std::string& schema_json) {
  const nlohmann::json j = nlohmann::json::parse(schema_json, nullptr, false);
  if (j.is_discarded()) fail("the JSON schema is not valid JSON");
  return make_constraint(grammar::compile_json_schema(j));
}

std::shared_ptr<const Constraint> json_object_constraint() {
  return make_constraint(grammar::any_json_object());
}

std::shared_ptr<const grammar::TokenIndex> Model::Impl::token_index() {
  std::lock_guard<std::mutex> lock(index_mu_);
  if (!index_) {
    const Tokenizer& t = tokenizer();
    std::vector<std::string> bytes(static_cast<size_t>(t.vocab_size()));
    std::vector<bool> special(bytes.size());
    for (int32_t i = 0; i < t.vocab_size(); ++i) {
      bytes[static_cast<size_t>(i)] = t.token_bytes(i);
      special[static_cast<size_t>(i)] = t.is_special(i);
    }
    std::vector<int32_t> eos(info.eos_ids.begin(), info.eos_ids.end());
    index_ = std::make_shared<const grammar::TokenIndex>(bytes, special, eos, info.vocab_size);
  }
  return index_;
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
  return chat_prompt(conversation, std::string());
}

std::string Model::chat_prompt(const std::vector<ChatTurn>& conversation,
                               const std::string& tools_json) const {
  std::vector<ChatMessage> msgs;
  bool tool_turns = false;
  for (const ChatTurn& t : conversation) {
    ChatMessage m{t.role, t.content};
    m.tool_calls = t.tool_calls;
    m.tool_call_id = t.tool_call_id;
    tool_turns = tool_turns || t.role == "tool" || !t.tool_calls.empty();
    msgs.push_back(std::move(m));
  }
  ChatOptions opt;
  opt.tools = tools_json;
  if (!impl_->chat) fail("this model has no tokenizer");
  // Llama's plain format has no tools: the Llama 3.2 template with its default date has.
  if (impl_->chat->native_family() == ChatFamily::Llama3 && (tool_turns || !tools_json.empty()))
    opt.llama_date = "26 Jul 2024";
  return impl_->chat->render(msgs, opt);
}

// Hidden: the library exports its API alone (members of a nested class would inherit Session's
// default visibility; tests/package checks the exported symbols).
struct __attribute__((visibility("hidden"))) Session::Impl {
  std::shared_ptr<Model> model;
  std::unique_ptr<Executor> executor;
  // The context: ids[0, pos) are in the KV cache; ids[pos, end) were returned but not fed yet
  // (the last generated token; fed first next time).
  std::vector<int32_t> ids;
  int pos = 0;
  GenerationStats stats;

  // The token ids of `context` (chat text): when the context, decoded, is a prefix of it, its ids
  // as they are followed by the rest encoded (a previous reply is not re-tokenized).
  std::vector<int32_t> tokens_of(const std::string& context) const;
  // Keeps `keep` (<= pos) KV rows, feeds `input` after them and generates.
  std::vector<int32_t> run(int keep, std::vector<int32_t> input, const GenerationOptions& opts,
                           const TokenCallback& on_token);
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
  impl_->ids.clear();
}

int Session::context_tokens() const {
  return static_cast<int>(impl_->ids.size());
}

std::vector<int32_t> Session::context() const {
  return impl_->ids;
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
  // (a sliding layer's ring may have lost keys since: then the context is fed again)
  const int keep = impl_->executor->kept_positions(impl_->pos);
  std::vector<int32_t> input(impl_->ids.begin() + keep, impl_->ids.end());
  input.insert(input.end(), prompt.begin(), prompt.end());
  return impl_->run(keep, std::move(input), opts, on_token);
}

std::vector<int32_t> Session::generate_reusing(const std::vector<int32_t>& context,
                                               const GenerationOptions& opts,
                                               const TokenCallback& on_token) {
  if (context.empty()) fail("the context to generate after is empty (no tokens)");
  const int keep = reusable_tokens(context);
  return impl_->run(keep, std::vector<int32_t>(context.begin() + keep, context.end()), opts,
                    on_token);
}

std::vector<int32_t> Session::generate_reusing(const std::string& context,
                                               const GenerationOptions& opts,
                                               const TokenCallback& on_token) {
  return generate_reusing(impl_->tokens_of(context), opts, on_token);
}

int Session::reusable_tokens(const std::vector<int32_t>& context) const {
  const auto& ids = impl_->ids;
  size_t common = 0;
  while (common < ids.size() && common < context.size() && ids[common] == context[common]) ++common;
  // At least one token is fed: the logits come from its forward.
  const size_t fed = context.empty() ? 0 : context.size() - 1;
  // A sliding layer's ring holds the keys after the kept prefix only if no later position has
  // overwritten them (Executor::kept_positions).
  return impl_->executor->kept_positions(
      static_cast<int>(std::min({common, fed, static_cast<size_t>(impl_->pos)})));
}

int Session::reusable_tokens(const std::string& context) const {
  return reusable_tokens(impl_->tokens_of(context));
}

std::vector<int32_t> Session::Impl::tokens_of(const std::string& context) const {
  const Model& m = *model;
  if (!ids.empty()) {
    const std::string have = m.decode(ids);
    if (context.size() > have.size() && context.compare(0, have.size(), have) == 0) {
      std::vector<int32_t> all = ids;
      const auto rest = m.encode(context.substr(have.size()), false);
      all.insert(all.end(), rest.begin(), rest.end());
      return all;
    }
  }
  return m.encode(context, false);
}

void check_generation_options(const GenerationOptions& o) {
  if (o.max_new_tokens < 0) fail("max_new_tokens is {}; it must be >= 0", o.max_new_tokens);
  if (!(o.temperature >= 0 && std::isfinite(o.temperature)) || !(o.top_p >= 0 && o.top_p <= 1))
    fail("temperature {} must be >= 0 and top_p {} in [0, 1]", o.temperature, o.top_p);
  if (o.top_k < 0) fail("top_k is {}; it must be >= 0 (0: off)", o.top_k);
  if (!(o.min_p >= 0 && o.min_p <= 1)) fail("min_p {} must be in [0, 1]", o.min_p);
  if (!(o.repetition_penalty > 0 && std::isfinite(o.repetition_penalty)))
    fail("repetition_penalty {} must be > 0 (1: off)", o.repetition_penalty);
  if (!std::isfinite(o.presence_penalty) || !std::isfinite(o.frequency_penalty))
    fail("presence_penalty {} and frequency_penalty {} must be finite", o.presence_penalty,
         o.frequency_penalty);
}

SamplingParams sampling_params(const GenerationOptions& o) {
  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.seed = o.seed;
  sp.top_k = o.top_k;
  sp.min_p = o.min_p;
  sp.repetition_penalty = o.repetition_penalty;
  sp.presence_penalty = o.presence_penalty;
  sp.frequency_penalty = o.frequency_penalty;
  return sp;
}

std::vector<int32_t> Session::Impl::run(int keep, std::vector<int32_t> input,
                                        const GenerationOptions& opts,
                                        const TokenCallback& on_token) {
  Model::Impl& m = *model->impl_;
  check_generation_options(opts);
  for (int32_t id : input)
    if (id < 0 || id >= m.info.vocab_size)
      fail("prompt token id {} is outside the vocabulary [0, {})", id, m.info.vocab_size);
  if (input.empty())
    fail("the prompt is empty and the session has no generated token to continue from");
  const int64_t max_ctx = m.program().max_ctx;
  if (keep + static_cast<int64_t>(input.size()) >= max_ctx)  // before any KV row changes
    fail("the prompt has {} tokens (after {} in context) but the context holds {}", input.size(),
         keep, max_ctx);
  const SamplingParams sp = sampling_params(opts);
  Sampler sampler(sp);
  sampler.add_context(std::vector<int32_t>(ids.begin(), ids.begin() + keep));
  sampler.add_context(input);
  std::vector<int> eos;
  if (opts.stop_at_eos) eos.assign(m.info.eos_ids.begin(), m.info.eos_ids.end());
  StreamDecoder dec(m.tokenizer());
  StopMatcher stop(opts.stop);
  std::unique_ptr<grammar::Matcher> matcher;
  if (opts.constraint)
    matcher = std::make_unique<grammar::Matcher>(opts.constraint->grammar, m.token_index());
  GenerateStats st;
  std::vector<int32_t> out;
  try {
    std::lock_guard<std::mutex> lock(m.run_mu);
    out = vkllm::generate(
        *executor, m.program(), input, opts.max_new_tokens, sampler, sp.needs_logits(), eos, keep,
        [&](int32_t id) {
          std::string piece = dec.push(id);
          if (!stop.empty()) piece = stop.push(piece);
          const bool go_on = on_token ? on_token(id, piece) : true;
          return go_on && !stop.stopped();
        },
        &st, matcher.get());
  } catch (...) {  // the KV rows past `keep` may have been overwritten
    ids.resize(static_cast<size_t>(keep));
    pos = keep;
    throw;
  }
  std::string tail = dec.flush();
  if (!stop.empty()) {
    tail = stop.push(tail);
    tail += stop.flush();
  }
  if (on_token && !tail.empty()) on_token(-1, tail);
  // The loop feeds every returned token but the last one back; that one goes first next time.
  ids.resize(static_cast<size_t>(keep));
  ids.insert(ids.end(), input.begin(), input.end());
  ids.insert(ids.end(), out.begin(), out.end());
  pos = st.end_pos;
  stats = GenerationStats{st.prompt_tokens, st.generated_tokens, st.prefill_ms,
                          st.decode_ms,     st.stopped_by_eos,   st.stopped_by_callback};
  stats.stopped_by_stop = stop.stopped();
  if (stats.stopped_by_stop) stats.stopped_by_callback = false;
  stats.reused_tokens = keep;
  stats.masked_steps = st.masked_steps;
  stats.refused_steps = st.refused_steps;
  stats.decode_submits = st.decode_submits;
  stats.wasted_steps = st.wasted_steps;
  stats.constraint_ms = st.constraint_ms;
  stats.constraint_logits_ms = st.constraint_logits_ms;
  return out;
}

}  // namespace vkllm
