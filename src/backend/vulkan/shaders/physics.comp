#version 450
// The device's speed physics (vkllm bench --physics, docs/perf.md "The speed physics"): what one
// dispatch behind a barrier costs, what one grid-wide sync of a resident grid costs, and the
// bandwidth that wide loads reach in an ordinary grid and in a resident one.
//  MODE 0: nothing (one word written by workgroup 0);
//  MODE 1: pc.n grid syncs;
//  MODE 2: read pc.words 16-byte words, every thread a strided share, four loads in flight;
//  MODE 3: pc.n stages, each reading its 1 / n of the words, then a grid sync.
#define WG_SPEC
#include "common.glsl"
layout(local_size_x_id = 1) in;
layout(constant_id = 2) const uint MODE = 0;
#define GS_BINDING 0
#define GS_SPIN 3
#include "grid_sync.glsl"
layout(std430, binding = 1) readonly buffer W { uvec4 w[]; };
layout(std430, binding = 2) buffer Out { uint outw[]; };
layout(push_constant) uniform PC { uint n, words; } pc;

// Reads words [a, b) strided over the grid's threads, four loads issued before they are used.
uvec4 stream(uint a, uint b) {
  const uint T = grid_groups() * gl_WorkGroupSize.x;
  const uint t = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uvec4 acc = uvec4(0u);
  uint i = a + t;
  for (; i + 3u * T < b; i += 4u * T) {
    const uvec4 v0 = w[i], v1 = w[i + T], v2 = w[i + 2u * T], v3 = w[i + 3u * T];
    acc ^= v0 ^ v1 ^ v2 ^ v3;
  }
  for (; i < b; i += T) acc ^= w[i];
  return acc;
}

void main() {
  uvec4 acc = uvec4(0u);
  if (MODE == 1u) {
    for (uint k = 0u; k < pc.n; ++k) grid_sync(k);
    grid_exit();
  } else if (MODE == 2u) {
    acc = stream(0u, pc.words);
  } else if (MODE == 3u) {
    const uint per = pc.words / pc.n;
    for (uint k = 0u; k < pc.n; ++k) {
      acc ^= stream(k * per, (k + 1u) * per);
      grid_sync(k);
    }
    grid_exit();
  }
  const uint x = acc.x ^ acc.y ^ acc.z ^ acc.w;
  if (x == 0x9E3779B9u || (gl_LocalInvocationIndex == 0u && flat_group() == 0u))
    outw[flat_group() % 64u] = x;  // keeps the loads; the bench reads nothing back but errors
}
