#version 450
// swiglu: y = gate * sigmoid(gate) * up, elementwise.
// VKLLM_QUANT (swiglu_quant, when only linear_8da4w ops read y and a row fits ROW_MAX): one
// workgroup per row of N values held in registers (quant.glsl), which also quantizes the row as
// stored into the int8 scratch for them.
#extension GL_KHR_shader_subgroup_arithmetic : require
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

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  [[unroll]] for (uint i = 0u; i < ROW_CHUNKS; ++i) {
    const uint j = r * pc.N + 4u * (tid + i * WG);
    if (4u * (tid + i * WG) < pc.N) row_v[i] = vec4(yv(j), yv(j + 1u), yv(j + 2u), yv(j + 3u));
  }
  [[unroll]] for (uint i = 0u; i < ROW_CHUNKS; ++i) {
    const uint j = r * pc.N + 4u * (tid + i * WG);
    if (4u * (tid + i * WG) < pc.N) {
      STOREF(y, Y16, j, row_v[i].x);
      STOREF(y, Y16, j + 1u, row_v[i].y);
      STOREF(y, Y16, j + 2u, row_v[i].z);
      STOREF(y, Y16, j + 3u, row_v[i].w);
    }
  }
  quantize_row(r, pc.N);
}
#else
layout(push_constant) uniform PC { uint n; } pc;

void main() {
  const uint i = flat_group() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  STOREF(y, Y16, i, yv(i));
}
#endif
