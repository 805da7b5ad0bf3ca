// The subgroups a device really runs (subgroup_probe.comp), against what the kernels assume: every
// subgroup full (gl_SubgroupSize active invocations, numbered 0 .. size-1) and gl_NumSubgroups of
// them in a workgroup. The Vulkan spec lets a driver run partial subgroups unless the pipeline
// requires full ones (Kernels::get does where the device allows), and some do anyway: lavapipe at
// 32 lanes (docs/portability.md).
#pragma once
#include <cstdint>
#include <string>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

struct SubgroupLayout {
  uint32_t workgroup = 0;                   // threads of the probed workgroup
  uint32_t reported_size = 0;               // gl_SubgroupSize
  uint32_t active_min = 0, active_max = 0;  // active invocations of a subgroup (ballot)
  uint32_t reported_subgroups = 0;          // gl_NumSubgroups
  uint32_t seen_subgroups = 0;              // distinct gl_SubgroupID values
  bool lanes_in_order = true;  // every gl_SubgroupInvocationID is its rank among the active
  bool full() const {
    return active_min == reported_size && active_max == reported_size && lanes_in_order &&
           seen_subgroups == reported_subgroups && reported_subgroups * reported_size == workgroup;
  }
  std::string describe() const;  // one line
};

// Runs the probe with `workgroup` threads (a multiple of 64, at most the device's limit).
SubgroupLayout probe_subgroups(Context& ctx, uint32_t workgroup);

// Does a 16 x 8 int32 cooperative-matrix accumulator hold four elements a lane, every one of the
// 128 exactly once (coopmat_probe.comp)? The prefill GEMM's epilogue reads them in registers.
// Empty when it does; otherwise one line saying what the device does instead.
std::string probe_coopmat_accumulator(Context& ctx);

// Do a 16 x 8 fp32 accumulator and a 16 x 16 fp16 A operand hold their elements in the tensor
// cores' fragment layouts (lane L: rows L / 4 and L / 4 + 8, columns 2 (L % 4) and the next; the
// A operand also those columns + 8, in the order vk_probe.cpp checks)? The prefill attention's
// softmax works on its scores in registers and turns them into the A operand of P V in place, lane
// by lane. Empty when they do; otherwise one line saying which element differs.
std::string probe_coopmat_fragments(Context& ctx);

// How the device rounds fp32 to fp16 (f16_probe.comp), on values that test each rule: ties, the
// subnormal range, overflow, and a spread of random bit patterns. The kernels rely on two of them
// rounding to nearest even as core/half.h does: common.glsl's f16_round (which they use for every
// value they round and then reuse) and a store into an fp16 binding. Needs 16-bit storage.
struct F16Rounding {
  uint32_t inputs = 0;
  uint32_t f16_round_wrong = 0;  // f16_round differs from round_f16
  uint32_t store_wrong = 0;      // a store's conversion differs from f32_to_f16
  uint32_t pair_kept = 0;        // float(float16_t(x)) != round_f16(x): the pair was dropped
  std::string first_wrong;       // the first input where f16_round or the store differs
  bool ok() const { return f16_round_wrong == 0 && store_wrong == 0; }
  std::string describe() const;  // one line
};
F16Rounding probe_f16_rounding(Context& ctx);

}  // namespace vkllm::vk
