#version 450
// geglu: y = gelu_tanh(gate) * up, elementwise (Gemma's MLP), with
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp32 as the CPU reference
// orders it; tanh(z) as 1 - 2 / (exp(2z) + 1), which saturates to +-1 instead of overflowing.
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
  const float x = LOADF(g, G16, i);
  const float inner = 0.7978845608028654 * (x + 0.044715 * (x * x * x));
  const float th = 1.0 - 2.0 / (exp(2.0 * inner) + 1.0);
  STOREF(y, Y16, i, 0.5 * x * (1.0 + th) * LOADF(u, U16, i));
}
