// Per-op comparison bounds (NMSE = sum (got - want)^2 / sum want^2) of a kernel against the CPU
// reference kernel, by op kind and output dtype: the one table the Vulkan op and model tests
// (tests/backend_vulkan) and the perturbation table (tests/runtime/test_perturb.cpp) use.
// ~100-200x above the worst lavapipe measurement of each kind (docs/gates.md, "Per-op bounds").
#pragma once
#include <string>

#include "ir/program.h"

namespace vkllm::testutil {

// fp32 elementwise ops (add, swiglu, geglu, rope): measured 0 .. 2.2e-15 (last-ulp exp/sin/cos).
inline constexpr double kElemNmse = 1e-13;
// rms_norm (a reduction): measured <= 9.0e-14.
inline constexpr double kNormNmse = 1e-11;
// linear with f32, f16 or int4 weights, and int8 activations: measured <= 9.7e-14 (summation
// order; the 8da4w integer dot products and the int8 quantization are exact).
inline constexpr double kLinearNmse = 1e-11;
// attention (softmax and two reductions, split over key tiles): measured <= 4.7e-13.
inline constexpr double kAttentionNmse = 1e-10;
// Any op whose output is stored as fp16: one fp16 ulp where the two fp32 values straddle a
// rounding boundary, at most (2^-10)^2 = 9.5e-7 even if every element flipped (docs/vulkan.md);
// measured <= 1.2e-8.
inline constexpr double kF16OutNmse = 1e-6;
// Whole-model logits of fp32 programs (VulkanModels): measured <= 8.9e-14.
inline constexpr double kModelExactNmse = 1e-10;

// The bound for an op of `family` whose output is stored as `out`.
inline double op_nmse_bound(const std::string& family, DType out) {
  if (out == DType::F16) return kF16OutNmse;
  if (family.rfind("linear", 0) == 0) return kLinearNmse;
  if (family == "attention") return kAttentionNmse;
  if (family == "rms_norm") return kNormNmse;
  return kElemNmse;
}

}  // namespace vkllm::testutil
