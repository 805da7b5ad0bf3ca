#version 450
// Causal grouped-query attention of a forward of several tokens (prefill), tiled flash-attention
// style, for any float storage (the path of fp32 models such as Phi-4-mini's, and of devices
// without cooperative matrices): a workgroup takes BQ consecutive tokens of one query head and
// walks the keys they see in tiles of BK, each tile of K and V rows staged once in shared memory
// for all of them. Online softmax per query row (running max m, sum l, accumulator rescaled by
// exp(m_old - m_new)), as attention.comp does.
// - TPR = 8 threads share RQ query rows: each holds every eighth head dim (p, p + 8, ...) of the
//   RQ rows' q and output accumulators in registers, so that every key or value word it reads
//   from shared memory feeds RQ multiply-adds (one read a multiply-add with one row a thread,
//   which bound the kernel by shared-memory reads; docs/perf.md session 27). A score is the 8
//   threads' partial dots summed with three xor shuffles: all of them hold every score of their
//   rows and the same softmax state (the group's first thread also keeps the tile's scores in
//   shared memory for the weights pass).
// - The blocks run heaviest first (the last block of a causal prompt walks every key): the
//   workgroup grid's later blocks start before the earlier ones' short walks.
// - A subgroup skips a tile past all of its rows' positions.
// - VKLLM_ROPE (the prefill attention run: [norm, norm,] rope, rope, attention): q is the query
//   before its rope op (and its per-head norm), rotated (and normed) as it is loaded
//   (attention_prefill_q.glsl, attention_run.glsl); the KV store (attention.comp VKLLM_KV_STORE
//   VKLLM_ROPE) did the same to the keys.
// Needs subgroups of at least 8 lanes (a group's threads in one subgroup) and HD % 8 == 0. The KV
// store (attention.comp VKLLM_KV_STORE) has written this forward's keys before it runs.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG_SPEC
layout(constant_id = 11) const uint NT = 128;  // threads: 8 BQ / RQ
layout(local_size_x_id = 11) in;
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;  // q activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (<= 256, % 8 == 0)
layout(constant_id = 9) const uint BK = 32;      // keys a tile
layout(constant_id = 10) const uint RQ = 2;      // query rows a thread
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, kc, readonly)
DECL_FBUF(2, vc, readonly)
DECL_FBUF(3, o, writeonly)
DECL_STEP(4)

const uint TPR = 8u, DP = HD / TPR;  // dims a thread
const uint BQ = NT / TPR * RQ;       // query rows a workgroup
shared float ks[BK * HD], vs[BK * HD];
shared float sc[BK * BQ];  // the tile's scores, key-major
#ifdef VKLLM_ROPE
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; uint R, orig, ctx; float eps; } pc;
#define RUN_LOAD(i) LOADF(q, X16, i)
#include "attention_prefill_q.glsl"
#else
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; } pc;
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, grp = tid / TPR, p = tid % TPR;
  const uint h = gl_WorkGroupID.x, t0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * BQ;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * HD, koff = kvh * HD;
  // This group's rows grp RQ + i: their tokens (clamped; rows past the end are never stored) and
  // positions.
  uint pos[RQ];
  float qr[RQ][DP], acc[RQ][DP], m[RQ], l[RQ];
#ifdef VKLLM_ROPE
  pq_norms(t0, h);
#endif
  [[unroll]] for (uint i = 0; i < RQ; ++i) {
    const uint t = min(t0 + grp * RQ + i, pc.T - 1u);
    pos[i] = step_pos + t;
    const uint row = (t * pc.H + h) * HD;
    [[unroll]] for (uint d = 0; d < DP; ++d) {
#ifdef VKLLM_ROPE
      qr[i][d] = pq(row, grp * RQ + i, p + TPR * d, t);
#else
      qr[i][d] = LOADF(q, A16, row + p + TPR * d);
#endif
      acc[i][d] = 0.0;
    }
    m[i] = -3.0e38;
    l[i] = 0.0;
  }
  const uint last = step_pos + min(t0 + BQ, pc.T) - 1u;  // the block's last position
  // The last position of this subgroup's rows (subgroup-uniform).
  const uint sg_rows = (gl_SubgroupID + 1u) * (gl_SubgroupSize / TPR) * RQ;
  const uint sg_last = step_pos + min(t0 + sg_rows, pc.T) - 1u;
  for (uint base = 0; base <= last; base += BK) {
    barrier();  // the previous tile's reads are done
    for (uint i = tid; i < BK * HD; i += NT) {
      const uint j = min(base + i / HD, last), d = i % HD;
      ks[i] = LOADF(kc, C16, j * W + koff + d);
      vs[i] = LOADF(vc, C16, j * W + koff + d);
    }
    barrier();
    if (base > sg_last) continue;  // (subgroup-uniform: the tile adds nothing to its rows)
    // Scores, then weights: the key loops stay loops (their bodies are DP x RQ wide).
    float mx[RQ];
    [[unroll]] for (uint i = 0; i < RQ; ++i) mx[i] = m[i];
    for (uint j = 0; j < BK; ++j) {
      float a[RQ];
      [[unroll]] for (uint i = 0; i < RQ; ++i) a[i] = 0.0;
      [[unroll]] for (uint d = 0; d < DP; ++d) {
        const float k = ks[j * HD + p + TPR * d];
        [[unroll]] for (uint i = 0; i < RQ; ++i) a[i] += qr[i][d] * k;
      }
      [[unroll]] for (uint i = 0; i < RQ; ++i) {
        a[i] += subgroupShuffleXor(a[i], 1u);
        a[i] += subgroupShuffleXor(a[i], 2u);
        a[i] += subgroupShuffleXor(a[i], 4u);
        a[i] *= pc.scale;
        if (p == 0u) sc[j * BQ + grp * RQ + i] = a[i];
        if (base + j <= pos[i]) mx[i] = max(mx[i], a[i]);
      }
    }
    subgroupMemoryBarrierShared();  // the rows' scores, written by the group's first thread
    subgroupBarrier();
    [[unroll]] for (uint i = 0; i < RQ; ++i) {
      const float corr = exp(m[i] - mx[i]);
      l[i] *= corr;
      [[unroll]] for (uint d = 0; d < DP; ++d) acc[i][d] *= corr;
      m[i] = mx[i];
    }
    for (uint j = 0; j < BK; ++j) {
      float e[RQ];
      [[unroll]] for (uint i = 0; i < RQ; ++i) {
        e[i] = base + j <= pos[i] ? exp(sc[j * BQ + grp * RQ + i] - m[i]) : 0.0;
        l[i] += e[i];
      }
      [[unroll]] for (uint d = 0; d < DP; ++d) {
        const float v = vs[j * HD + p + TPR * d];
        [[unroll]] for (uint i = 0; i < RQ; ++i) acc[i][d] += e[i] * v;
      }
    }
  }
  [[unroll]] for (uint i = 0; i < RQ; ++i) {
    const uint t = t0 + grp * RQ + i;
    if (t < pc.T)
      [[unroll]] for (uint d = 0; d < DP; ++d)
        STOREF(o, Y16, (t * pc.H + h) * HD + p + TPR * d, acc[i][d] / l[i]);
  }
}
