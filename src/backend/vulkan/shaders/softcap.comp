#version 450
// softcap: y = c * tanh(x / c), elementwise (Gemma 2's final_logit_softcapping on the logits).
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, y, writeonly)
layout(push_constant) uniform PC { uint n; float c; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  // tanh(z) as 1 - 2 / (exp(2z) + 1): +-1 for large |z| instead of overflowing
  precise float z = LOADF(x, X16, i) / pc.c;
  precise float th = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
  STOREF(y, Y16, i, pc.c * th);
}
