#version 450
// Causal grouped-query attention of a forward of several tokens (prefill), tiled flash-attention
// style: a workgroup takes BQ = 32 consecutive tokens of one query head and walks the keys they
// see in tiles of BK, each tile of K and V rows staged once in shared memory for all 32 queries
// (the one-(token, head)-per-workgroup kernel re-read every key for every query). Online softmax
// per query row (running max m, sum l, accumulator rescaled by exp(m_old - m_new)), as
// attention.comp does. TPR = 8 threads per query row, each holding every eighth head dim of the
// query and of the output accumulator in registers (dims p, p + 8, ...: adjacent threads read
// adjacent shared words); a score is their partial dots summed with three xor shuffles, so all
// of them hold every score of the row and the same softmax state (the row's first thread also
// keeps the tile's scores in shared memory for the weights pass). Needs subgroups of at least 8
// lanes (a row's threads in one subgroup) and HD % 8 == 0. The KV store (attention.comp
// VKLLM_KV_STORE) has written this forward's keys before it runs.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;  // q activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (<= 256, % 8 == 0)
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, kc, readonly)
DECL_FBUF(2, vc, readonly)
DECL_FBUF(3, o, writeonly)
DECL_STEP(4)
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; } pc;

const uint BQ = 32u, TPR = 8u, DP = HD / TPR;  // dims per thread
const uint BK = HD <= 64u ? 32u : HD <= 128u ? 16u : 8u;  // keys per tile: K, V tiles <= 16 KiB
shared float ks[BK * HD], vs[BK * HD];
shared float sc[BK * BQ];  // the tile's scores, key-major

void main() {
  const uint tid = gl_LocalInvocationID.x, r = tid / TPR, p = tid % TPR;
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * HD, koff = kvh * HD;
  const uint t = min(t0 + r, pc.T - 1u), pos = step_pos + t;  // this row's token and position
  float qr[DP], acc[DP];
  [[unroll]] for (uint i = 0; i < DP; ++i) {
    qr[i] = LOADF(q, A16, (t * pc.H + h) * HD + p + TPR * i);
    acc[i] = 0.0;
  }
  float m = -3.0e38, l = 0.0;
  const uint last = step_pos + min(t0 + BQ, pc.T) - 1u;  // the block's last position
  for (uint base = 0; base <= last; base += BK) {
    barrier();  // the previous tile's reads are done
    for (uint i = tid; i < BK * HD; i += WG) {
      const uint j = min(base + i / HD, last), d = i % HD;
      ks[i] = LOADF(kc, C16, j * W + koff + d);
      vs[i] = LOADF(vc, C16, j * W + koff + d);
    }
    barrier();
    // Scores, then weights: the key loops stay loops (their bodies are DP-wide).
    float mx = m;
    for (uint j = 0; j < BK; ++j) {
      float a2[2] = float[2](0.0, 0.0);  // two chains in flight
      [[unroll]] for (uint i = 0; i < DP; ++i) a2[i & 1u] += qr[i] * ks[j * HD + p + TPR * i];
      float a = a2[0] + a2[1];
      a += subgroupShuffleXor(a, 1u);
      a += subgroupShuffleXor(a, 2u);
      a += subgroupShuffleXor(a, 4u);
      a *= pc.scale;
      if (p == 0u) sc[j * BQ + r] = a;
      if (base + j <= pos) mx = max(mx, a);
    }
    subgroupMemoryBarrierShared();  // the row's scores, written by its first thread
    subgroupBarrier();
    const float corr = exp(m - mx);
    l *= corr;
    [[unroll]] for (uint i = 0; i < DP; ++i) acc[i] *= corr;
    for (uint j = 0; j < BK; ++j) {
      const float e = base + j <= pos ? exp(sc[j * BQ + r] - mx) : 0.0;
      l += e;
      [[unroll]] for (uint i = 0; i < DP; ++i) acc[i] += e * vs[j * HD + p + TPR * i];
    }
    m = mx;
  }
  if (t0 + r < pc.T)
    [[unroll]] for (uint i = 0; i < DP; ++i)
      STOREF(o, Y16, (t * pc.H + h) * HD + p + TPR * i, acc[i] / l);
}
