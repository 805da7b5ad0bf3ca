// Does a backend decode greedily as the CPU reference does on the same program?
//
// The tested backend decodes greedily; the reference is teacher-forced along the tested backend's
// tokens, and at every step the reference's own logits l_ref judge the tested backend's logits
// l_test and its token t (docs/gates.md):
//  - t must be the reference's argmax r, unless the reference's own margin l_ref[r] - l_ref[t] is
//    at most the recipe's `max_tie_margin` (a near tie); at most `max_near_tie_fraction` of the
//    steps may be near ties;
//  - where the logits decide (the union of both backends' top kAgreementTopK tokens) every
//    |l_test - l_ref| must be at most `max_topk_diff`;
//  - the whole-vocabulary logits NMSE must be at most `max_nmse`; any non-finite logit fails.
// The bounds are per recipe, in one table (agreement_bounds_table), set from measurement on the
// 21 twin artifacts (docs/gates.md has the measurements and the factor above them). The test's
// margin is judged by the reference's logits only: a bound on l_test cannot fail, since t is
// always the argmax of the logits the tested backend returns.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/executor.h"

namespace vkllm {

inline constexpr int kAgreementTopK = 32;

struct AgreementBounds {
  std::string recipe;
  double max_tie_margin = 0;         // reference logits: l_ref[r] - l_ref[t] of a near tie
  double max_near_tie_fraction = 0;  // of the requested steps, rounded up
  double max_topk_diff = 0;          // max |l_test - l_ref| over both top-k sets
  double max_nmse = 0;               // whole-vocabulary logits NMSE
  std::string why;                   // where the numbers come from (one line)
};

// Every recipe's bounds, in the order of recipe_names(). The single source of truth: docs/gates.md
// prints the same table (`AgreementBounds.DocTableMatchesTheCode` checks it).
const std::vector<AgreementBounds>& agreement_bounds_table();
// The row of `recipe`; throws Error for a recipe the table does not know.
const AgreementBounds& agreement_bounds(const std::string& recipe);

struct AgreementOptions {
  int max_new_tokens = 50;
  AgreementBounds bounds;  // default: all zero (exact agreement required)
  std::vector<int32_t> eos_ids;
};

struct Agreement {
  bool ok = true;
  std::string reason;  // the first failure, one line
  int steps = 0, exact = 0, near_ties = 0, max_near_ties = 0;
  double worst_nmse = 0, worst_tie_margin = 0, worst_topk_diff = 0;
  std::vector<int32_t> tokens;            // the tested backend's greedy tokens
  std::vector<double> nmse;               // logits NMSE per step
  std::vector<double> topk_diff;          // max |l_test - l_ref| over the top-k sets, per step
  std::vector<int32_t> reference_tokens;  // the reference's own greedy run (for equality)
  bool tokens_equal() const { return tokens == reference_tokens; }
};

// `vocab` is the logits width. `reference_fresh` runs the reference's own greedy decoding from
// the prompt (reported as reference_tokens); it must be a second executor of the reference
// backend, or null to skip that run.
Agreement check_agreement(Executor& test, Executor& reference, Executor* reference_fresh,
                          const std::vector<int32_t>& prompt, int64_t vocab,
                          const AgreementOptions& opt);

}  // namespace vkllm
