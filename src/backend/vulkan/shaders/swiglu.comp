#version 450
// swiglu: y = gate * sigmoid(gate) * up, elementwise.
// VKLLM_QUANT (swiglu_quant, when only linear_8da4w ops read y): one workgroup per row of N
// values, which also quantizes the row as stored into the int8 scratch (quant.glsl) for them.
#ifdef VKLLM_QUANT
#define WG 256
#endif
#include "common.glsl"
layout(constant_id = 1) const bool G16 = false;
layout(constant_id = 2) const bool U16 = false;
layout(constant_id = 3) const bool Y16 = false;
DECL_FBUF(0, g, readonly)
DECL_FBUF(1, u, readonly)
DECL_FBUF(2, y, writeonly)

// Element i of y, as y stores it.
float yv(uint i) {
  const float gv = LOADF(g, G16, i);
  const float v = gv / (1.0 + exp(-gv)) * LOADF(u, U16, i);
#ifdef VKLLM_F16
  if (Y16) return float(float16_t(v));
#endif
  return v;
}

#ifdef VKLLM_QUANT
#define QUANT_ROW_BINDING 3
#include "quant.glsl"
layout(push_constant) uniform PC { uint N, rows; } pc;
float row_value(uint r, uint j) { return yv(r * pc.N + j); }

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  float lo = 0.0, hi = 0.0;
  for (uint j = tid; j < pc.N; j += WG) {
    const float v = yv(r * pc.N + j);
    STOREF(y, Y16, r * pc.N + j, v);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(r, pc.N, lo, hi);
}
#else
layout(push_constant) uniform PC { uint n; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, yv(i));
}
#endif
