#version 450
// attention, in two dispatches of this file:
//  VKLLM_KV_STORE: write k, v rows t into cache rows pos + t (rounded to the cache dtype);
//  otherwise: causal grouped-query attention, one workgroup per (token t, head h). Keys are
//  scored in tiles of WG (one key per thread) with an online softmax; each thread owns up to
//  four output dims (head_dim <= 4 * WG).
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;  // q / k / v activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
#ifdef VKLLM_KV_STORE
DECL_FBUF(0, k, readonly)
DECL_FBUF(1, v, readonly)
DECL_FBUF(2, kc, writeonly)
DECL_FBUF(3, vc, writeonly)
layout(push_constant) uniform PC { uint T, pos, W; } pc;
void main() {
  const uint idx = flat_group() * WG + gl_LocalInvocationID.x;
  if (idx >= pc.T * pc.W) return;
  const uint dst = pc.pos * pc.W + idx;
  STOREF(kc, C16, dst, LOADF(k, A16, idx));
  STOREF(vc, C16, dst, LOADF(v, A16, idx));
}
#else
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, kc, readonly)
DECL_FBUF(2, vc, readonly)
DECL_FBUF(3, o, writeonly)
layout(push_constant) uniform PC { uint T, pos, H, Hkv, hd; float scale; } pc;
shared float qs[4 * WG];
shared float red[WG];
shared float ps[WG];

void main() {
  const uint th = flat_group(), tid = gl_LocalInvocationID.x;
  if (th >= pc.T * pc.H) return;  // uniform per workgroup
  const uint t = th / pc.H, h = th % pc.H;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * pc.hd, koff = kvh * pc.hd;
  for (uint i = tid; i < pc.hd; i += WG) qs[i] = LOADF(q, A16, th * pc.hd + i);
  barrier();
  const uint n = pc.pos + t + 1u;
  float m = -3.0e38, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint base = 0; base < n; base += WG) {
    const uint j = base + tid;
    float sc = -3.0e38;
    if (j < n) {
      float d = 0.0;
      for (uint i = 0; i < pc.hd; ++i) d += qs[i] * LOADF(kc, C16, j * W + koff + i);
      sc = d * pc.scale;
    }
    red[tid] = sc;
    barrier();
    [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
      if (tid < s) red[tid] = max(red[tid], red[tid + s]);
      barrier();
    }
    const float mn = max(m, red[0]);
    barrier();
    const float p = j < n ? exp(sc - mn) : 0.0;
    ps[tid] = p;
    red[tid] = p;
    barrier();
    [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
      if (tid < s) red[tid] += red[tid + s];
      barrier();
    }
    const float corr = exp(m - mn);
    l = l * corr + red[0];
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
    barrier();
  }
  [[unroll]] for (uint r = 0; r < 4u; ++r) {
    const uint i = tid + r * WG;
    if (i < pc.hd) STOREF(o, Y16, th * pc.hd + i, acc[r] / l);
  }
}
#endif
