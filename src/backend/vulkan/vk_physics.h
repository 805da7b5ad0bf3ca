// The device's speed physics (`vkllm bench --physics`): the fixed costs that bound a decode step
// of many small kernels, measured with GPU timestamps on the device itself (docs/perf.md, "The
// speed physics of a decode step"):
//  - one empty dispatch behind a compute barrier (what every kernel boundary of a step costs);
//  - one grid-wide sync of a resident grid (grid_sync.glsl: what a boundary costs inside one
//    persistent dispatch instead);
//  - the bandwidth of wide loads over a buffer of a mat-vec's size, in an ordinary grid (many
//    workgroups, one dispatch) and in a resident grid, alone and cut into stages between syncs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

struct PhysicsRow {
  std::string what;  // e.g. "dispatch+barrier", "grid sync", "stream"
  uint32_t groups = 0, threads = 0;
  uint64_t bytes = 0;  // stream rows: bytes read per repetition
  double us = 0;       // per unit (dispatch, sync, or stream repetition), the best of the repeats
  double gb_s = 0;     // stream rows
};

struct PhysicsOptions {
  uint32_t groups = 0;  // resident grid size; 0: the device's compute units (2 when unknown)
  int repeats = 5;
};

std::vector<PhysicsRow> measure_physics(Context& ctx, const PhysicsOptions& opt);

// `vkllm bench --gemm`: the prefill GEMM's ceiling and what linear_8da4w's tiled GEMM reaches at
// the shapes of a 512-token prefill (rows x tokens x K, from 512 x 512 x 2,048 to 8,192 x 512 x
// 8,192). The ceiling rows run only the cooperative matrices' multiply-adds on operands in
// registers (gemm_peak.comp, where the device has NV cooperative matrices; gemm_peak_khr.comp,
// rows "mma peak (KHR), ...", where it has KHR ones: Context::use_coopmat_khr).
struct GemmRow {
  std::string what;              // "mma peak ..." or "linear_8da4w_mm <path>, <BT>-token tiles"
  uint32_t M = 0, N = 0, K = 0;  // weight rows, tokens, input width (0 for the ceiling rows)
  double us = 0;                 // per GEMM (or per ceiling dispatch), the best of the repeats
  double tops = 0;               // 2 M N K (or the multiply-adds' operations) per second, 1e12
};
std::vector<GemmRow> measure_gemm(Context& ctx, int repeats);

// `vkllm bench --matvec`: the decode step's linear_8da4w mat-vec (one token) at the shapes of the
// three models (q/k/v, o, gate, down, lm_head), each kernel's time per dispatch (behind a
// barrier, as in a step) and the bandwidth of its weight bytes (nibbles, scales, weight sums).
// Each repetition reads another copy of the weights (together larger than the L2), as a step
// reads each layer's weights once. Rows: the old kernel (linear_8da4w.comp's matvec_decode) and
// linear_8da4w_mv.comp at a few depths and grids; `same` says whether its output has the old
// kernel's bits on random inputs.
struct MatvecRow {
  std::string what, shape;  // kernel and settings; the model's projection
  uint32_t N = 0, K = 0, G = 0;
  double us = 0, gb_s = 0;
  bool same = true;
};
std::vector<MatvecRow> measure_matvec(Context& ctx, int repeats);

}  // namespace vkllm::vk
