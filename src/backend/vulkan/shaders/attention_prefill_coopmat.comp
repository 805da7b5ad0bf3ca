#version 450
// Causal grouped-query attention of a forward of several tokens (prefill) on NVIDIA cooperative
// matrices (VK_NV_cooperative_matrix, fp16 x fp16 -> fp32, 16 x 8 x 16 on 32-lane subgroups),
// flash-attention style, for fp16 q and caches: the result of attention_prefill.comp within the
// fp16 bound (docs/vulkan.md).
// - A workgroup takes BQ (64, 32 or 16) consecutive tokens of GQ query heads that share one KV
//   head (GQ = 1, or with VKLLM_ATTN_GQA=1 every query head of the group: the K and V tiles staged
//   once for all of them), a subgroup 16 rows of one head; the blocks run heaviest first (the
//   last block of a causal prompt walks every key).
//   Each subgroup keeps its 16 x HD block of q in registers (A fragments) and its 16 x HD output
//   accumulator (fp32) in registers for the whole walk over the keys.
// - The keys come in tiles of BK (32 or 64): K and V rows staged in shared memory for all BQ queries,
//   two buffers: the next tile's global loads are issued before this tile's work and stored to
//   the other buffer after it, one barrier a tile.
// - The online softmax (running max m, sum l; the accumulator rescaled by exp(m_old - m_new))
//   works on the scores S = q K^T in registers: in the tensor cores' fragment layout (Context
//   checks it at load: vk_probe.cpp) lane L holds rows L / 4 and L / 4 + 8 of the 16, columns
//   2 (L % 4) and the next of every 8, so a row's maximum and sum take two shuffles within the
//   lane's quad, and the weights, rounded to fp16, are the A fragments of P V element by element
//   (the accumulator of keys 8 j .. 8 j + 7 is the A operand's columns 8 (j % 2) ..; an A
//   operand's element 4 rh + 2 ch + i is row g + 8 rh, column c2 + 8 ch + i). l sums the weights
//   as rounded, the values the multiply-adds use.
// - VKLLM_ROPE (the prefill attention run: [norm, norm,] rope, rope, attention): q is the query
//   before its rope op (and its per-head norm), rotated (and normed) as the q tile is staged
//   (attention_prefill_q.glsl, attention_run.glsl); the KV store (attention.comp VKLLM_KV_STORE
//   VKLLM_ROPE) did the same to the keys.
// Needs HD % 32 == 0 and HD <= 128. The KV store (attention.comp VKLLM_KV_STORE) has written this
// forward's keys before it runs.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define WG_SPEC
layout(constant_id = 10) const uint BQ = 64;   // query rows a workgroup (64, 32 or 16)
layout(constant_id = 11) const uint NT = 128;  // threads: 2 BQ GQ (a subgroup of 32 a 16 rows)
layout(constant_id = 12) const uint GQ = 1;    // query heads a workgroup (GQ BQ <= 4 BK)
layout(local_size_x_id = 11) in;
#include "common.glsl"
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (% 32 == 0, <= 128)
layout(constant_id = 9) const uint BK = 32;      // keys a tile (32 or 64; shared: 2 BK (HD + 8) 4 B)
layout(std430, binding = 0) readonly buffer Q4 { uvec4 q4[]; };  // fp16 q, 8 a word
layout(std430, binding = 1) readonly buffer K4 { uvec4 k4[]; };  // fp16 key cache
layout(std430, binding = 2) readonly buffer V4 { uvec4 v4[]; };  // fp16 value cache
DECL_FBUF(3, o, writeonly)
DECL_STEP(4)
// (win: attention_prefill.comp's block; a sliding window never runs on this kernel)
#ifdef VKLLM_ROPE
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; uint R, orig, ctx; float eps; uint win, rows; } pc;
#else
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; uint win, rows; } pc;
#endif
const uint QR = GQ * BQ;  // the q tile's rows: head h0 + r / BQ, token t0 + r % BQ
uint q_t0, q_h0;          // the workgroup's first token and first query head
uvec2 q_row(uint r) { return uvec2(min(q_t0 + r % BQ, pc.T - 1u), q_h0 + r / BQ); }
#ifdef VKLLM_ROPE
DECL_FBUF(0, qx, readonly)  // (binding 0 as floats)
const bool A16 = true;  // (the rotated q: fp16 on this path)
#define RUN_LOAD(i) LOADF(qx, X16, i)
#include "attention_prefill_q.glsl"
#endif

