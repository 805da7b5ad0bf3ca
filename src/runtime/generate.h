// The generation loop shared by every client: prefill, then decode token by token. Each step
// picks the next token from the backend's greedy token or, when sampling or penalties need them,
// from the step's logits (Sampler::pick); text-level stop strings live in StopMatcher.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/executor.h"

namespace vkllm {

namespace grammar {
class Matcher;
}

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (the argmax, after the penalties)
  float top_p = 1.0f;
  uint64_t seed = 0;
  int top_k = 0;       // keep the k most likely tokens; 0: all
  float min_p = 0.0f;  // keep tokens with p >= min_p * p(most likely); 0: all
  // Penalties: repetition divides a positive logit (multiplies a negative one) of every token in
  // the context, prompt and generated (CTRL, as Hugging Face applies it); presence and frequency
  // subtract presence + frequency * count from the logit of every generated token (OpenAI's).
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  bool needs_logits() const { return temperature > 0 || has_penalties(); }
};

// Seeded sampling over fp32 logits (deterministic for a seed and the same logits): penalties, then
// the argmax (temperature 0) or softmax at the temperature, top-k, top-p, min-p and a draw.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Tokens the repetition penalty sees besides the generated ones (the context and the prompt).
  void add_context(const std::vector<int32_t>& ids);
  // The next token: `greedy` (the backend's argmax) when no logits are needed, else from logits
  // (modified in place by the penalties). Records the token as generated.
  int32_t pick(int32_t greedy, float* logits, int64_t vocab);
  // The same from the logits always (a constrained step: the masked logits decide).
  int32_t pick_from_logits(float* logits, int64_t vocab);
  // The same without recording, on logits after the penalties (kept for the existing tests).
  int32_t sample(const float* logits, int64_t vocab);
  void apply_penalties(float* logits, int64_t vocab) const;
  // Greedy without penalties: the token is the logits' argmax.
  bool greedy() const { return !p_.needs_logits(); }

 private:
  SamplingParams p_;
  uint64_t state_;
  std::unordered_map<int32_t, int> context_, generated_;  // token -> count
  double next_uniform();
};

// Stop strings over streamed text: push() returns the text safe to print, holding back any tail
// that may still become a stop string; once one is complete, stopped() is true and the text
// returned ends right before it (a stop string is never printed). Matches span token boundaries.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // Error on an empty string
  std::string push(std::string_view piece);
  std::string flush();  // at the end without a match: the held-back text
  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_ms = 0;  // time to first token
  double decode_ms = 0;   // the rest
  bool stopped_by_eos = false;
  bool stopped_by_callback = false;
  int end_pos = 0;        // KV cache rows filled after the call (the next call's start position)
  int masked_steps = 0;   // constrained steps that masked the whole vocabulary
  int refused_steps = 0;  // constrained greedy steps whose argmax the constraint refused
  // Decode submits: forwards and greedy batches after the prefill (a refused token's step run
  // again for its logits included); and decode steps run whose token was not used: a greedy
  // batch's steps after a refused token or the end, and the steps run again.
  int decode_submits = 0, wasted_steps = 0;
  // Host time of the constraint: its checks, searches, masks and accepts (constraint_ms), and
  // the logits its refused steps read back or computed again (constraint_logits_ms).
  double constraint_ms = 0, constraint_logits_ms = 0;
};

// A constrained step's token (generate() and the batch engine): the backend's greedy token where
// the sampler is greedy and the constraint allows it (it is then the masked argmax too), else the
// sampler's pick over the logits (from `logits`, called only then) masked with the constraint
// (a sampler's logits are masked in place; a greedy sampler first tries the best logits one by one,
// and only when none of them is allowed takes the argmax of the allowed ones, leaving the logits as
// they are: `masked`, if not null, counts the steps that computed a mask). Does not advance the
// constraint.
int32_t pick_constrained(Sampler& sampler, grammar::Matcher& constraint, int32_t greedy,
                         const std::function<float*()>& logits, int64_t vocab, int tokens_left,
                         int* masked = nullptr);

// Feeds the prompt at positions start_pos.. then generates up to max_new_tokens.
// on_token returns false to stop. The eos token itself is not passed to on_token.
// Throws Error when the prompt (plus at least one generated token) does not fit max_ctx.
// constraint (may be null): every step picks within it (pick_constrained: a greedy sampler's
// argmax where the constraint allows it, else the masked logits, read back only then) and
// advances it with the token; its eos ends generation like eos_ids, and so does a constraint
// that is finished (nothing but eos may follow).
std::vector<int32_t> generate(Executor& ex, const Program& program,
                              const std::vector<int32_t>& prompt, int max_new_tokens,
                              Sampler& sampler, bool needs_logits, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats, grammar::Matcher* constraint = nullptr);
// The same with a fresh Sampler of sp that sees the prompt as context.
std::vector<int32_t> generate(Executor& ex, const Program& program,
                              const std::vector<int32_t>& prompt, int max_new_tokens,
                              const SamplingParams& sp, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats);

}  // namespace vkllm
