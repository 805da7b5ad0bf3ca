#version 450
// A check of grid_sync.glsl's hand-off (tests/backend_vulkan: GridSyncHandsDataAcrossWorkgroups):
// in each round every workgroup writes its slice of a buffer, syncs, reads another workgroup's
// slice and counts the words that are not what that workgroup wrote, then syncs again before the
// next round overwrites them. BDA (a specialization constant) reaches the buffer through its
// device address, as the decode chain reaches its tensors; else through a binding.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#define WG 256
#include "common.glsl"
#define GS_BINDING 0
#define GS_SPIN 1
#include "grid_sync.glsl"
layout(constant_id = 2) const bool BDA = false;
layout(std430, binding = 1) coherent buffer Data { uint data[]; };
layout(std430, binding = 2) buffer Err { uint err[]; };  // [0] wrong words, [1] the first one
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer DRef { uint v[]; };
layout(push_constant) uniform PC { uint rounds; uvec2 addr; } pc;

uint expected(uint k, uint i) { return k * 2654435761u ^ i; }
void put(uint i, uint v) {
  if (BDA)
    DRef(pc.addr).v[i] = v;
  else
    data[i] = v;
}
uint get(uint i) { return BDA ? DRef(pc.addr).v[i] : data[i]; }

void main() {
  const uint G = grid_groups(), g = flat_group(), t = gl_LocalInvocationID.x;
  for (uint k = 0; k < pc.rounds; ++k) {
    put(g * WG + t, expected(k, g * WG + t));
    grid_sync(2u * k);
    const uint i = ((g + 1u + k) % G) * WG + (t * 7u + k) % WG;
    const uint v = get(i);
    if (v != expected(k, i) && atomicAdd(err[0], 1u) == 0u) err[1] = k * 65536u + i;
    grid_sync(2u * k + 1u);
  }
  grid_exit();
}
