#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row, a row kernel (quant.glsl): the first ROW_MAX values of the row stay
// in registers, so a decode step's norm (a single workgroup, bound by the latency of its loads)
// issues all its loads at once; values past ROW_MAX are read again.
// VKLLM_ADD (rms_norm_add*, the residual add before the norm, fused into it): x = a + b is first
// stored to s, as the add would store it, and normalized from there.
// VKLLM_QUANT (rms_norm_quant*, a norm over whole rows of at most ROW_MAX values read only by
// linear_8da4w ops): also quantizes each row of y as stored into the int8 scratch, saving those
// linears a dispatch and a barrier.
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
#endif
#ifdef VKLLM_QUANT
#ifdef VKLLM_ADD
#define QUANT_ROW_BINDING 5
#else
#define QUANT_ROW_BINDING 3
#endif
#endif
#include "quant.glsl"
layout(push_constant) uniform PC { uint G, rows; float eps; } pc;
shared float red[WG];

// Element i of the norm's input (with VKLLM_ADD: a + b rounded as s stores it). Always computed
// from the inputs, never read back from s.
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

// Chunk c (values 4c .. 4c + 3, those past G as 0) of the row at base; 4c < G.
vec4 x_chunk(uint base, uint c) {
  const uint j = 4u * c;
  return vec4(xv(base + j), j + 1u < pc.G ? xv(base + j + 1u) : 0.0,
              j + 2u < pc.G ? xv(base + j + 2u) : 0.0, j + 3u < pc.G ? xv(base + j + 3u) : 0.0);
}

// Stores chunk c of a row (the values before G).
#define STORE_CHUNK(BUF, IS16, base, c, v)                      \
  {                                                             \
    const uint j_ = 4u * (c);                                   \
    STOREF(BUF, IS16, (base) + j_, (v).x);                      \
    if (j_ + 1u < pc.G) STOREF(BUF, IS16, (base) + j_ + 1u, (v).y); \
    if (j_ + 2u < pc.G) STOREF(BUF, IS16, (base) + j_ + 2u, (v).z); \
    if (j_ + 3u < pc.G) STOREF(BUF, IS16, (base) + j_ + 3u, (v).w); \
  }

// Chunk c of the normalized row, as y stores it.
float normed1(uint j, float v, float inv) {
  if (j >= pc.G) return 0.0;
  const float n = w[j] * (v * inv);
#ifdef VKLLM_F16
  if (Y16) return float(float16_t(n));
#endif
  return n;
}
vec4 normed(uint c, vec4 v, float inv) {
  const uint j = 4u * c;
  return vec4(normed1(j, v.x, inv), normed1(j + 1u, v.y, inv), normed1(j + 2u, v.z, inv),
              normed1(j + 3u, v.w, inv));
}

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  const uint base = r * pc.G;
  vec4 ss = vec4(0.0);
  [[unroll]] for (uint i = 0u; i < ROW_CHUNKS; ++i) {
    const uint c = tid + i * WG;
    if (4u * c < pc.G) {
      row_v[i] = x_chunk(base, c);
#ifdef VKLLM_ADD
      STORE_CHUNK(s, S16, base, c, row_v[i]);
#endif
      ss += row_v[i] * row_v[i];
    }
  }
  for (uint c = tid + ROW_CHUNKS * WG; 4u * c < pc.G; c += WG) {  // past ROW_MAX
    const vec4 v = x_chunk(base, c);
#ifdef VKLLM_ADD
    STORE_CHUNK(s, S16, base, c, v);
#endif
    ss += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  const float inv = 1.0 / sqrt(total / float(pc.G) + pc.eps);
  [[unroll]] for (uint i = 0u; i < ROW_CHUNKS; ++i) {
    const uint c = tid + i * WG;
    if (4u * c < pc.G) {
      row_v[i] = normed(c, row_v[i], inv);
      STORE_CHUNK(y, Y16, base, c, row_v[i]);
    }
  }
  for (uint c = tid + ROW_CHUNKS * WG; 4u * c < pc.G; c += WG) {
    const vec4 v = normed(c, x_chunk(base, c), inv);
    STORE_CHUNK(y, Y16, base, c, v);
  }
#ifdef VKLLM_QUANT
  quantize_row(r, pc.G);
#endif
}
