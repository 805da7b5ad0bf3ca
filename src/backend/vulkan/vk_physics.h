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

}  // namespace vkllm::vk
