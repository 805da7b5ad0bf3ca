#version 450
// attention, in three variants of this file:
//  VKLLM_KV_STORE: write k, v rows t into cache rows pos + t (rounded to the cache dtype); with
//    VKLLM_ROPE (the prefill attention run's store), k is the key before its rope op (and with
//    QKNORM before its per-head norm), normed and rotated here (attention_run.glsl, a subgroup a
//    key row where QKNORM) before the cache's rounding;
//  (default): causal grouped-query attention of one (token t, head h) over one split of its keys:
//    workgroup g takes (t, h) = g / S and keys [c * C, (c + 1) * C) with c = g % S (S and C fixed
//    per executor for decode, so a recorded step replays at any position), tile by tile as
//    attention_split.glsl computes them. With S == 1 it writes the output; otherwise its partial
//    (running max m, sum l, unnormalized accumulator) goes to the scratch `part`;
//  VKLLM_COMBINE: merges the S partials of each (t, h) into the output (split-K, "flash
//    decoding": a decode step has only H (t, h) pairs, too few workgroups for a GPU).
// VKLLM_BATCH (with the store or the default variant): a batched forward (docs/ir.md): the rows
// buffer brow holds per row t (position, its block table's offset in brow, its sequence's last
// position in the forward, cache row of the position), so row t stores at its own cache row and
// attends to positions 0..pos of its sequence, key j at cache row table[j / BT] * BT + j % BT.
// VKLLM_ROPE with VKLLM_BATCH (the batched attention run, vk_fused.cpp): the store's keys as
// above, and the default variant's queries normed and rotated as it loads them (attention_run.glsl),
// each at its row's position.
// GQ (VKLLM_BATCH's default variant): query heads a workgroup, GQ consecutive heads of one kv
// head's group, so that each tile's key and value loads serve all of them; the heads' tiles are
// computed one head after the other, each exactly as a workgroup of its own would (the same
// values). The host uses GQ > 1 only with one split.
// Push constant win > 0 (the default and batch variants): query position p attends to keys
// max(0, p - win + 1)..p only (Gemma's sliding-window layers). Push constant rows (the store and
// default variants): the caches' rows, position j at row kv_row(j, rows) (a sliding layer's ring;
// the batched variants' caches are the block pool, rows unused).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#ifdef VKLLM_KV_STORE
#define WG 64
#else
#define WG 256
#endif
#include "common.glsl"
#ifdef VKLLM_BATCH  // (attention_run.glsl's positions: row t's, and its sequence's last)
#define RUN_POS(t) brow[(t) * 4u]
#define RUN_LAST(t) brow[(t) * 4u + 2u]
#endif
layout(constant_id = 1) const bool A16 = false;  // q / k / v activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (% 8 == 0, <= 256)
#ifdef VKLLM_KV_STORE
DECL_FBUF(0, k, readonly)
DECL_FBUF(1, v, readonly)
DECL_FBUF(2, kc, writeonly)
DECL_FBUF(3, vc, writeonly)
#ifdef VKLLM_BATCH
layout(std430, binding = 4) readonly buffer ROWS { uint brow[]; };
#define CACHE_ROW(t) brow[(t) * 4u + 3u]
#else
DECL_STEP(4)
#define CACHE_ROW(t) kv_row(step_pos + (t), pc.rows)
#endif
#ifdef VKLLM_ROPE
layout(push_constant) uniform PC { uint T, W, R, orig, ctx; float eps; uint rows; } pc;
#define RUN_LOAD(i) LOADF(k, X16, i)
#include "attention_run.glsl"
#else
layout(push_constant) uniform PC { uint T, W, rows; } pc;
#endif
void main() {
#ifdef VKLLM_ROPE
  if (QKNORM) {  // a subgroup a key row rr = t Hkv + kvh (the host dispatches WG / subgroup rows
                 // a workgroup)
    const uint rr = flat_group() * gl_NumSubgroups + gl_SubgroupID, hkv = pc.W / HD;
    if (rr >= pc.T * hkv) return;  // (uniform per subgroup)
    const uint row = rr * HD, t = rr / hkv, dst = CACHE_ROW(t) * pc.W + row - t * pc.W;
    const float inv = run_inv(row);
    for (uint j = gl_SubgroupInvocationID; j < HD; j += gl_SubgroupSize) {
      STOREF(kc, C16, dst + j, run_out(row, j, t, inv));
      STOREF(vc, C16, dst + j, LOADF(v, A16, row + j));
    }
    return;
  }
#endif
  const uint idx = flat_group() * WG + gl_LocalInvocationID.x;
  if (idx >= pc.T * pc.W) return;
  const uint dst = CACHE_ROW(idx / pc.W) * pc.W + idx % pc.W;
#ifdef VKLLM_ROPE
  STOREF(kc, C16, dst, run_out(idx - idx % HD, idx % HD, idx / pc.W, 0.0));
#else
  STOREF(kc, C16, dst, LOADF(k, A16, idx));
#endif
  STOREF(vc, C16, dst, LOADF(v, A16, idx));
}
#elif defined(VKLLM_COMBINE)
layout(std430, binding = 0) readonly buffer P { float part[]; };
DECL_FBUF(1, o, writeonly)
layout(push_constant) uniform PC { uint TH, hd, S; } pc;
#define ATT_MERGE
#define ATT_MERGE_ONLY
#include "attention_split.glsl"
void main() {
  const uint th = flat_group(), tid = gl_LocalInvocationID.x;
  if (th >= pc.TH) return;
  const float y = att_merge(th * pc.S * (HD + 2u), pc.S);
  if (tid < HD) STOREF(o, Y16, th * HD + tid, y);
}
#else
DECL_FBUF(0, q, readonly)
layout(std430, binding = 1) readonly buffer KCW { uvec2 kcw[]; };
layout(std430, binding = 1) readonly buffer KCN { uint kcn[]; };
layout(std430, binding = 2) readonly buffer VCW { uvec2 vcw[]; };
layout(std430, binding = 2) readonly buffer VCN { uint vcn[]; };
DECL_FBUF(3, o, writeonly)
layout(std430, binding = 4) writeonly buffer P { float part[]; };
#ifdef VKLLM_BATCH
#ifdef VKLLM_ROPE  // (bindings 5 and 6: attention_run.glsl's)
layout(std430, binding = 7) readonly buffer ROWS { uint brow[]; };
layout(push_constant) uniform PC {
  uint T, H, Hkv, hd;
  float scale;
  uint S, C, BT, win, R, orig, ctx;
  float eps;
} pc;
#define RUN_LOAD(i) LOADF(q, X16, i)
#include "attention_run.glsl"
#else
layout(std430, binding = 5) readonly buffer ROWS { uint brow[]; };
layout(push_constant) uniform PC { uint T, H, Hkv, hd; float scale; uint S, C, BT, win; } pc;
#endif
uint att_tb;  // this row's block table offset in brow
#define ATT_ROW(j) (brow[att_tb + (j) / pc.BT] * pc.BT + (j) % pc.BT)
#else
DECL_STEP(5)
layout(push_constant) uniform PC { uint T, H, Hkv, hd; float scale; uint S, C, win, rows; } pc;
#endif
#ifdef VKLLM_BATCH
layout(constant_id = 9) const uint GQ = 1;
uint att_qo = 0u;  // the current head's row in qs
#define ATT_QOFF att_qo
#else
const uint GQ = 1u;
#endif
shared float qs[HD * GQ];
#include "attention_split.glsl"

