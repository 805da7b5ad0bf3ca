#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x (quant.glsl), one
// workgroup of 256 threads per token. Output: qx packed four int8 per uint (row stride K/4 words);
// qp[2t] = scale bits, qp[2t+1] = zero point. Four values a load (K % 4 == 0).
// VKLLM_SWIGLU: the swiglu op whose output only linear_8da4w ops read (prefill's down projection):
// y = gate * sigmoid(gate) * up computed here as swiglu.comp computes it, stored, and quantized
// from the values as stored (Y16), read back.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
#define QUANT_ROW4
// gemm: the scratch is read only by tiled GEMMs (vk_ops.cpp), which take each eight codes in
// their staged order (quant.glsl's gemm_order).
layout(push_constant) uniform PC { uint K, T, gemm; } pc;
#define QUANT_GEMM_ORDER (pc.gemm != 0u)
#ifdef VKLLM_SWIGLU
#define QUANT_ROW_BINDING 3
#else
#define QUANT_ROW_BINDING 1
#endif
#include "quant.glsl"
// An fp32 view (four floats a word) and an fp16 one (four halves a word pair) of binding B.
#define DECL_VIEW4(B, NAME)                                                   \
  layout(std430, binding = B) readonly buffer NAME##_V4 { uvec4 NAME##_v4[]; }; \
  layout(std430, binding = B) readonly buffer NAME##_V2 { uvec2 NAME##_v2[]; };
#define LOAD4(NAME, IS16, I4)                                                          \
  ((IS16) ? vec4(unpackHalf2x16(NAME##_v2[I4].x), unpackHalf2x16(NAME##_v2[I4].y)) \
          : uintBitsToFloat(NAME##_v4[I4]))
layout(constant_id = 1) const bool X16 = false;  // x (VKLLM_SWIGLU: the gate)
DECL_VIEW4(0, x)
#ifdef VKLLM_SWIGLU
layout(constant_id = 2) const bool U16 = false;  // up
layout(constant_id = 3) const bool Y16 = false;  // the swiglu op's output as stored
DECL_VIEW4(1, u)
layout(std430, binding = 2) coherent buffer Y_V4 { uvec4 y_v4[]; };
layout(std430, binding = 2) coherent buffer Y_V2 { uvec2 y_v2[]; };
// Stores elements 4 k4 .. 4 k4 + 3 of row t of y as swiglu.comp computes them (the store rounds
// to fp16 where Y16, to nearest even as STOREF's conversion).
void store_swiglu4(uint t, uint k4) {
  const uint i4 = t * (pc.K / 4u) + k4;
  const vec4 g = LOAD4(x, X16, i4), up = LOAD4(u, U16, i4);
  vec4 v;
  [[unroll]] for (uint e = 0; e < 4u; ++e) v[e] = g[e] / (1.0 + exp(-g[e])) * up[e];
  if (Y16)
    y_v2[i4] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  else
    y_v4[i4] = floatBitsToUint(v);
}
// The quantizer's values: y as the first pass stored it, read back (after main's
// memoryBarrierBuffer and barrier), never computed a second time: two sites of one
// expression may round differently (the H200 did, docs/perf.md session 17), and the codes must be
// those of the values stored.
vec4 row_value4(uint t, uint k4) { return LOAD4(y, Y16, t * (pc.K / 4u) + k4); }
#else
vec4 row_value4(uint t, uint k4) { return LOAD4(x, X16, t * (pc.K / 4u) + k4); }
#endif

void main() {
  const uint t = flat_group(), tid = gl_LocalInvocationID.x;
  if (t >= pc.T) return;
#ifdef VKLLM_SWIGLU
  // y computed and stored first; its minimum, maximum and codes then all from the values as
  // stored, read back (row_value4), not from registers (with the minimum and maximum taken in
  // registers, the H200's fp16 codes disagreed with the stored values': docs/perf.md session 17).
  for (uint k4 = tid; k4 < pc.K / 4u; k4 += WG) store_swiglu4(t, k4);
  memoryBarrierBuffer();
  barrier();
#endif
  vec4 lo = vec4(0.0), hi = vec4(0.0);
  uint k4 = tid;
  for (; k4 + WG < pc.K / 4u; k4 += 2u * WG) {  // two independent loads in flight
    const vec4 a = row_value4(t, k4), b = row_value4(t, k4 + WG);
    lo = min(lo, min(a, b));
    hi = max(hi, max(a, b));
  }
  if (k4 < pc.K / 4u) {
    const vec4 a = row_value4(t, k4);
    lo = min(lo, a);
    hi = max(hi, a);
  }
  quantize_row(t, pc.K, min(min(lo.x, lo.y), min(lo.z, lo.w)),
               max(max(hi.x, hi.y), max(hi.z, hi.w)));
}
