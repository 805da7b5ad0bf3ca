// The generation loop shared by every client: prefill, then decode token by token.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/executor.h"

namespace vkllm {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (the argmax computed by the backend)
  float top_p = 1.0f;
  uint64_t seed = 0;
};

// Seeded temperature / top-p sampling over fp32 logits (deterministic for a seed).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  uint64_t state_;
  double next_uniform();
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_ms = 0;  // time to first token
  double decode_ms = 0;   // the rest
  bool stopped_by_eos = false;
  bool stopped_by_callback = false;
  int end_pos = 0;  // KV cache rows filled after the call (the next call's start position)
};

// Feeds the prompt at positions start_pos.. then generates up to max_new_tokens.
// on_token returns false to stop. The eos token itself is not passed to on_token.
// Throws Error when the prompt (plus at least one generated token) does not fit max_ctx.
std::vector<int32_t> generate(Executor& ex, const Program& program, const std::vector<int32_t>& prompt,
                              int max_new_tokens, const SamplingParams& sp, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token, GenerateStats* stats);

}  // namespace vkllm
