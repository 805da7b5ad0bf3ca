#version 450
// scale: y = x * s, elementwise (Gemma's embedding times sqrt(hidden)).
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, y, writeonly)
layout(push_constant) uniform PC { uint n; float s; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, LOADF(x, X16, i) * pc.s);
}
