#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace vkllm {

Sampler::Sampler(const SamplingParams& p) : p_(p), state_(p.seed ^ 0x9e3779b97f4a7c15ull) {}

double Sampler::next_uniform() {  // splitmix64 -> [0, 1)
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (p_.temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  const float mx = *std::max_element(logits, logits + vocab);
  std::vector<std::pair<double, int32_t>> probs(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    double e = std::exp((static_cast<double>(logits[i]) - mx) / p_.temperature);
    probs[i] = {e, static_cast<int32_t>(i)};
    sum += e;
  }
  std::sort(probs.begin(), probs.end(), [](auto& a, auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = probs.size();
  if (p_.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
      acc += probs[i].first / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs[i].first;
  double r = next_uniform() * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i].first;
    if (r < 0) return probs[i].second;
  }
  return probs[keep - 1].second;
}

std::vector<int32_t> generate(Executor& ex, const Program& program,
                              const std::vector<int32_t>& prompt, int max_new_tokens,
                              const SamplingParams& sp, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (start_pos < 0 || start_pos + static_cast<int64_t>(prompt.size()) >= program.max_ctx)
    fail(
        "the prompt has {} tokens (after {} in context) but the context holds {} (use a shorter "
        "prompt or a larger --seq_len)",
        prompt.size(), start_pos, program.max_ctx);
  const int64_t vocab = program.tensors[program.logits].shape.back();
  std::vector<float> logits(sp.temperature > 0 ? static_cast<size_t>(vocab) : 0);
  Sampler sampler(sp);
  GenerateStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<int32_t> out, ahead;  // ahead: greedy tokens decoded but not yet consumed
  size_t ahead_at = 0;
  auto t0 = clock::now();
  int pos = start_pos;
  int32_t next = ex.forward(prompt.data(), static_cast<int>(prompt.size()), pos,
                            sp.temperature > 0 ? logits.data() : nullptr);
  pos += static_cast<int>(prompt.size());
  auto t1 = clock::now();
  st.prefill_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  while (max_new_tokens > 0) {
    if (sp.temperature > 0) next = sampler.sample(logits.data(), vocab);
    if (std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) {
      st.stopped_by_eos = true;
      break;
    }
    out.push_back(next);
    if (on_token && !on_token(next)) {
      st.stopped_by_callback = true;
      break;
    }
    if (static_cast<int>(out.size()) >= max_new_tokens || pos >= program.max_ctx) break;
    if (sp.temperature > 0) {
      next = ex.forward(&out.back(), 1, pos, logits.data());
    } else {
      // Greedy: the backend's argmax, several steps per submit where the backend keeps the token
      // on the device and all of them can be used; consumed one at a time all the same.
      if (ahead_at == ahead.size()) {
        const int want =
            std::min(max_new_tokens - static_cast<int>(out.size()), program.max_ctx - pos);
        const int n = want >= ex.greedy_batch() ? ex.greedy_batch() : 1;
        ahead.resize(static_cast<size_t>(n));
        ex.decode_greedy(out.back(), pos, n, ahead.data());
        ahead_at = 0;
      }
      next = ahead[ahead_at++];
    }
    ++pos;
  }
  st.generated_tokens = static_cast<int>(out.size());
  st.end_pos = pos;
  st.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace vkllm
