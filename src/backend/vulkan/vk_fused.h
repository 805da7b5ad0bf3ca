// The forwards' fusion: declarative tables of patterns (vk_fused.cpp) that turn runs of program
// ops into one prepared step each: the decode step's (one-token forwards) and the prefill's
// (forwards of several tokens: the rope of q and k in the prefill attention). The IR itself
// stays fine-grained and the CPU reference interprets it as it is.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_ops.h"

namespace vkllm::vk {

// Ops first..last of the program, recorded as one step of a one-token forward.
struct FusedRun {
  size_t first = 0, last = 0;
  std::string pattern;           // the table's name for it, e.g. "rms_norm+linear_8da4w x3"
  bool private_scratch = false;  // derives its int8 rows itself (not in the shared scratch)
  bool tail = false;             // a tail run (reads its input's int8 row from the scratch)
  bool quantize_out = false;     // attention runs: quantize the output for the tail run after
  // The tensor the shared int8 scratch holds when the run starts (-1: none; the executor's plan
  // sets it from the steps before): a tail run quantizes its input only when it is another.
  int32_t scratch_in = -1;
  // A chain run: consecutive mat-vec runs, each a stage of one persistent dispatch
  // (linear_8da4w_chain.comp); first..last span them all.
  std::vector<FusedRun> stages;
};

// Workgroups of the decode chain's resident grid on this device (0: no chains): one 512-thread
// workgroup an SM where the driver reports SMs, else Tuning::chain_groups, on devices with buffer
// device addresses; Tuning::chain = false wins.
uint32_t chain_groups(const DeviceInfo& dev, const Tuning& tune);

// The program's fused runs for one-token forwards, in program order, none overlapping. Ops of
// family tune.corrupt_op are never fused (the test corruption switch zeroes their real outputs).
// Needs only the program: the executor plans buffer liveness from the runs before preparing them.
// dev: the device's smallest subgroup size (the mat-vec kernels' lane layout needs it) and its
// shared memory (tail runs need kTailShared). attention_stages = false: no attention run is a
// chain's stage (the plan for long positions, chain_attention_until). paged: the KV caches are a
// pool of blocks (a batched executor's one-row forwards): no attention and no head runs (their
// kernels read one sequence's contiguous cache and the forward's last row).
std::vector<FusedRun> find_fused_runs(const Program& p, const DeviceInfo& dev, const Tuning& tune,
                                      bool attention_stages = true, bool paged = false);
// The program's fused runs for forwards of several tokens (prefill), in program order: the ropes
// of q and k in the prefill attention (vk_fused.cpp kPrefillPatterns), where the device has a
// prefill attention kernel for the run. Tuning::no_fuse applies as to the decode runs. batched:
// a batched executor's forwards, whose attention runs take the batched kernels (every device).
std::vector<FusedRun> find_prefill_runs(const Program& p, const Context& ctx, bool batched = false);
// The first decode position at which a step's attention items would fill more than three
// quarters of the chain's grid, past which the stage was measured to lose (a chain workgroup runs
// its items one after the other, the attention's own dispatch has a workgroup an item): the
// executor runs the plan of find_fused_runs(..., false) from there. Tuning::chain_att_until
// overrides (measurement).
int chain_attention_until(const Program& p, const DeviceInfo& dev, const Tuning& tune);

// The prepared step of one run (its buffers allocated).
std::unique_ptr<PreparedOp> prepare_fused(OpEnv& env, const FusedRun& run);

// VKLLM_CHAIN_CLOCK=1: prints the chains' cycles per stage phase (mean over workgroups and the
// slowest workgroup's mean) to stderr.
void print_chain_clock(Allocator& alloc, const ChainClock& clock);

}  // namespace vkllm::vk
