#version 450
// geglu: y = gelu_tanh(gate) * up, elementwise (Gemma's MLP; common.glsl geglu_of).
#include "common.glsl"
layout(constant_id = 1) const bool G16 = false;
layout(constant_id = 2) const bool U16 = false;
layout(constant_id = 3) const bool Y16 = false;
DECL_FBUF(0, g, readonly)
DECL_FBUF(1, u, readonly)
DECL_FBUF(2, y, writeonly)
layout(push_constant) uniform PC { uint n; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, geglu_of(LOADF(g, G16, i), LOADF(u, U16, i)));
}
