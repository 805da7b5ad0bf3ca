#version 450
// attention, in three variants of this file:
//  VKLLM_KV_STORE: write k, v rows t into cache rows pos + t (rounded to the cache dtype);
//  (default): causal grouped-query attention of one (token t, head h) over one split of its keys:
//    workgroup g takes (t, h) = g / S and keys [c * C, (c + 1) * C) with c = g % S (S and C fixed
//    per executor for decode, so a recorded step replays at any position). Keys are
//    scored in tiles of WG (one key per thread) with an online softmax; each thread owns up to four
//    output dims (head_dim <= 4 * WG). With S == 1 it writes the output; otherwise its partial
//    (running max m, sum l, unnormalized accumulator) goes to the scratch `part`;
//  VKLLM_COMBINE: merges the S partials of each (t, h) into the output (split-K, "flash
//    decoding": a decode step has only H (t, h) pairs, too few workgroups for a GPU).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;  // q / k / v activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
#ifdef VKLLM_KV_STORE
DECL_FBUF(0, k, readonly)
DECL_FBUF(1, v, readonly)
DECL_FBUF(2, kc, writeonly)
DECL_FBUF(3, vc, writeonly)
DECL_STEP(4)
layout(push_constant) uniform PC { uint T, W; } pc;
void main() {
  const uint idx = flat_group() * WG + gl_LocalInvocationID.x;
  if (idx >= pc.T * pc.W) return;
  const uint dst = step_pos * pc.W + idx;
  STOREF(kc, C16, dst, LOADF(k, A16, idx));
  STOREF(vc, C16, dst, LOADF(v, A16, idx));
}
#elif defined(VKLLM_COMBINE)
layout(std430, binding = 0) readonly buffer P { float part[]; };
DECL_FBUF(1, o, writeonly)
layout(push_constant) uniform PC { uint TH, hd, S; } pc;
void main() {
  const uint th = flat_group(), tid = gl_LocalInvocationID.x;
  if (th >= pc.TH) return;
  const uint stride = pc.hd + 2u, base = th * pc.S * stride;
  float m = -3.0e38;
  for (uint c = 0; c < pc.S; ++c) m = max(m, part[base + c * stride]);
  float l = 0.0;
  for (uint c = 0; c < pc.S; ++c)
    l += part[base + c * stride + 1u] * exp(part[base + c * stride] - m);
  for (uint i = tid; i < pc.hd; i += WG) {
    float a = 0.0;
    for (uint c = 0; c < pc.S; ++c)
      a += part[base + c * stride + 2u + i] * exp(part[base + c * stride] - m);
    STOREF(o, Y16, th * pc.hd + i, a / l);
  }
}
#else
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, kc, readonly)
DECL_FBUF(2, vc, readonly)
DECL_FBUF(3, o, writeonly)
layout(std430, binding = 4) writeonly buffer P { float part[]; };
DECL_STEP(5)
layout(push_constant) uniform PC { uint T, H, Hkv, hd; float scale; uint S, C; } pc;
shared float qs[4 * WG];
shared float red[WG];  // one entry per subgroup
shared float ps[WG];

// Workgroup-wide max / sum: the subgroup's, then across subgroups through shared memory.
float wg_max(float v) {
  const float s = subgroupMax(v);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  float r = red[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) r = max(r, red[i]);
  barrier();
  return r;
}
float wg_sum(float v) {
  const float s = subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  float r = red[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) r += red[i];
  barrier();
  return r;
}

void main() {
  const uint g = flat_group(), tid = gl_LocalInvocationID.x;
  const uint th = g / pc.S, c = g % pc.S;
  if (th >= pc.T * pc.H) return;  // uniform per workgroup
  const uint t = th / pc.H, h = th % pc.H;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * pc.hd, koff = kvh * pc.hd;
  for (uint i = tid; i < pc.hd; i += WG) qs[i] = LOADF(q, A16, th * pc.hd + i);
  barrier();
  const uint n = min(step_pos + t + 1u, (c + 1u) * pc.C);  // splits past the keys stay empty
  float m = -3.0e38, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint base = c * pc.C; base < n; base += WG) {
    const uint j = base + tid;
    float sc = -3.0e38;
    if (j < n) {
      float d = 0.0;
      for (uint i = 0; i < pc.hd; ++i) d += qs[i] * LOADF(kc, C16, j * W + koff + i);
      sc = d * pc.scale;
    }
    const float mn = max(m, wg_max(sc));
    const float p = j < n ? exp(sc - mn) : 0.0;
    ps[tid] = p;
    const float corr = exp(m - mn);
    l = l * corr + wg_sum(p);  // its barriers also publish ps
    const uint cnt = min(uint(WG), n - base);
    [[unroll]] for (uint r = 0; r < 4u; ++r) {
      const uint i = tid + r * WG;
      if (i < pc.hd) {
        float a = acc[r] * corr;
        for (uint jj = 0; jj < cnt; ++jj) a += ps[jj] * LOADF(vc, C16, (base + jj) * W + koff + i);
        acc[r] = a;
      }
    }
    m = mn;
    barrier();  // ps is rewritten by the next tile
  }
  if (pc.S == 1u) {
    [[unroll]] for (uint r = 0; r < 4u; ++r) {
      const uint i = tid + r * WG;
      if (i < pc.hd) STOREF(o, Y16, th * pc.hd + i, acc[r] / l);
    }
    return;
  }
  const uint at = g * (pc.hd + 2u);  // (th, c) partial: m, l, then hd accumulators
  if (tid == 0u) {
    part[at] = m;
    part[at + 1u] = l;
  }
  [[unroll]] for (uint r = 0; r < 4u; ++r) {
    const uint i = tid + r * WG;
    if (i < pc.hd) part[at + 2u + i] = acc[r];
  }
}
#endif
