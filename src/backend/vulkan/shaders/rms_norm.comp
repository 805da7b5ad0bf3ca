#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row. A decode step's norm is a single workgroup, so its speed is the
// latency of its loads: 256 threads, each issuing four independent loads at a time.
// VKLLM_ADD (rms_norm_add*, the residual add before the norm, fused into it): x = a + b is first
// stored to s, as the add would store it, and normalized from there.
// VKLLM_QUANT (rms_norm_quant*, a norm over whole rows read only by linear_8da4w ops): also
// quantizes each row of y as stored into the int8 scratch (quant.glsl), saving those linears a
// dispatch and a barrier.
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
layout(constant_id = 3) const bool B16 = false;
layout(constant_id = 4) const bool S16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer W { float w[]; };
DECL_FBUF(2, y, writeonly)
#ifdef VKLLM_ADD
DECL_FBUF(3, b, readonly)
DECL_FBUF(4, s, writeonly)
#define QUANT_ROW_BINDING 5
#else
#define QUANT_ROW_BINDING 3
#endif
#ifdef VKLLM_QUANT
#include "quant.glsl"
#endif
layout(push_constant) uniform PC { uint G, rows; float eps; } pc;
shared float red[WG];

// Element i of the norm's input (with VKLLM_ADD: a + b rounded as s stores it). Always computed
// from the inputs: s and y are written by other threads of the workgroup.
float xv(uint i) {
#ifdef VKLLM_ADD
  const float v = LOADF(x, X16, i) + LOADF(b, B16, i);
#ifdef VKLLM_F16
  if (S16) return float(float16_t(v));
#endif
  return v;
#else
  return LOADF(x, X16, i);
#endif
}

// Element j of the normalized row, as y stores it.
float g_inv;
float normed(uint base, uint j) {
  const float v = w[j] * (xv(base + j) * g_inv);
#ifdef VKLLM_F16
  if (Y16) return float(float16_t(v));
#endif
  return v;
}
#ifdef VKLLM_QUANT
float row_value(uint r, uint j) { return normed(r * pc.G, j); }
#endif

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  const uint base = r * pc.G;
  vec4 ss = vec4(0.0);
  uint j = tid;
  for (; j + 3u * WG < pc.G; j += 4u * WG) {
    const vec4 v = vec4(xv(base + j), xv(base + j + WG), xv(base + j + 2u * WG),
                        xv(base + j + 3u * WG));
#ifdef VKLLM_ADD
    STOREF(s, S16, base + j, v.x);
    STOREF(s, S16, base + j + WG, v.y);
    STOREF(s, S16, base + j + 2u * WG, v.z);
    STOREF(s, S16, base + j + 3u * WG, v.w);
#endif
    ss += v * v;
  }
  for (; j < pc.G; j += WG) {
    const float v = xv(base + j);
#ifdef VKLLM_ADD
    STOREF(s, S16, base + j, v);
#endif
    ss.x += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  g_inv = 1.0 / sqrt(total / float(pc.G) + pc.eps);
#ifdef VKLLM_QUANT
  float lo = 0.0, hi = 0.0;
  for (j = tid; j < pc.G; j += WG) {
    const float v = normed(base, j);
    STOREF(y, Y16, base + j, v);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(r, pc.G, lo, hi);
#else
  for (j = tid; j < pc.G; j += WG) STOREF(y, Y16, base + j, normed(base, j));
#endif
}
