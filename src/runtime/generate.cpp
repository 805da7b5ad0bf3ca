#include "runtime/generate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "grammar/grammar.h"

namespace vkllm {

Sampler::Sampler(const SamplingParams& p) : p_(p), state_(p.seed ^ 0x9e3779b97f4a7c15ull) {}

double Sampler::next_uniform() {  // splitmix64 -> [0, 1)
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::add_context(const std::vector<int32_t>& ids) {
  if (p_.repetition_penalty == 1.0f) return;
  for (int32_t id : ids) ++context_[id];
}

void Sampler::apply_penalties(float* logits, int64_t vocab) const {
  const auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
  if (p_.repetition_penalty != 1.0f) {
    const float r = p_.repetition_penalty;
    auto penalize = [&](int32_t id) {
      if (!in_vocab(id)) return;
      float& l = logits[id];
      l = l > 0 ? l / r : l * r;
    };
    for (const auto& [id, n] : context_) penalize(id);
    for (const auto& [id, n] : generated_)
      if (!context_.count(id)) penalize(id);  // each distinct token once
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : generated_)
      if (in_vocab(id))
        logits[id] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(n);
}

int32_t Sampler::pick(int32_t greedy, float* logits, int64_t vocab) {
  int32_t id = greedy;
  if (p_.needs_logits()) {
    apply_penalties(logits, vocab);
    id = sample(logits, vocab);
  }
  ++generated_[id];
  return id;
}

int32_t Sampler::pick_from_logits(float* logits, int64_t vocab) {
  apply_penalties(logits, vocab);
  const int32_t id = sample(logits, vocab);
  ++generated_[id];
  return id;
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
  const auto by_prob = [](auto& a, auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = probs.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < probs.size()) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(keep), probs.end(),
                      by_prob);
    probs.resize(keep);
    sum = 0;
    for (const auto& pr : probs) sum += pr.first;
  } else {
    std::sort(probs.begin(), probs.end(), by_prob);
  }
  // Tokens of weight 0 (a constraint's -infinity logits, or an underflow) are never drawn, even
  // where rounding leaves the draw past the last positive weight.
  while (keep > 1 && !(probs[keep - 1].first > 0)) --keep;
  if (p_.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      acc += probs[i].first / sum;
      if (acc >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0f) {  // probs[0] is the most likely (its unnormalized weight is 1)
    const double floor = static_cast<double>(p_.min_p) * probs[0].first;
    size_t k = 1;
    while (k < keep && probs[k].first >= floor) ++k;
    keep = k;
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

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_)
    if (s.empty()) fail("a stop string is empty");
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  held_ += piece;
  size_t at = std::string::npos;
  for (const auto& s : stops_) at = std::min(at, held_.find(s));
  if (at != std::string::npos) {
    std::string out = held_.substr(0, at);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail of held_ that begins some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

namespace {

// The masked argmax without the mask, where it is among the best logits: the kCandidates highest
// (a higher logit first, then a lower id, as the argmax of the masked logits breaks ties), each
// asked with allows() in that order; the first allowed one is the argmax of the masked logits.
// -1 when none of them is allowed, or a logit is NaN or the candidate -infinity (the mask decides).
// Once kCandidates are held, a block of logits none of which is above the last one held (nor NaN)
// is passed over whole: its ids are higher, so a logit equal to that one's does not displace it.
int32_t best_allowed(grammar::Matcher& constraint, const float* l, int64_t vocab, int32_t refused,
                     int tokens_left) {
  constexpr int kCandidates = 32;
  constexpr int64_t kBlock = 64;
  std::array<std::pair<float, int32_t>, kCandidates> top;
  int n = 0;
  const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (int64_t b0 = 0; b0 < vocab; b0 += kBlock) {
    const int64_t b1 = std::min(vocab, b0 + kBlock);
    if (n == kCandidates && b1 - b0 == kBlock) {  // (a fixed count: the loop vectorizes)
      const float last = top[kCandidates - 1].first;
      const float* x = l + b0;
      int over = 0;
      for (int64_t i = 0; i < kBlock; ++i) over += (x[i] > last) | (x[i] != x[i]);
      if (over == 0) continue;
    }
    for (int64_t i = b0; i < b1; ++i) {
      const std::pair<float, int32_t> c{l[i], static_cast<int32_t>(i)};
      if (std::isnan(c.first)) return -1;
      if (n == kCandidates && !better(c, top[kCandidates - 1])) continue;
      int at = n < kCandidates ? n++ : kCandidates - 1;
      for (; at > 0 && better(c, top[static_cast<size_t>(at - 1)]); --at)
        top[static_cast<size_t>(at)] = top[static_cast<size_t>(at - 1)];
      top[static_cast<size_t>(at)] = c;
    }
  }
  for (int k = 0; k < n; ++k) {
    const auto [v, id] = top[static_cast<size_t>(k)];
    if (std::isinf(v) && v < 0) return -1;
    if (id != refused && constraint.allows(id, tokens_left)) return id;
  }
  return -1;
}

}  // namespace

int32_t pick_constrained(Sampler& sampler, grammar::Matcher& constraint, int32_t greedy,
                         const std::function<float*()>& logits, int64_t vocab, int tokens_left,
                         int* masked) {
  if (sampler.greedy() && constraint.allows(greedy, tokens_left))
    return sampler.pick(greedy, nullptr, vocab);
  float* l = logits();
  if (sampler.greedy()) {
    int32_t best = best_allowed(constraint, l, vocab, greedy, tokens_left);
    if (best < 0) {
      if (masked) ++*masked;
      best = constraint.masked_argmax(l, vocab, tokens_left);
    }
    return sampler.pick(best, nullptr, vocab);
  }
  if (masked) ++*masked;
  constraint.apply_mask(l, vocab, tokens_left);
  return sampler.pick_from_logits(l, vocab);
}

std::vector<int32_t> generate(Executor& ex, const Program& program,
                              const std::vector<int32_t>& prompt, int max_new_tokens,
                              Sampler& sampler, bool needs_logits, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats, grammar::Matcher* constraint) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (start_pos < 0 || start_pos + static_cast<int64_t>(prompt.size()) >= program.max_ctx)
    fail(
        "the prompt has {} tokens (after {} in context) but the context holds {} (use a shorter "
        "prompt or a larger --seq_len)",
        prompt.size(), start_pos, program.max_ctx);
  const int64_t vocab = program.tensors[program.logits].shape.back();
  // A constrained greedy step reads the logits back only when the constraint refuses the argmax;
  // every other sampler reads them every step. Greedy decoding without logits runs several steps a
  // submit (Executor::decode_greedy: each step's argmax feeds the next on the device), a power of
  // two up to greedy_batch() (or greedy_batch() itself), consumed one token at a time:
  // unconstrained, as many as are left to generate; constrained, n > 1 steps only after
  // constrained_ahead() * (n - 1) argmaxes in a row were allowed (so 1 step after a refusal, then
  // 2, 4, ... as the run grows, and a refused argmax wastes at most 1 / constrained_ahead() of the
  // steps before it, plus one). At the first token of a batch the constraint refuses, the rest of
  // the batch is dropped (their KV rows lie past the position decoding continues from and are
  // rewritten by the steps that follow, as after an eos) and the refused step's logits are read:
  // last_logits where it was the batch's last step, else that step runs again.
  const int batch = std::max(1, ex.greedy_batch());
  const int ahead_ratio = std::max(1, ex.constrained_ahead());
  std::vector<float> logits(needs_logits || constraint ? static_cast<size_t>(vocab) : 0);
  float* logits_out = needs_logits ? logits.data() : nullptr;
  std::vector<int32_t> out, ahead;  // ahead: greedy tokens decoded but not yet consumed
  size_t ahead_at = 0;
  int allowed_run = 0;  // consecutive constrained steps whose argmax the constraint allowed
  int pos = start_pos;
  GenerateStats st;
  const auto constrained_logits = [&]() -> float* {
    if (logits_out) return logits.data();  // read back with the step
    const auto l0 = clock::now();
    if (ahead_at < ahead.size()) {  // `greedy` came from a batch's step before its last
      ex.forward(&out.back(), 1, pos - 1, logits.data());
      ++st.decode_submits;
      ++st.wasted_steps;
    } else {
      ex.last_logits(logits.data());
    }
    st.constraint_logits_ms += std::chrono::duration<double, std::milli>(clock::now() - l0).count();
    return logits.data();
  };
  st.prompt_tokens = static_cast<int>(prompt.size());
  auto t0 = clock::now();
  int32_t greedy = ex.forward(prompt.data(), static_cast<int>(prompt.size()), pos, logits_out);
  pos += static_cast<int>(prompt.size());
  auto t1 = clock::now();
  st.prefill_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  while (max_new_tokens > 0) {
    int32_t next = 0;
    if (constraint) {
      // Tokens left, this one included: the budget the constraint keeps the text completable in.
      const int left = std::max(
          1, std::min(max_new_tokens - static_cast<int>(out.size()), program.max_ctx - pos + 1));
      const auto c0 = clock::now();
      const double logits_before = st.constraint_logits_ms;
      next = pick_constrained(sampler, *constraint, greedy, constrained_logits, vocab, left,
                              &st.masked_steps);
      // (a greedy sampler's pick is the argmax exactly when the constraint allows it)
      allowed_run = next == greedy ? allowed_run + 1 : 0;
      if (next != greedy && sampler.greedy()) ++st.refused_steps;
      if (constraint->is_eos(next) && constraint->complete()) {
        st.stopped_by_eos = true;
        break;
      }
      if (!constraint->accept_token(next))
        fail("the constraint refused token {} that its own mask allowed (a bug)", next);
      st.constraint_ms += std::chrono::duration<double, std::milli>(clock::now() - c0).count() -
                          (st.constraint_logits_ms - logits_before);
    } else {
      next = sampler.pick(greedy, logits_out, vocab);
    }
    if (std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) {
      st.stopped_by_eos = true;
      break;
    }
    out.push_back(next);
    if (on_token && !on_token(next)) {
      st.stopped_by_callback = true;
      break;
    }
    if (constraint && constraint->finished()) {
      st.stopped_by_eos = true;  // nothing but the end may follow
      break;
    }
    if (static_cast<int>(out.size()) >= max_new_tokens || pos >= program.max_ctx) break;
    if (needs_logits) {
      greedy = ex.forward(&out.back(), 1, pos, logits_out);
      ++st.decode_submits;
    } else {
      if (next != greedy) {  // refused: the batch's later steps followed the argmax, not `next`
        st.wasted_steps += static_cast<int>(ahead.size() - ahead_at);
        ahead_at = ahead.size();
      }
      if (ahead_at == ahead.size()) {
        const int cap =
            std::min({max_new_tokens - static_cast<int>(out.size()), program.max_ctx - pos, batch});
        const auto may = [&](int n) {
          return n <= cap && (!constraint || ahead_ratio * (n - 1) <= allowed_run);
        };
        int n = 1;
        while (may(2 * n)) n *= 2;
        if (may(batch)) n = batch;
        ahead.resize(static_cast<size_t>(n));
        ex.decode_greedy(out.back(), pos, n, ahead.data());
        ++st.decode_submits;
        ahead_at = 0;
      }
      greedy = ahead[ahead_at++];
    }
    ++pos;
  }
  st.wasted_steps += static_cast<int>(ahead.size() - ahead_at);
  st.generated_tokens = static_cast<int>(out.size());
  st.end_pos = pos;
  st.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
  if (stats) *stats = st;
  return out;
}

std::vector<int32_t> generate(Executor& ex, const Program& program,
                              const std::vector<int32_t>& prompt, int max_new_tokens,
                              const SamplingParams& sp, const std::vector<int>& eos_ids,
                              int start_pos, const std::function<bool(int32_t)>& on_token,
                              GenerateStats* stats) {
  Sampler sampler(sp);
  sampler.add_context(prompt);
  return generate(ex, program, prompt, max_new_tokens, sampler, sp.needs_logits(), eos_ids,
                  start_pos, on_token, stats);
}

}  // namespace vkllm
