#version 450
// The decode step's fused attention (one token): workgroup g takes head h = g / S and the keys of
// split c = g % S, as attention.comp does (attention_split.glsl's tiles, the split's loads issued
// first, beside the q / k / v rows'), and folds in what the unfused program runs before and
// after it:
//  - QKNORM: the per-head RMS norm of q and of the new key (Qwen3's q_norm / k_norm), summed in
//    rms_norm.comp's order (subgroup blocks of consecutive dims, blocks in order);
//  - ROPE: rope.comp's rotation of q and the new key at the step's position (same table);
//  - the KV store: the new key and value rows (rounded to the cache dtype) are used from
//    registers by every workgroup and written to the caches by one (split c of the position,
//    first query head of the kv head), so no workgroup reads a cache row written in this dispatch;
//  - the split merge: each non-empty split writes its partial, and the last to finish (a counter
//    per head) merges them in attention.comp's combine order and resets the counter;
//  - OQUANT (when the output's readers are linear_8da4w ops): the last head to be merged (one more
//    counter, after the heads') quantizes the whole output row for them, as linear_8da4w_quant.
// Every intermediate is rounded to the dtype the unfused program stores it in, so the output is
// bit-identical with the unfused ops on the same device.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;   // q, k, v activations (the run's inputs)
layout(constant_id = 2) const bool C16 = false;   // caches
layout(constant_id = 3) const bool Y16 = false;   // output
layout(constant_id = 4) const bool QKNORM = false;
layout(constant_id = 5) const bool ROPE = false;
layout(constant_id = 6) const bool N16 = false;   // the normed q / k, as stored
layout(constant_id = 7) const bool R16 = false;   // the rotated q / k, as stored
layout(constant_id = 8) const bool OQUANT = false;
layout(constant_id = 9) const uint HD = 64;  // head dim (% 8 == 0, <= 256)
// Measurement switches (VKLLM_ATT_MEASURE; results wrong except at 0): 1 the loads only (the
// split's tile, q, k, v, consumed into a made-up output), 2 no merge (each split writes its
// partial and split 0 its own output), 3 no norm or rope.
layout(constant_id = 10) const uint MEASURE = 0;
// Workgroup order (VKLLM_ATT_ORDER=0 measures the old one): 0 g = h S + c, 1 g = c H + h (every head's first splits,
// the ones a short context fills, are the first workgroups of the dispatch).
layout(constant_id = 11) const uint ORDER = 1;
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, k, readonly)
DECL_FBUF(2, v, readonly)
DECL_FBUF(3, kc, writeonly)  // written by one workgroup (row pos), never read here at row pos
// The same caches, read at rows < pos (attention_split.glsl's views).
layout(std430, binding = 4) readonly buffer KCW { uvec2 kcw[]; };
layout(std430, binding = 4) readonly buffer KCN { uint kcn[]; };
DECL_FBUF(5, vc, writeonly)
layout(std430, binding = 6) readonly buffer VCW { uvec2 vcw[]; };
layout(std430, binding = 6) readonly buffer VCN { uint vcn[]; };
DECL_FBUF(7, o, coherent)  // read back by the quantizing workgroup (OQUANT)
layout(std430, binding = 8) coherent buffer P { float part[]; };
layout(std430, binding = 9) coherent buffer CNT { uint counter[]; };
DECL_STEP(10)
layout(std430, binding = 11) readonly buffer CS { vec2 cs[]; };
layout(std430, binding = 12) readonly buffer QN { float qn[]; };
layout(std430, binding = 13) readonly buffer KN { float kn[]; };
layout(push_constant) uniform PC {
  uint H, Hkv, hd;
  float scale;
  uint S, C, R, orig, ctx;
  float qeps, keps;
} pc;
#define QUANT_ROW_BINDING 14
#include "quant.glsl"
float row_value(uint r, uint j) { return LOADF(o, Y16, j); }
shared float qs[HD], tmp[2u * HD];  // q as attended; the q and k rows before norm and rope
shared uint last_split;
#define ATT_MERGE
#include "attention_split.glsl"

