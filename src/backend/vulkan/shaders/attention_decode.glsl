// The decode step's attention for one (query head, split) item, shared by attention_decode.comp
// (a workgroup an item) and the decode chain's attention stages (linear_8da4w_chain.comp, a
// workgroup's items one after the other), so that both compute every value the same way; and
// folding in what the unfused program runs before and after the split attention (attention.comp):
//  - QKNORM: the per-head RMS norm of q and of the new key (Qwen3's q_norm / k_norm), summed in
//    rms_norm.comp's order (subgroup blocks of consecutive dims, blocks in order);
//  - ROPE: rope.comp's rotation of q and the new key at the step's position (same table);
//  - the KV store: the new key and value rows (rounded to the cache dtype) are used from
//    registers by every item and written to the caches by one (split c of the position, first
//    query head of the kv head), so no item reads a cache row written in this dispatch;
//  - the split merge: each non-empty split writes its partial, and the last to finish (a counter
//    per head) merges them in attention.comp's combine order and resets the counter.
// Every intermediate is rounded to the dtype the unfused program stores it in, so the output is
// bit-identical with the unfused ops on the same device.
// The includer defines, besides attention_split.glsl's needs (ATT_MERGE on): the constants A16 /
// N16 / R16 / QKNORM / ROPE / ATT_MEASURE (attention_decode.comp's spec constants), round_to, the
// shared rows qs[HD] and tmp[2 HD], last_split, and these accessors: ATT_Q(i), ATT_K(i), ATT_V(i)
// (q / k / v as float), ATT_CS(i) (rope's cos/sin table), ATT_QN(j), ATT_KN(j) (the norm
// weights), ATT_STORE_KC(i, v), ATT_STORE_VC(i, v), ATT_STORE_O(i, v), ATT_COUNT(h) (atomicAdd
// of 1 to head h's counter, returning the old value) and ATT_RESET(h).

#include "rope.glsl"

// The item's parameters (attention_decode.comp's push constants). win > 0: a sliding window, the
// step at position pos attends to keys max(0, pos - win + 1)..pos only (Gemma's sliding layers;
// attention.comp's window); 0: to every key. rows: the caches' rows, position j at row
// kv_row(j, rows) (a sliding layer's ring; the row the step writes holds a position below its
// window, which no item reads).
struct AttP {
  uint H, Hkv, S, C, R, orig, ctx;
  float scale, qeps, keps;
  uint win, rows;
};

// Rows r0 .. r0 + nr - 1 of tmp (0: q at tmp[0], 1: the new key at tmp[HD]) normed and rotated
// as the unfused ops store them, into qs (q) or att_ks (the key, rounded as the cache stores it);
// thread t takes element t % HD of row r0 + t / HD. Both rows at once (nr = 2) only where each
// row's elements then sit in the lanes one row alone would put them in (HD a multiple of the
// subgroup size, 2 HD <= ATT_WG), so that the subgroup sums are the same. c: this thread's rope
// cos/sin. Every thread calls it.
void prepare(AttP p, uint r0, uint nr, uint pos, vec2 c) {
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
      for (uint i = 0; i < att_groups(); ++i) total += red[i];
    else
      for (uint i = 0, per = HD / gl_SubgroupSize; i < per; ++i) total += red[(r - r0) * per + i];
    barrier();
    const float inv = rms_inv(total, HD, is_q ? p.qeps : p.keps);
    if (mine) {
      const float w = is_q ? ATT_QN(j) : ATT_KN(j);
      tmp[off + j] = round_to(N16, w * (tmp[off + j] * inv));
    }
    barrier();
  }
  const uint half_r = p.R / 2u;
  if (mine) {
    float y = tmp[off + j];
    if (ROPE && j < p.R) {
      const uint i = j < half_r ? j : j - half_r;
      const float a = tmp[off + i], b = tmp[off + i + half_r];
      y = round_to(R16, rope_dim(j < half_r, a, b, c));
    }
    if (is_q)
      qs[j] = y;
    else
      att_ks[j] = round_to(C16, y);  // as the cache stores it
  }
  barrier();
}

// The first key the step at position pos sees (its window's), and the first split holding any of
// its keys: the splits before it are wholly below the window, and have no item.
uint att_lo(AttP p, uint pos) { return p.win > 0u && pos + 1u > p.win ? pos + 1u - p.win : 0u; }
uint att_c0(AttP p, uint pos) { return att_lo(p, pos) / p.C; }
// The keys of item (h, c) at step position pos: [first, n) (attention.comp's split).
uint att_first(AttP p, uint c, uint pos) { return max(c * p.C, att_lo(p, pos)); }
uint att_end(AttP p, uint c, uint pos) { return min(pos + 1u, c * p.C + p.C); }
// Issues the loads of item (h, c)'s first tile (what att_item does first with fetched = false).
void att_item_fetch(AttP p, uint h, uint c, uint pos) {
  const uint kvh = h / (p.H / p.Hkv);
  att_rows = p.rows;
  att_fetch(att_first(p, c, pos), att_end(p, c, pos), p.Hkv * HD, kvh * HD, pos);
}