#define F16A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F16B fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define F32C fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>

const uint NW = HD / 8u;                   // 16-byte words of a row of HD halves
const uint RW = NW + 1u;                   // a staged row in words, one of padding
const uint TILE = 2u * BK * RW;            // one buffer: the K tile's rows, then the V tile's
const uint NL = (BK * NW + NT - 1u) / NT;  // a tile's K (and V) words a thread
shared uvec4 kv[2u * TILE];                // two buffers; first the q tile (QR rows)

uvec4 pk[NL], pv[NL];
void fetch(uint base, uint last, uint W8, uint ko8, uint tid) {
  [[unroll]] for (uint e = 0; e < NL; ++e) {
    const uint i = tid + e * NT, j = min(base + i / NW, last), at = j * W8 + ko8 + i % NW;
    if (i < BK * NW) {
      pk[e] = k4[at];
      pv[e] = v4[at];
    }
  }
}
void stage(uint b, uint tid) {
  [[unroll]] for (uint e = 0; e < NL; ++e) {
    const uint i = tid + e * NT;
    if (i < BK * NW) {
      kv[b * TILE + (i / NW) * RW + i % NW] = pk[e];
      kv[b * TILE + (BK + i / NW) * RW + i % NW] = pv[e];
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint h0 = gl_WorkGroupID.x * GQ, t0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * BQ;
  const uint kvh = h0 / (pc.H / pc.Hkv), W8 = pc.Hkv * NW, ko8 = kvh * NW;
  // This subgroup's head and its 16 rows' first (sr 16) within the block.
  const uint h = h0 + sg / (BQ / 16u), sr = 16u * (sg % (BQ / 16u));
  q_t0 = t0;
  q_h0 = h0;
#ifdef VKLLM_ROPE
  pq_norms();
#endif
  // The q tile (rows past the last token read clamped, never stored).
  for (uint i = tid; i < QR * NW; i += NT) {
    const uint r = i / NW;
    const uvec2 th = q_row(r);
    const uint t = th.x;
#ifdef VKLLM_ROPE
    // The word's eight dims 8 w .. 8 w + 7 (attention_prefill_q.glsl, attention_run.glsl).
    const uint row = (t * pc.H + th.y) * HD, w = i % NW;
    uint packed[4];
    [[unroll]] for (uint e = 0; e < 4u; ++e)
      packed[e] = packFloat2x16(f16vec2(float16_t(pq(row, r, 8u * w + 2u * e, t)),
                                        float16_t(pq(row, r, 8u * w + 2u * e + 1u, t))));
    kv[r * RW + w] = uvec4(packed[0], packed[1], packed[2], packed[3]);
#else
    kv[r * RW + i % NW] = q4[(t * pc.H + th.y) * NW + i % NW];
#endif
  }
  barrier();
  F16A qa[HD / 16u];
  [[unroll]] for (uint d = 0; d < HD / 16u; ++d)
    coopMatLoadNV(qa[d], kv, (16u * sg) * RW + 2u * d, RW, false);
  F32C oc[NW];
  [[unroll]] for (uint j = 0; j < NW; ++j) oc[j] = F32C(0.0);
  // This lane's rows (r = 0, 1: rows g and g + 8 of the subgroup's 16) and columns (c2, c2 + 1 of
  // every 8).
  const uint g = lane >> 2u, c2 = (lane & 3u) * 2u;
  uint pos[2];
  [[unroll]] for (uint r = 0; r < 2u; ++r)
    pos[r] = step_pos + min(t0 + sr + g + 8u * r, pc.T - 1u);
  const uint last = step_pos + min(t0 + BQ, pc.T) - 1u;  // the block's last position
  const uint sg_last = step_pos + min(t0 + sr + 15u, pc.T - 1u);
  float m[2] = float[2](-3.0e38, -3.0e38), l[2] = float[2](0.0, 0.0);
  fetch(0u, last, W8, ko8, tid);
  barrier();  // every subgroup's q fragments loaded before the first tile overwrites them
  stage(0u, tid);
  barrier();
  for (uint base = 0, b = 0; base <= last; base += BK, b ^= 1u) {
    const bool more = base + BK <= last;
    if (more) fetch(base + BK, last, W8, ko8, tid);  // in flight during this tile
    if (base <= sg_last) {  // (subgroup-uniform: a tile past all 16 rows adds nothing)
      F32C sc[BK / 8u];
      [[unroll]] for (uint j = 0; j < BK / 8u; ++j) sc[j] = F32C(0.0);
      [[unroll]] for (uint d = 0; d < HD / 16u; ++d)[[unroll]] for (uint j = 0; j < BK / 8u; ++j) {
        F16B kb;
        coopMatLoadNV(kb, kv, b * TILE + (8u * j) * RW + 2u * d, RW, true);
        sc[j] = coopMatMulAddNV(qa[d], kb, sc[j]);
      }
      float mx[2] = float[2](m[0], m[1]);
      [[unroll]] for (uint j = 0; j < BK / 8u; ++j)[[unroll]] for (uint e = 0; e < 4u; ++e) {
        const uint r = e >> 1u;
        const float x = sc[j][e] * pc.scale;
        sc[j][e] = x;
        if (base + 8u * j + c2 + (e & 1u) <= pos[r]) mx[r] = max(mx[r], x);
      }
      float corr[2], ls[2] = float[2](0.0, 0.0);
      [[unroll]] for (uint r = 0; r < 2u; ++r) {
        mx[r] = max(mx[r], subgroupShuffleXor(mx[r], 1u));
        mx[r] = max(mx[r], subgroupShuffleXor(mx[r], 2u));
        corr[r] = exp(m[r] - mx[r]);
        m[r] = mx[r];
      }
      F16A pa[BK / 16u];
      [[unroll]] for (uint j = 0; j < BK / 8u; ++j)[[unroll]] for (uint e = 0; e < 4u; ++e) {
        const uint r = e >> 1u;
        const bool seen = base + 8u * j + c2 + (e & 1u) <= pos[r];
        const float16_t w = float16_t(seen ? exp(sc[j][e] - mx[r]) : 0.0);
        ls[r] += float(w);
        pa[j >> 1u][4u * r + 2u * (j & 1u) + (e & 1u)] = w;
      }
      [[unroll]] for (uint r = 0; r < 2u; ++r) {
        ls[r] += subgroupShuffleXor(ls[r], 1u);
        ls[r] += subgroupShuffleXor(ls[r], 2u);
        l[r] = l[r] * corr[r] + ls[r];
      }
      [[unroll]] for (uint j = 0; j < NW; ++j)[[unroll]] for (uint e = 0; e < 4u; ++e)
        oc[j][e] *= corr[e >> 1u];
      [[unroll]] for (uint kk = 0; kk < BK / 16u; ++kk)[[unroll]] for (uint j = 0; j < NW; ++j) {
        F16B vb;
        coopMatLoadNV(vb, kv, b * TILE + (BK + 16u * kk) * RW + j, RW, false);
        oc[j] = coopMatMulAddNV(pa[kk], vb, oc[j]);
      }
    }
    if (more) stage(b ^ 1u, tid);
    barrier();  // the next buffer staged; every read of this one done before it is restaged
  }
  [[unroll]] for (uint e = 0; e < 4u; ++e) {
    const uint r = e >> 1u, t = t0 + sr + g + 8u * r;
    if (t >= pc.T) continue;
    [[unroll]] for (uint j = 0; j < NW; ++j)
      STOREF(o, Y16, (t * pc.H + h) * HD + 8u * j + c2 + (e & 1u), oc[j][e] / l[r]);
  }
}
