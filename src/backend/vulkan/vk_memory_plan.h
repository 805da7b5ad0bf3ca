// The activation memory planner: which device buffer each activation of a program lives in. A pure
// function of the program and its plans' fused runs (no device), so its invariant is tested
// directly: two activations share a buffer only where their lifetimes do not overlap.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/vulkan/vk_fused.h"
#include "ir/program.h"

namespace vkllm::vk {

struct MemoryPlan {
  // Per tensor: the first and last op index over which it must keep its value (-1, -1: not an
  // activation any op writes). logits and next_token live to the end of the program.
  std::vector<int> first, last;
  // Per tensor an op writes: its slot (-1: none; a slot an activation frees is reused, one any
  // other output takes stays its own), and each slot's bytes (its largest tenant).
  std::vector<int> slot_of;
  std::vector<uint64_t> slot_bytes;
};

// Liveness serves every plan at once: a tensor is born at the first op of the step that writes it
// and lives through the last op of every step that reads it (an op fused into the next one reads
// its inputs as late as that one runs), so no buffer a step writes shares memory with one it
// reads, however its kernels order their work. A decode chain's stages are steps of their own: the
// grid sync between two stages orders them as a dispatch boundary would. Slots are reused once
// their last reader has run, the smallest free one that fits first. `bytes` gives a tensor's size.
// Fails with one line on an activation read before any op writes it, or written twice.
MemoryPlan plan_activation_memory(const Program& p,
                                  const std::vector<const std::vector<FusedRun>*>& plans,
                                  const std::string& unfused_family,
                                  const std::function<uint64_t(const TensorDecl&)>& bytes);

// A tensor's device bytes: max_rows rows for a [-1, N] tensor; a batched executor's (pool_rows >
// 0: its pool's blocks times their tokens) KV caches hold pool_rows rows and its [1, N]
// activations max_rows (a row per output row).
uint64_t executor_tensor_bytes(const TensorDecl& t, uint64_t max_rows, uint64_t pool_rows);

// An executor's buffers (bufs[i] for tensor i): the activations in the slots of
// plan_activation_memory over its plans, a buffer each for the KV caches (zeroed) and the input
// (host-visible); executor_tensor_bytes sizes them, except that the caches of cache_group 1 (a
// batched executor's window pool: batch_cache_groups) hold window_rows rows. Returns the slots'
// count.
size_t allocate_program_buffers(Allocator& alloc, const Program& p,
                                const std::vector<const std::vector<FusedRun>*>& plans,
                                const std::string& unfused_family, uint64_t max_rows,
                                uint64_t pool_rows, std::vector<Buffer>& bufs,
                                uint64_t window_rows = 0, const std::vector<int>& cache_group = {});

}  // namespace vkllm::vk
