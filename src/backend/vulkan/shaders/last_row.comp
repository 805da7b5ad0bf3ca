#version 450
// last_row: y[0, :] = x[T - 1, :]. VKLLM_BATCH (a batched forward, docs/ir.md): y[i, :] =
// x[brow[OFF + i], :] for the T output rows listed at word OFF of the rows buffer.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, y, writeonly)
#ifdef VKLLM_BATCH
layout(std430, binding = 2) readonly buffer ROWS { uint brow[]; };
layout(push_constant) uniform PC { uint N, T, OFF; } pc;
#else
layout(push_constant) uniform PC { uint N, T; } pc;
#endif

void main() {
  const uint j = flat_group() * WG + gl_LocalInvocationID.x;
#ifdef VKLLM_BATCH
  if (j >= pc.N * pc.T) return;
  const uint i = j / pc.N, d = j % pc.N;
  STOREF(y, Y16, j, LOADF(x, X16, brow[pc.OFF + i] * pc.N + d));
#else
  if (j >= pc.N) return;
  STOREF(y, Y16, j, LOADF(x, X16, (pc.T - 1u) * pc.N + j));
#endif
}
