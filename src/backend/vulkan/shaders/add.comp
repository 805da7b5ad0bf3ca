#version 450
// add: y = a + b, elementwise.
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;
layout(constant_id = 2) const bool B16 = false;
layout(constant_id = 3) const bool Y16 = false;
DECL_FBUF(0, a, readonly)
DECL_FBUF(1, b, readonly)
DECL_FBUF(2, y, writeonly)
layout(push_constant) uniform PC { uint n; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, LOADF(a, A16, i) + LOADF(b, B16, i));
}
