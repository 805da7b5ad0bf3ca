#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row. A decode step's norm is a single workgroup, so its speed is the
// latency of its loads: 256 threads, each issuing four independent loads at a time.
// VKLLM_QUANT (rms_norm_quant, a norm over whole rows read only by linear_8da4w ops): also
// quantizes each row of y as stored into the int8 scratch (quant.glsl), saving those linears a
// dispatch and a barrier.
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer W { float w[]; };
DECL_FBUF(2, y, writeonly)
#ifdef VKLLM_QUANT
#include "quant.glsl"
layout(std430, binding = 3) writeonly buffer QX { uint qx[]; };
layout(std430, binding = 4) writeonly buffer QP { uint qp[]; };
#endif

// Element j of the normalized row, as y stores it.
float normed(uint base, uint j, float inv) {
  const float v = w[j] * (LOADF(x, X16, base + j) * inv);
#ifdef VKLLM_F16
  if (Y16) return float(float16_t(v));
#endif
  return v;
}
layout(push_constant) uniform PC { uint G, rows; float eps; } pc;
shared float red[WG];

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  const uint base = r * pc.G;
  vec4 ss = vec4(0.0);
  uint j = tid;
  for (; j + 3u * WG < pc.G; j += 4u * WG) {
    const vec4 v = vec4(LOADF(x, X16, base + j), LOADF(x, X16, base + j + WG),
                        LOADF(x, X16, base + j + 2u * WG), LOADF(x, X16, base + j + 3u * WG));
    ss += v * v;
  }
  for (; j < pc.G; j += WG) {
    const float v = LOADF(x, X16, base + j);
    ss.x += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  const float inv = 1.0 / sqrt(total / float(pc.G) + pc.eps);
#ifdef VKLLM_QUANT
  float lo = 0.0, hi = 0.0;
  for (j = tid; j < pc.G; j += WG) {
    const float v = normed(base, j, inv);
    STOREF(y, Y16, base + j, v);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  float sc;
  int zp;
  quant_params(lo, hi, sc, zp);
  if (tid == 0) {
    qp[2 * r] = floatBitsToUint(sc);
    qp[2 * r + 1] = uint(zp);
  }
  const float rcp = 1.0 / sc;
  for (uint k4 = tid; k4 < pc.G / 4u; k4 += WG) {
    uint packed = 0u;
    [[unroll]] for (uint e = 0; e < 4u; ++e)
      packed |= quant_value(normed(base, 4u * k4 + e, inv), sc, rcp, zp) << (8u * e);
    qx[r * (pc.G / 4u) + k4] = packed;
  }
#else
  for (j = tid; j < pc.G; j += WG) STOREF(y, Y16, base + j, normed(base, j, inv));
#endif
}