void main() {
  const uint g = flat_group(), tid = gl_LocalInvocationID.x;
  const uint th0 = g / pc.S * GQ, c = g % pc.S;  // heads th0 .. th0 + GQ - 1 of row t
  if (th0 >= pc.T * pc.H) return;  // uniform per workgroup
  const uint t = th0 / pc.H, h = th0 % pc.H;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * HD, koff = kvh * HD;
#ifdef VKLLM_BATCH
  att_tb = brow[t * 4u + 1u];
  const uint p = brow[t * 4u];
#else
  att_rows = pc.rows;
  const uint p = step_pos + t;
#endif
  // Keys lo..p (a sliding window of win keys; win 0: all), this split's share of them (empty past
  // the keys or before the window).
  const uint lo = pc.win > 0u && p + 1u > pc.win ? p + 1u - pc.win : 0u;
  const uint first = max(c * pc.C, lo), n = min(p + 1u, c * pc.C + pc.C);
  att_fetch(first, n, W, koff, ATT_NONE);  // the first tile's loads beside q's
  [[unroll]] for (uint i = 0; i < GQ; ++i) {
    const uint th = th0 + i;
#if defined(VKLLM_BATCH) && defined(VKLLM_ROPE)
    const float inv = QKNORM ? run_inv(th * HD) : 0.0;  // (every subgroup the row's sum)
    if (tid < HD) qs[i * HD + tid] = run_out(th * HD, tid, t, inv);
#else
    if (tid < HD) qs[i * HD + tid] = LOADF(q, A16, th * HD + tid);
#endif
  }
  barrier();
  if (GQ == 1u) {
    att_run(first, n, W, koff, pc.scale, ATT_NONE, true);
  } else {
#ifdef VKLLM_BATCH
    // Each head's running state, swapped into attention_split.glsl's for its turn of a tile.
    float m[GQ], l[GQ], acc[GQ];
    [[unroll]] for (uint i = 0; i < GQ; ++i) {
      m[i] = att_m;
      l[i] = att_l;
      acc[i] = att_acc;
    }
    for (uint base = first; base < n; base += ATT_KT) {
      if (base != first) att_fetch(base, n, W, koff, ATT_NONE);
      [[unroll]] for (uint i = 0; i < GQ; ++i) {
        att_qo = i * HD;
        att_m = m[i];
        att_l = l[i];
        att_acc = acc[i];
        att_tile(base, n, pc.scale, ATT_NONE);
        m[i] = att_m;
        l[i] = att_l;
        acc[i] = att_acc;
      }
    }
    if (tid < HD)
      [[unroll]] for (uint i = 0; i < GQ; ++i) STOREF(o, Y16, (th0 + i) * HD + tid, acc[i] / l[i]);
    return;
#endif
  }
  if (pc.S == 1u) {
    if (tid < HD) STOREF(o, Y16, th0 * HD + tid, att_acc / att_l);
    return;
  }
  att_write_part(g * (HD + 2u));  // the (th, c) partial
}
#endif
