#version 450
// last_row: y[0, :] = x[T - 1, :].
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, y, writeonly)
layout(push_constant) uniform PC { uint N, T; } pc;

void main() {
  const uint j = flat_group() * WG + gl_LocalInvocationID.x;
  if (j >= pc.N) return;
  STOREF(y, Y16, j, LOADF(x, X16, (pc.T - 1u) * pc.N + j));
}
