#include "runtime/agreement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace vkllm {

namespace {

bool is_eos(const std::vector<int32_t>& eos, int32_t t) {
  return std::find(eos.begin(), eos.end(), t) != eos.end();
}

// The indices of the k largest values of l (ties: lower index first).
std::vector<int64_t> top_k(const std::vector<float>& l, int k) {
  std::vector<int64_t> idx(l.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  const auto kk = std::min<size_t>(static_cast<size_t>(k), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(),
                    [&](int64_t a, int64_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  idx.resize(kk);
  return idx;
}

}  // namespace

// Set from measurement (docs/gates.md, "Agreement bounds": lavapipe on all 21 twin artifacts, 50
// greedy steps of `verify --agree` on each twin's cell prompt, and the H200's published worst
// values for 8da4w). Exact recipes (fp32 arithmetic: only the float summation order differs)
// get ~200x their worst measured top-32 difference and ~100x their NMSE; recipes that round
// activations get ~3x their worst measured margin and top-32 difference, ~6x the worst NMSE and
// ~2x the worst near-tie count.
const std::vector<AgreementBounds>& agreement_bounds_table() {
  static const std::vector<AgreementBounds> t = {
      {"non-quantized", 0.01, 0.1, 0.01, 1e-9, "fp32: float summation order only"},
      {"fp16", 0.1, 0.1, 0.15, 5e-5, "fp16 activation rounding flips"},
      {"quantized-8da4w", 1.5, 0.3, 2.0, 1e-2, "int8 activation rounding flips"},
      {"quantized-8da4w-fp16", 1.5, 0.3, 2.0, 1e-2, "int8 + fp16 activation rounding flips"},
      {"quantized-8da4w-embedding", 1.5, 0.3, 2.0, 1e-2, "int8 activation rounding flips"},
      {"quantized-8da4w-fp16-embedding", 1.5, 0.3, 2.0, 1e-2,
       "int8 + fp16 activation rounding flips"},
      {"quantized-int4-weight-only", 0.01, 0.1, 0.01, 1e-9,
       "fp32 activations: float summation order only"},
  };
  return t;
}

const AgreementBounds& agreement_bounds(const std::string& recipe) {
  for (const auto& b : agreement_bounds_table())
    if (b.recipe == recipe) return b;
  fail("no agreement bounds for recipe '{}'", recipe);
}

Agreement check_agreement(Executor& test, Executor& reference, Executor* reference_fresh,
                          const std::vector<int32_t>& prompt, int64_t vocab,
                          const AgreementOptions& opt) {
  if (prompt.empty()) fail("agreement check needs a non-empty prompt");
  const AgreementBounds& b = opt.bounds;
  Agreement a;
  // Rounded up; the small slack keeps e.g. 0.3 x 50 at 15 whatever the last bit of 0.3 is.
  a.max_near_ties =
      static_cast<int>(std::ceil(b.max_near_tie_fraction * opt.max_new_tokens - 1e-9));
  std::vector<float> lt(static_cast<size_t>(vocab)), lr(static_cast<size_t>(vocab));
  std::vector<int32_t> ids = prompt;
  int pos = 0;
  // Every step is measured; the first failure is the reason.
  auto failed = [&](const std::string& why) {
    if (a.ok) a.reason = fmt::format("step {}: {}", a.steps - 1, why);
    a.ok = false;
  };
  for (int step = 0; step < opt.max_new_tokens; ++step) {
    const int T = static_cast<int>(ids.size());
    const int32_t t = test.forward(ids.data(), T, pos, lt.data());
    const int32_t r = reference.forward(ids.data(), T, pos, lr.data());
    pos += T;
    bool finite = true;
    double num = 0, den = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double d = static_cast<double>(lt[i]) - lr[i];
      finite = finite && std::isfinite(d);
      num += d * d;
      den += static_cast<double>(lr[i]) * lr[i];
    }
    const double nmse = !finite ? INFINITY : den > 0 ? num / den : num;
    double topk = finite ? 0 : INFINITY;
    if (finite) {
      for (const auto* l : {&lr, &lt})
        for (int64_t i : top_k(*l, kAgreementTopK))
          topk = std::max(topk, std::fabs(static_cast<double>(lt[i]) - lr[i]));
    }
    ++a.steps;
    a.nmse.push_back(nmse);
    a.topk_diff.push_back(topk);
    a.tokens.push_back(t);
    a.worst_nmse = std::max(a.worst_nmse, nmse);
    a.worst_topk_diff = std::max(a.worst_topk_diff, topk);
    if (!finite) failed("a logit of the tested backend is not finite");
    if (nmse > b.max_nmse)
      failed(
          fmt::format("logits NMSE {:.3g} against the reference exceeds {:.3g}", nmse, b.max_nmse));
    if (topk > b.max_topk_diff)
      failed(fmt::format("a top-{} logit differs from the reference's by {:.3g}, more than {:.3g}",
                         kAgreementTopK, topk, b.max_topk_diff));
    if (t < 0 || t >= vocab) {
      failed(fmt::format("token {} is outside the vocabulary ({})", t, vocab));
      break;
    }
    if (t == r) {
      ++a.exact;
    } else {
      const double margin = static_cast<double>(lr[r]) - lr[t];
      ++a.near_ties;
      a.worst_tie_margin = std::max(a.worst_tie_margin, margin);
      if (!(margin <= b.max_tie_margin))
        failed(
            fmt::format("chose token {} where the reference chose {} by a margin of {:.3g} of the "
                        "reference's logits, more than the near-tie bound {:.3g}",
                        t, r, margin, b.max_tie_margin));
      else if (a.near_ties > a.max_near_ties)
        failed(fmt::format("{} near ties, more than the {} allowed in {} steps", a.near_ties,
                           a.max_near_ties, opt.max_new_tokens));
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
