#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x (quant.glsl), one
// workgroup of 256 threads per token. Output: qx packed four int8 per uint (row stride K/4 words);
// qp[2t] = scale bits, qp[2t+1] = zero point. Four values a load (K % 4 == 0).
// VKLLM_SWIGLU: the swiglu op whose output only linear_8da4w ops read (prefill's down projection):
// y = gate * sigmoid(gate) * up computed here as swiglu.comp computes it, stored, and quantized
// from the values as stored (Y16), read back. With VKLLM_GEGLU too, the geglu op's instead
// (common.glsl geglu_of, as geglu.comp computes it).
// HOLD (a specialization constant; the host sets it where K % 8 == 0 and K <= 8 WG HOLD, vk_ops.cpp
// quant_hold): a thread's values stay in registers from the loads to the codes, eight a slot (word
// pair k8 = tid + i WG, i < HOLD), so a row costs one round trip of loads, issued all at once, not
// one a pass and loop step. Only in forwards of several rows (prefill): a decode step's single row
// measured slower held in registers. With VKLLM_SWIGLU a thread stores its SwiGLU values, then holds
// them as read back (its own stores, behind memoryBarrierBuffer), so that the minimum, maximum and
// codes are those of the values stored.
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
layout(constant_id = 1) const bool X16 = false;  // x (VKLLM_SWIGLU: the gate)
DECL_VIEW4(0, x)
#ifdef VKLLM_SWIGLU
layout(constant_id = 2) const bool U16 = false;  // up
layout(constant_id = 3) const bool Y16 = false;  // the swiglu op's output as stored
DECL_VIEW4(1, u)
layout(std430, binding = 2) coherent buffer Y_V4 { uvec4 y_v4[]; };
layout(std430, binding = 2) coherent buffer Y_V2 { uvec2 y_v2[]; };
// Stores the SwiGLU (GeGLU) of four gate and up values at vec4 i4 of y as swiglu.comp (geglu.comp)
// computes them (the store rounds to fp16 where Y16, to nearest even as STOREF's conversion) and
// returns them as stored (the stored bits, unpacked).
vec4 store_swiglu4(uint i4, vec4 g, vec4 up) {
  vec4 v;
#ifdef VKLLM_GEGLU
  // (four calls, not an unrolled loop: glslc's unrolling drops the copies' NoContraction, and
  // then folds and fuses geglu_of's steps)
  v = vec4(geglu_of(g.x, up.x), geglu_of(g.y, up.y), geglu_of(g.z, up.z), geglu_of(g.w, up.w));
#else
  [[unroll]] for (uint e = 0; e < 4u; ++e) v[e] = g[e] / (1.0 + exp(-g[e])) * up[e];
#endif
  if (Y16) {
    const uvec2 h = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
    y_v2[i4] = h;
    return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
  }
  y_v4[i4] = floatBitsToUint(v);
  return v;
}
// The quantizer's values: y as the first pass stored it, read back (after main's
// memoryBarrierBuffer and barrier), never computed a second time: two sites of one
// expression may round differently (the H200 did), and the codes must be
// those of the values stored.
vec4 row_value4(uint t, uint k4) { return LOAD4(y, Y16, t * (pc.K / 4u) + k4); }
#else
vec4 row_value4(uint t, uint k4) { return LOAD4(x, X16, t * (pc.K / 4u) + k4); }
#endif

layout(constant_id = 8) const uint HOLD = 0u;  // slots a thread (0: the streaming passes)
const uint HN = HOLD + uint(HOLD == 0u);       // (arrays need a size of at least 1)

// Quantizes row t from HOLD slots a thread held in registers: x's values, or with VKLLM_SWIGLU the
// SwiGLU of the gate and up, stored, then read back.
void held_row(uint t, uint tid) {
  const uint K8 = pc.K / 8u;
  vec4 a[HN], b[HN];  // a slot's elements 0..3 and 4..7
#ifdef VKLLM_SWIGLU
  vec4 ua[HN], ub[HN];
#endif
  // Every load first (no store between them: one round trip).
  [[unroll]] for (uint i = 0; i < HOLD; ++i) {
    const uint k8 = tid + i * WG, i4 = t * (pc.K / 4u) + 2u * k8;
    if (k8 >= K8) continue;
    a[i] = LOAD4(x, X16, i4);
    b[i] = LOAD4(x, X16, i4 + 1u);
#ifdef VKLLM_SWIGLU
    ua[i] = LOAD4(u, U16, i4);
    ub[i] = LOAD4(u, U16, i4 + 1u);
#endif
  }
  float lo = 0.0, hi = 0.0;
  [[unroll]] for (uint i = 0; i < HOLD; ++i) {
    const uint k8 = tid + i * WG;
    if (k8 >= K8) continue;
#ifdef VKLLM_SWIGLU
    const uint i4 = t * (pc.K / 4u) + 2u * k8;
    store_swiglu4(i4, a[i], ua[i]);
    store_swiglu4(i4 + 1u, b[i], ub[i]);
  }
  // The thread's own values read back as stored (see row_value4): kept in registers from the
  // conversion instead, NVIDIA's fp16 codes disagreed with the stored values'.
  memoryBarrierBuffer();
  [[unroll]] for (uint i = 0; i < HOLD; ++i) {
    const uint k8 = tid + i * WG;
    if (k8 >= K8) continue;
    a[i] = row_value4(t, 2u * k8);
    b[i] = row_value4(t, 2u * k8 + 1u);
#endif
    lo = min(lo, min(min(min(a[i].x, a[i].y), min(a[i].z, a[i].w)),
                     min(min(b[i].x, b[i].y), min(b[i].z, b[i].w))));
    hi = max(hi, max(max(max(a[i].x, a[i].y), max(a[i].z, a[i].w)),
                     max(max(b[i].x, b[i].y), max(b[i].z, b[i].w))));
  }
  float sc, rcp;
  int zp;
  quant_params(lo, hi, sc, zp, rcp);
  if (tid == 0) {
    qp_w[2 * t] = floatBitsToUint(sc);
    qp_w[2 * t + 1] = uint(zp);
  }
  [[unroll]] for (uint i = 0; i < HOLD; ++i) {
    const uint k8 = tid + i * WG, base = t * (pc.K / 4u) + 2u * k8;
    if (k8 >= K8) continue;
    uint wa = 0u, wb = 0u;
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      wa |= quant_value(a[i][e], sc, rcp, zp) << (8u * e);
      wb |= quant_value(b[i][e], sc, rcp, zp) << (8u * e);
    }
    const uvec2 w = QUANT_GEMM_ORDER ? gemm_order(wa, wb) : uvec2(wa, wb);
    qx_w[base] = w.x;
    qx_w[base + 1u] = w.y;
  }
}

void main() {
  const uint t = flat_group(), tid = gl_LocalInvocationID.x;
  if (t >= pc.T) return;
  if (HOLD > 0u && pc.T > 1u) {  // (a decode step's one row streams: see above)
    held_row(t, tid);
    return;
  }
#ifdef VKLLM_SWIGLU
  // y computed and stored first; its minimum, maximum and codes then all from the values as
  // stored, read back (row_value4), not from registers (with the minimum and maximum taken in
  // registers, the H200's fp16 codes disagreed with the stored values').
  for (uint k4 = tid; k4 < pc.K / 4u; k4 += WG) {
    const uint i4 = t * (pc.K / 4u) + k4;
    store_swiglu4(i4, LOAD4(x, X16, i4), LOAD4(u, U16, i4));
  }
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
