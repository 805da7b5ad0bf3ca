#version 450
// bias_add: y[t, j] = x[t, j] + b[j], the fp32 bias b of width N broadcast over the rows.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer B_F { float b_f[]; };
DECL_FBUF(2, y, writeonly)
layout(push_constant) uniform PC { uint n; uint width; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, LOADF(x, X16, i) + b_f[i % pc.width]);
}
