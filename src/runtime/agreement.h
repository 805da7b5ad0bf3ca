// Does a backend decode greedily as the CPU reference does on the same program?
//
// Both executors run the same token sequence (the tested backend's own greedy choices, teacher-
// forcing the reference), and at every step the two logits vectors are compared:
//  - their NMSE must stay under a bound (a broken kernel gives NMSE ~1; float summation order
//    gives ~1e-12, an int8 activation rounding flip in 8da4w recipes up to ~1e-5);
//  - the tested backend's token must be the reference's argmax, or a near tie: if every logit of
//    the tested backend is within `noise` = max |l_test - l_ref| of the reference's, its argmax t
//    satisfies l_ref[r] - l_ref[t] <= 2 noise for the reference's argmax r. Any larger margin
//    means the tested backend chose against its own logits' closeness, and fails.
// Exact token equality is reported separately: dynamic int8 activation quantization turns a
// last-bit difference into a whole quantization step, and the random twins have near ties.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace vkllm {

struct AgreementOptions {
  int max_new_tokens = 50;
  double max_logits_nmse = 1e-3;
  std::vector<int32_t> eos_ids;
};

struct Agreement {
  bool ok = true;
  std::string reason;  // the first failure, one line
  int steps = 0, exact = 0, near_ties = 0;
  double worst_nmse = 0, worst_tie_margin = 0;
  std::vector<int32_t> tokens;            // the tested backend's greedy tokens
  std::vector<double> nmse;               // logits NMSE per step
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
