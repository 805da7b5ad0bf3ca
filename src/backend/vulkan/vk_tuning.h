// Every knob of the Vulkan backend in one typed struct. The defaults are the release behaviour;
// each field is either a user-facing switch (documented in docs/vulkan.md) or a measurement knob
// that forces one of the planner's choices (docs/tuning.md lists what each one measured).
//
// The environment is read in one place, read_environment() (vk_tuning.cpp), once when a Context
// is made with VulkanOptions::environment on; tests and tools set the fields directly. Switches
// whose results are wrong on purpose (ablations, clocks, the gates' corruption) exist only in a
// build with VKLLM_MEASURE (the dev, asan and device-measure presets), never in a release build.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vkllm {

struct Tuning {
  // Decode mat-vecs (vk_ops_internal.h). Parts a row's blocks are summed in: 1 (default), 2, 4 or
  // 8 forced, 0 the rule that splits rows of few-row mat-vecs (decode chains need 1).
  uint32_t matvec_parts = 1;
  uint32_t matvec_wg = 0;        // threads of the decode mat-vec; 0: 256 on GPUs, 64 on CPUs
  int mv = -1;                   // streamed mat-vec: -1 default rule, 0 never, 1 wherever it fits
  uint32_t mv_depth = 0;         // units a batch (0: 1)
  uint32_t mv_batches = 0;       // batches in flight (0: 2 on GPUs, 1 on CPUs)
  uint32_t mv_groups = 0;        // workgroups a compute unit (0: 4)
  bool mv_wsum_nibbles = false;  // group weight sums from the nibbles

  // Prefill GEMM of linear_8da4w (GemmPlan): forced tile tokens and rows (0: the rule).
  uint32_t gemm_tile = 0, gemm_rows = 0;
  bool gemm_wide = false;  // 64 x 128 tiles first
  // The fewest tokens a forward's linear_8da4w runs on the matrix units where there are int8
  // cooperative matrices: 2-15 the rows kernel from there; 0 (the default) the tiles from 16.
  uint32_t gemm_from = 0;
  // Forwards of fewer tokens than this run the rows kernel there (16 .. 64, GemmPlan::kMaxRows).
  uint32_t gemm_rows_to = 16;
  // Forwards of 16 .. gemm_few_rows_to - 1 tokens run the rows kernel there for the linears whose
  // tiles would occupy fewer than half the compute units (0: the tiles).
  uint32_t gemm_few_rows_to = 0;
  // The fp32/fp16 mat-vec (linear.comp) loads eight values a lane at a time where K % 8 == 0.
  bool linear_vec8 = false;

  // Prefill attention: forced keys a tile (32|64), rows a thread (1|2).
  uint32_t attn_bk = 0, attn_rq = 0;
  bool attn_portable = false;  // the portable kernel where the cooperative-matrix one would run
  bool attn_gqa = false;       // a workgroup takes a KV head's group of query heads
  // Batched forwards' attention (attention.comp VKLLM_BATCH): a workgroup takes a KV head's group
  // of query heads: -1 the rule (batch_attention_groups), 0 never, 1 in every forward.
  int attn_batch_gq = -1;

  bool fuse_all = false;             // patterns off by default are used too
  std::vector<std::string> no_fuse;  // patterns whose names contain one of these are not used
  // Decode chains (linear_8da4w_chain.comp).
  bool chain = true;                   // false: no decode chains
  std::optional<int> chain_groups;     // workgroups; -1 one a compute unit; unset: the rule
  std::optional<int> chain_att_until;  // position up to which attention is a chain stage
  uint32_t chain_wg = 512;             // 512 or 256 threads
  int chain_att = -1;                  // attention stages: -1 rule, 0 never, 1 wherever they fit
  uint32_t chain_ub = 0;               // blocks a lane a unit (0: 2 for q4w chains, 1 otherwise)
  bool chain_deal = true;              // neighbouring rows to different workgroups
  int chain_split_sync = -1;           // grid sync in two halves: -1 rule (not with q4w), 0, 1

  uint32_t decode_batch = 16;  // greedy decode steps a submit
  // Constrained greedy decoding: a submit of n > 1 steps only after constrained_ahead * (n - 1)
  // allowed argmaxes in a row (Executor::constrained_ahead); 0: its default.
  uint32_t constrained_ahead = 0;
  // Waiting for a submit: 1 polls its fence (a busy host core, the result seen as it lands), 0
  // sleeps in vkWaitForFences; -1 the rule: poll on GPUs, sleep on CPU devices (whose cores run
  // the work being waited for).
  int fence_spin = -1;
  bool pipeline_stats = false;  // capture each pipeline's compiler statistics (and print them)
  uint64_t memory_budget =
      0;  // device bytes an allocator may take before failing as OOM (0: no cap)
  bool ignore_selftest = false;  // run paths that `vkllm selftest` found wrong on this device
  // The pipeline cache on disk (VKLLM_PIPELINE_CACHE, vk_pipeline_cache.h): "" (or "1") its
  // files under the user's cache folder, "0" no pipeline cache, else the folder of its files.
  // Changes no kernel choice, so describe() leaves it out.
  std::string pipeline_cache;
  // The optional paths set either way by the user (VKLLM_NO_INT_DOT, VKLLM_NO_COOPMAT,
  // VKLLM_NO_FUSION set to 0 or 1): a selftest verdict does not override them.
  bool chose_int_dot = false, chose_coopmat = false, chose_fusion = false;

  // Measurement build only (VKLLM_MEASURE); always the defaults elsewhere.
  uint32_t gemm_ablate = 0;   // cooperative-matrix GEMM ablation bits (wrong results)
  uint32_t att_measure = 0;   // decode attention measurement modes (wrong results but 0)
  bool chain_noload = false;  // chains sum made-up weights (wrong results)
  bool chain_clock = false;   // chains time their phases in SM cycles
  std::string corrupt_op;     // zero this op family's outputs (the gates' can-fail tests)

  // The fields that differ from the defaults, as "name=value" joined by spaces ("defaults" when
  // none): printed by VKLLM_PROFILE and `vkllm devices --verbose`.
  std::string describe() const;
};

// Whether this build has the measurement switches (VKLLM_MEASURE).
constexpr bool kMeasureBuild =
#ifdef VKLLM_MEASURE
    true;
#else
    false;
#endif

struct VulkanOptions;
// Reads the VKLLM_* variables of the Vulkan backend (docs/vulkan.md) into `opt` and its tuning;
// options already set stay set. Fails with one line on a malformed value, and on a measurement
// switch in a build without them.
void read_environment(VulkanOptions& opt);

}  // namespace vkllm