// OQUANT: called by each head's workgroup that wrote the head's output; the last of them quantizes
// the whole row for the linear_8da4w ops that read it (counter H, after the heads').
void quant_tail() {
  if (!OQUANT) return;
  const uint tid = gl_LocalInvocationID.x;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_split = atomicAdd(counter[pc.H], 1u) == pc.H - 1u ? 1u : 0u;
  barrier();
  if (last_split == 0u) return;
  memoryBarrierBuffer();
  const uint row = pc.H * HD;
  float lo = 0.0, hi = 0.0;
  for (uint j = tid; j < row; j += WG) {
    const float v = row_value(0u, j);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(0u, row, lo, hi);
  if (tid == 0u) counter[pc.H] = 0u;
}

float round_to(bool f16, float x) {
#ifdef VKLLM_F16
  if (f16) return float(float16_t(x));
#endif
  return x;
}

// Rows r0 .. r0 + nr - 1 of tmp (0: q at tmp[0], 1: the new key at tmp[HD]) normed and rotated
// as the unfused ops store them, into qs (q) or att_ks (the key, rounded as the cache stores it);
// thread t takes element t % HD of row r0 + t / HD. Both rows at once (nr = 2) only where each
// row's elements then sit in the lanes one row alone would put them in (HD a multiple of the
// subgroup size, 2 HD <= WG), so that the subgroup sums are the same. c: this thread's rope
// cos/sin. Every thread calls it.
void prepare(uint r0, uint nr, uint pos, vec2 c) {
  const uint tid = gl_LocalInvocationID.x, j = tid % HD, r = r0 + min(tid / HD, nr - 1u);
  const bool mine = tid < nr * HD, is_q = r == 0u;
  const uint off = r * HD;
  if (QKNORM) {
    // rms_norm.comp's sum for a group narrower than its workgroup: subgroup sums of consecutive
    // elements, added in order.
    const float x = mine ? tmp[off + j] : 0.0;
    const float s = subgroupAdd(x * x);
    if (subgroupElect()) red[gl_SubgroupID] = s;
    barrier();
    float total = 0.0;
    if (nr == 1u)
      for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
    else
      for (uint i = 0, per = HD / gl_SubgroupSize; i < per; ++i) total += red[(r - r0) * per + i];
    barrier();
    const float inv = 1.0 / sqrt(total / float(HD) + (is_q ? pc.qeps : pc.keps));
    if (mine) {
      const float w = is_q ? qn[j] : kn[j];
      tmp[off + j] = round_to(N16, w * (tmp[off + j] * inv));
    }
    barrier();
  }
  const uint half_r = pc.R / 2u;
  if (mine) {
    float y = tmp[off + j];
    if (ROPE && j < pc.R) {
      const uint i = j < half_r ? j : j - half_r;
      const float a = tmp[off + i], b = tmp[off + i + half_r];
      y = round_to(R16, j < half_r ? a * c.x - b * c.y : b * c.x + a * c.y);
    }
    if (is_q)
      qs[j] = y;
    else
      att_ks[j] = round_to(C16, y);  // as the cache stores it
  }
  barrier();
}

void main() {
  const uint g = flat_group(), tid = gl_LocalInvocationID.x;
  const uint h = ORDER == 1u ? g % pc.H : g / pc.S, c = ORDER == 1u ? g / pc.H : g % pc.S;
  const uint pos = step_pos;
  if (h >= pc.H || c * pc.C > pos) return;  // uniform per workgroup; empty splits do nothing
  const uint group = pc.H / pc.Hkv, kvh = h / group, W = pc.Hkv * HD, koff = kvh * HD;
  const uint first = c * pc.C, n = min(pos + 1u, first + pc.C);
  // Every load at once: the split's first tile (row pos is the new one, from att_ks / att_vs),
  // q, the new key, and the new value as the cache stores it.
  att_fetch(first, n, W, koff, pos);
  if (tid < HD) {
    tmp[tid] = LOADF(q, A16, h * HD + tid);
    tmp[HD + tid] = LOADF(k, A16, koff + tid);
    att_vs[tid] = round_to(C16, LOADF(v, A16, koff + tid));
  }
  // This thread's rope cos/sin (dim tid % HD of q and of the key), loaded with the rest.
  vec2 rcs = vec2(0.0);
  if (ROPE && tid % HD < pc.R) {
    const uint half_r = pc.R / 2u, row0 = pos + 1u > pc.orig ? pc.ctx : 0u, j = tid % HD;
    rcs = cs[(row0 + pos) * half_r + (j < half_r ? j : j - half_r)];
  }
  if (MEASURE == 1u) {  // the loads only
    uint x = 0u;
    [[unroll]] for (uint i = 0; i < ATT_NWK; ++i) x ^= att_k[i].x ^ att_k[i].y;
    [[unroll]] for (uint i = 0; i < ATT_NWV; ++i) x ^= att_v[i].x ^ att_v[i].y;
    barrier();
    const float y = subgroupAdd(float(x & 1023u) + rcs.x) + tmp[tid % (2u * HD)] + att_vs[tid % HD];
    if (c == 0u && tid < HD) STOREF(o, Y16, h * HD + tid, y);
    return;
  }
  barrier();
  if (MEASURE != 3u) {
    if (2u * HD <= WG && HD % gl_SubgroupSize == 0u) {
      prepare(0u, 2u, pos, rcs);
    } else {
      prepare(0u, 1u, pos, rcs);
      prepare(1u, 1u, pos, rcs);
    }
  }
  if (c == pos / pc.C && h % group == 0u && tid < HD) {
    STOREF(kc, C16, pos * W + koff + tid, att_ks[tid]);
    STOREF(vc, C16, pos * W + koff + tid, att_vs[tid]);
  }
  att_run(first, n, W, koff, pc.scale, pos, true);
  if (pc.S == 1u) {
    if (tid < HD) STOREF(o, Y16, h * HD + tid, att_acc / att_l);
    quant_tail();
    return;
  }
  const uint stride = HD + 2u;
  att_write_part((h * pc.S + c) * stride);
  if (MEASURE == 2u) {
    if (c == 0u && tid < HD) STOREF(o, Y16, h * HD + tid, att_acc / att_l);
    return;
  }
  // The last split of the head to finish merges (splits past the position stay out).
  const uint splits = pos / pc.C + 1u;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_split = atomicAdd(counter[h], 1u) == splits - 1u ? 1u : 0u;
  barrier();
  if (last_split == 0u) return;
  memoryBarrierBuffer();
  const float y = att_merge(h * pc.S * stride, splits);  // attention.comp's combine
  if (tid < HD) STOREF(o, Y16, h * HD + tid, y);
  if (tid == 0u) counter[h] = 0u;
  quant_tail();
}
