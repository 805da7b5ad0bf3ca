// Do a backend's greedy ids agree with the CPU reference backend on the same artifact?
//
// The CPU backend is teacher-forced along the given ids (prompt, then each generated id) and at
// every step its own greedy choice is compared with the given id. A step may differ only at a
// near-tie: the CPU's logit for the given id is within `tolerance` of its top logit. Recipes
// with int8 dynamic activations (8da4w) or fp16 storage need the tolerance: two float
// implementations that differ in the last bits (summation order in attention and norms) round
// some activation to a different int8 (or fp16) step, and the next layers amplify that into
// ~0.1-0.2 logits of noise, which flips the greedy choice where the top-2 gap is that small
// (e2e/README.md has the measurements). fp32 paths agree to ~1e-5 logits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm {

struct GreedyStep {
  int step = 0;
  int32_t token = 0;      // the id under test
  int32_t cpu_token = 0;  // the CPU backend's greedy choice there
  double gap = 0;         // CPU logit of cpu_token minus CPU logit of token (>= 0)
};

struct GreedyAgreement {
  int steps = 0;                      // generated ids checked (plus the eos stop, if any)
  int exact = 0;                      // steps where the ids are equal
  std::vector<GreedyStep> differing;  // the other steps
  double tolerance = 0;
  double worst_gap() const;
  bool pass() const { return worst_gap() <= tolerance; }
};

// The near-tie tolerance (logits) for a recipe: 1.5 with int8 activations or fp16 storage,
// 0.01 otherwise.
double greedy_tie_tolerance(const std::string& recipe);

// Checks `generated` (after `prompt`) against the CPU backend on `artifact`. stopped_by_eos: the
// run stopped at an eos id after `generated`, so that stop is checked as one more step (the
// CPU's best eos logit must be within tolerance of its top logit).
GreedyAgreement check_greedy_agreement(const std::string& artifact,
                                       const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& generated, bool stopped_by_eos,
                                       double tolerance);

}  // namespace vkllm
