// The executor's plan of a forward (its steps and barriers) and the per-op GPU time profile of
// VKLLM_PROFILE=1, kept apart from the interpreter (vulkan_executor.cpp) that records and times
// the steps.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_ops.h"
#include "ir/program.h"

namespace vkllm::vk {

// What a forward records: steps (one op, or a fused run of ops), their barriers, and the
// profile's sums.
struct Step {
  size_t first, last;  // program ops covered
  const PreparedOp* op;
  std::string key;  // the profile's row
};
struct Plan {
  std::vector<Step> steps;
  std::vector<bool> barrier_before;
  size_t barriers = 0;      // between and inside steps
  uint64_t dispatches = 0;  // of the last recording
  std::map<std::string, double> ms;
  double total = 0;
  int runs = 0;
};

// The output <- input widths of ops first..last ("8192<-2048"), for the profile's rows.
std::string profile_widths(const Program& p, size_t first, size_t last);
// The profile's row of op k run alone: its family and, where ops of one family differ in cost,
// the widths it maps, e.g. "linear_8da4w 8192<-2048". An add fused into the next op has a row
// of its own, "add (fused)", with next to no time: its work is timed in the next op's row.
std::string profile_key(const Program& p, size_t k, bool fused_into_next);
// Prints a plan's rows sorted by time to stderr: steps per forward, ms per forward and us per
// step, the GB/s of each step's weight bytes; and the kernels and barriers of a forward.
void print_plan_profile(const Program& p, const Plan& plan, const char* what,
                        size_t activation_buffers);

// A barrier goes before a step only when it reads or writes a buffer that a step since the last
// barrier wrote, or writes one that such a step read (activation buffers are shared by liveness,
// so write-after-read matters too); a step's later phases follow barriers it records itself. The
// plan is static: buffers never change after setup, and every step declares its accesses.
void plan_barriers(Plan& plan, bool decode);

// Adds one recorded forward's step times (timestamps 0..steps of `queries`) to the plan's sums.
void collect_plan_profile(Plan& plan, const Context& ctx, VkQueryPool queries);

// Records the zeroing of op's outputs (bufs[t] for tensor t) between barriers: the gates'
// can-fail switch (VKLLM_TEST_CORRUPT_OP), as a broken kernel would leave them.
void record_zero_outputs(VkCommandBuffer cb, const Op& op, const std::vector<Buffer>& bufs);

}  // namespace vkllm::vk
