// Per-op comparison bounds (NMSE = sum (got - want)^2 / sum want^2) of a kernel against the CPU
// reference kernel, by op kind and output dtype: the one table the Vulkan op and model tests
// (tests/backend_vulkan) and the perturbation table (tests/runtime/test_perturb.cpp) use.
// Set a few orders of magnitude above what lavapipe measures (docs/gates.md, "Per-op bounds").
#pragma once
#include <string>

#include "ir/program.h"

namespace vkllm::testutil {

// fp32 elementwise ops (add, swiglu, rope) and norms: measured <= 1e-15 (last-ulp exp/sqrt).
inline constexpr double kElemNmse = 1e-12;
// fp32 mat-vec / matmul (f32, f16 or int4 weights, int8 activations) and attention: measured
// <= 3e-15 (float summation order; the 8da4w integer dot products are exact).
inline constexpr double kMatNmse = 1e-11;
// Any op whose output is stored as fp16: one fp16 ulp where the two fp32 values straddle a
// rounding boundary, at most (2^-10)^2 = 9.5e-7 even if every element flipped (docs/vulkan.md).
inline constexpr double kF16OutNmse = 1e-6;
// Whole-model logits of the Vulkan interpreter tests (test_vk_executor, test_vk_models): fp32 and
// int4-weight-only programs measured <= 1e-11; fp16 and 8da4w+fp16 up to 7.3e-5 (an fp16
// rounding flip moves an int8 quantization step, docs/vulkan.md).
inline constexpr double kModelExactNmse = 1e-9;
inline constexpr double kModelF16Nmse = 5e-4;

// The bound for an op of `family` whose output is stored as `out`.
inline double op_nmse_bound(const std::string& family, DType out) {
  if (out == DType::F16) return kF16OutNmse;
  if (family.rfind("linear", 0) == 0 || family == "attention") return kMatNmse;
  return kElemNmse;
}

}  // namespace vkllm::testutil