// Item (h, c) of the step at position pos (keys past the position or wholly below the window:
// nothing to do); fetched: its first tile's loads were issued by att_item_fetch. Every thread calls
// it. Returns true in the workgroup that wrote head h's output (for attention_decode.comp's
// OQUANT).
bool att_item(AttP p, uint h, uint c, uint pos, bool fetched) {
  const uint tid = gl_LocalInvocationID.x, c0 = att_c0(p, pos);
  // (uniform per workgroup; empty splits do nothing)
  if (h >= p.H || c * p.C > pos || c < c0) return false;
  const uint group = p.H / p.Hkv, kvh = h / group, W = p.Hkv * HD, koff = kvh * HD;
  const uint first = att_first(p, c, pos), n = att_end(p, c, pos);
  att_rows = p.rows;
  // Every load at once: the split's first tile (row pos is the new one, from att_ks / att_vs),
  // q, the new key, and the new value as the cache stores it.
  if (!fetched) att_fetch(first, n, W, koff, pos);
  if (tid < HD) {
    tmp[tid] = ATT_Q(h * HD + tid);
    tmp[HD + tid] = ATT_K(koff + tid);
    att_vs[tid] = round_to(C16, ATT_V(koff + tid));
  }
  // This thread's rope cos/sin (dim tid % HD of q and of the key), loaded with the rest.
  vec2 rcs = vec2(0.0);
  if (ROPE && tid < ATT_WG && tid % HD < p.R) {
    const uint half_r = p.R / 2u, j = tid % HD;
    rcs = ATT_CS(rope_at(pos, pos, p.orig, p.ctx, half_r, j < half_r ? j : j - half_r));
  }
  if (ATT_MEASURE == 1u) {  // the loads only
    uint x = 0u;
    [[unroll]] for (uint i = 0; i < ATT_NWK; ++i) x ^= ATT_KWORD(i).x ^ ATT_KWORD(i).y;
    [[unroll]] for (uint i = 0; i < ATT_NWV; ++i) x ^= ATT_VWORD(i).x ^ ATT_VWORD(i).y;
    barrier();
    const float y = subgroupAdd(float(x & 1023u) + rcs.x) + tmp[tid % (2u * HD)] + att_vs[tid % HD];
    if (c == c0 && tid < HD) ATT_STORE_O(h * HD + tid, y);
    return false;
  }
  barrier();
  if (ATT_MEASURE != 3u) {
    if (2u * HD <= ATT_WG && HD % gl_SubgroupSize == 0u) {
      prepare(p, 0u, 2u, pos, rcs);
    } else {
      prepare(p, 0u, 1u, pos, rcs);
      prepare(p, 1u, 1u, pos, rcs);
    }
  }
  if (c == pos / p.C && h % group == 0u && tid < HD) {
    const uint at = kv_row(pos, p.rows) * W + koff + tid;
    ATT_STORE_KC(at, att_ks[tid]);
    ATT_STORE_VC(at, att_vs[tid]);
  }
  att_m = -3.0e38;  // (a workgroup of the decode chain runs several items)
  att_l = 0.0;
  att_acc = 0.0;
  att_run(first, n, W, koff, p.scale, pos, true);
  // The splits c0 .. pos / C hold keys; attention.comp's combine merges every split, but those
  // outside them are empty (m -3e38, l and the accumulators 0) and add exact zeros to its sums,
  // so merging these alone gives the same bits. A head of one split at this position stores its
  // output itself: the merge of one partial (m, l, acc) is (0 + acc exp(m - m)) /
  // (0 + l exp(m - m)) = acc / l, the same value.
  const uint splits = pos / p.C + 1u - c0;
  if (splits == 1u) {
    if (tid < HD) ATT_STORE_O(h * HD + tid, att_acc / att_l);
    return true;
  }
  const uint stride = HD + 2u;
  att_write_part((h * p.S + c) * stride);
  if (ATT_MEASURE == 2u) {
    if (c == c0 && tid < HD) ATT_STORE_O(h * HD + tid, att_acc / att_l);
    return false;
  }
  // The last split of the head to finish merges (splits past the position or below the window
  // stay out).
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_split = ATT_COUNT(h) == splits - 1u ? 1u : 0u;
  barrier();
  if (last_split == 0u) return false;
  memoryBarrierBuffer();
  const float y = att_merge((h * p.S + c0) * stride, splits);  // attention.comp's combine
  if (tid < HD) ATT_STORE_O(h * HD + tid, y);
  if (tid == 0u) ATT_RESET(h);
  return true;
}
