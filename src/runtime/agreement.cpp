#include "runtime/agreement.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vkllm {

namespace {

bool is_eos(const std::vector<int32_t>& eos, int32_t t) {
  return std::find(eos.begin(), eos.end(), t) != eos.end();
}

}  // namespace

Agreement check_agreement(Executor& test, Executor& reference, Executor* reference_fresh,
                          const std::vector<int32_t>& prompt, int64_t vocab,
                          const AgreementOptions& opt) {
  if (prompt.empty()) fail("agreement check needs a non-empty prompt");
  Agreement a;
  std::vector<float> lt(static_cast<size_t>(vocab)), lr(static_cast<size_t>(vocab));
  std::vector<int32_t> ids = prompt;
  int pos = 0;
  for (int step = 0; step < opt.max_new_tokens; ++step) {
    const int T = static_cast<int>(ids.size());
    const int32_t t = test.forward(ids.data(), T, pos, lt.data());
    const int32_t r = reference.forward(ids.data(), T, pos, lr.data());
    pos += T;
    double num = 0, den = 0, noise = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double d = static_cast<double>(lt[i]) - lr[i];
      if (!std::isfinite(d)) noise = INFINITY;
      num += d * d;
      den += static_cast<double>(lr[i]) * lr[i];
      noise = std::max(noise, std::fabs(d));
    }
    const double nmse = den > 0 ? num / den : num;
    a.worst_nmse = std::max(a.worst_nmse, std::isfinite(noise) ? nmse : INFINITY);
    ++a.steps;
    a.nmse.push_back(nmse);
    a.tokens.push_back(t);
    if (!std::isfinite(noise) || nmse > opt.max_logits_nmse) {
      a.ok = false;
      a.reason = fmt::format("step {}: logits NMSE {:.3g} against the reference exceeds {:.3g}",
                             step, nmse, opt.max_logits_nmse);
      break;
    }
    if (t == r) {
      ++a.exact;
    } else {
      const double margin = static_cast<double>(lr[r]) - lr[t];
      if (t < 0 || t >= vocab || margin > 2 * noise) {
        a.ok = false;
        a.reason = fmt::format(
            "step {}: chose token {} where the reference chose {} by a logit margin of {:.3g}, "
            "more than twice the largest logit difference {:.3g}",
            step, t, r, margin, noise);
        break;
      }
      ++a.near_ties;
      a.worst_tie_margin = std::max(a.worst_tie_margin, margin);
    }
    if (is_eos(opt.eos_ids, t)) break;
    ids.assign(1, t);
  }
  if (reference_fresh) {
    ids = prompt;
    pos = 0;
    for (int step = 0; step < opt.max_new_tokens; ++step) {
      const int T = static_cast<int>(ids.size());
      const int32_t r = reference_fresh->forward(ids.data(), T, pos, nullptr);
      pos += T;
      a.reference_tokens.push_back(r);
      if (is_eos(opt.eos_ids, r)) break;
      ids.assign(1, r);
    }
  }
  return a;
}

}  // namespace vkllm
