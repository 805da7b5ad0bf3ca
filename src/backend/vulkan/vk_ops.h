// One prepared op of a program on Vulkan: pipelines chosen, descriptor sets written once (weights
// larger than one binding split into row chunks), dispatches recorded per forward with the token
// count T and position pos as push constants.
#pragma once
#include <vulkan/vulkan.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_pipeline.h"
#include "ir/program.h"

namespace vkllm::vk {

// What ops share: the device, pipelines, memory, and scratch owned by the interpreter.
struct OpEnv {
  Context& ctx;
  Kernels& kernels;
  Allocator& alloc;
  const Program& program;
  int max_tokens;                                         // rows of every [-1, N] activation buffer
  std::function<const Buffer&(int32_t)> buffer;           // device buffer of a tensor
  std::function<std::span<const uint8_t>(int32_t)> host;  // host bytes of a weight (rope tables)
  // linear_8da4w scratch (int8 activations and per-token scale / zero point), shared by all ops.
  uint64_t act_q_bytes = 0;
  Buffer act_q, act_qp;
  std::map<std::pair<int32_t, float>, Buffer> rope_tables;  // by (inv_freq tensor, factor)
};

class PreparedOp {
 public:
  using RecordFn = std::function<void(VkCommandBuffer, int T, int pos)>;
  using CheckFn = std::function<void(const int32_t* ids, int T)>;
  PreparedOp(RecordFn r, CheckFn c) : record_(std::move(r)), check_(std::move(c)) {}
  // Records the op's dispatches (with barriers between its own stages; none after the last).
  void record(VkCommandBuffer cb, int T, int pos) const { record_(cb, T, pos); }
  // Host-side checks of the forward's inputs (token ids in range).
  void check(const int32_t* ids, int T) const {
    if (check_) check_(ids, T);
  }

 private:
  RecordFn record_;
  CheckFn check_;
};

// Bytes of linear_8da4w scratch the op needs per token (0 for other families).
uint64_t act_quant_bytes_per_token(const Program& p, const Op& op);

std::unique_ptr<PreparedOp> prepare_op(OpEnv& env, const Op& op);

// A compute -> compute memory barrier (every shader write visible to later shader reads/writes).
void compute_barrier(VkCommandBuffer cb);

}  // namespace vkllm::vk
