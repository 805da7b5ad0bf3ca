// One query head's causal attention over a run of keys of the KV caches, a tile of KT keys at a
// time with an online softmax, and the merge of a head's split partials: shared by attention.comp
// (the unfused op) and attention_decode.comp (the decode step's fused run), so that both compute
// every score, weight and sum in the same order and give bit-identical outputs.
//
// Each tile's key and value rows are loaded with 8-byte loads, all of them issued at once
// (att_fetch) before anything waits on them: one memory round trip a tile (docs/perf.md, session
// 13: the former loop of a subgroup a key, lanes across the dims, waited a round trip per key pair
// and per four values).
//  - Scores: four threads a key, each with a quarter of the head dims: thread s takes the row's
//    words s, s + 4, s + 8, ... (so that a subgroup's load covers whole rows, not four 8-byte
//    pieces 1/4 row apart); their partial dots are summed over the four lanes ((a + b) + (c + d):
//    every lane gets the same value).
//  - Values: thread (kq, wd) takes word wd of the value rows of keys kq, kq + KQ, ...; its sums go
//    through shared memory, and thread d adds dim d's KQ partials in order.
// The includer defines WG (256, or 512 in the decode chain), the spec constants HD (head dim, a
// multiple of 8, <= 256) and C16 (fp16 caches), the partials buffer part[] (read by att_merge,
// ATT_MERGE; written by att_write_part), and for the tiles (unless ATT_MERGE_ONLY) the caches'
// uvec2 and uint views kcw, kcn / vcw, vcn (the same bindings) and the query row qs[HD] (shared,
// fp32); or ATT_PART(i), ATT_KCW(i), ATT_KCN(i), ATT_VCW(i), ATT_VCN(i) in their place (the decode
// chain reaches them through device addresses).
// The tiles and sums are laid out for ATT_WG = 256 threads whatever WG is: in a wider workgroup
// the threads past the first 256 take no key, value or dim (they only meet the barriers and add
// nothing), so every score, weight and sum is the same, in the same order.
// ATT_ROW(j): the cache row of key position j: by default kv_row(j, att_rows), the includer
// setting att_rows to the caches' rows (a sliding layer's ring) before its tiles; the batched
// kernel maps it through a block table instead.
#ifndef ATT_ROW
uint att_rows = 0xFFFFFFFFu;
#define ATT_ROW(j) kv_row(j, att_rows)
#endif
// ATT_QOFF: where the query row starts in qs (the batched kernel's group of query heads sit one
// after the other); 0 by default.
#ifndef ATT_QOFF
#define ATT_QOFF 0u
#endif
#ifndef ATT_PART
#define ATT_PART(i) part[i]
#define ATT_KCW(i) kcw[i]
#define ATT_KCN(i) kcn[i]
#define ATT_VCW(i) vcw[i]
#define ATT_VCN(i) vcn[i]
#endif
const uint ATT_WG = 256u;
const uint ATT_TPK = 4u, ATT_KT = ATT_WG / ATT_TPK;  // threads a key, keys a tile
const uint ATT_SPAN = HD / ATT_TPK;               // a thread's head dims (scores)
// Words of 8 bytes where a span is a whole number of them, else of 4 (head dims % 16 != 0, fp16).
const bool ATT_WIDE = C16 ? HD % 16u == 0u : HD % 8u == 0u;
const uint ATT_VPW = (C16 ? 2u : 1u) * (ATT_WIDE ? 2u : 1u);  // cache values a word
const uint ATT_NWK = ATT_SPAN / ATT_VPW;          // a thread's key words
const uint ATT_WPR = HD / ATT_VPW;                // words a row
const uint ATT_KQ = ATT_WG / ATT_WPR;             // key classes of the value mapping (>= 1)
const uint ATT_NWV = (ATT_KT + ATT_KQ - 1u) / ATT_KQ;  // a thread's value words
const uint ATT_NONE = 0xFFFFFFFFu;

// One entry per subgroup (a workgroup of up to 512 threads in subgroups of at least 8): red for
// the includer's reductions, att_rmax and att_rsum for wg_max's and wg_sum's.
shared float red[64], att_rmax[64], att_rsum[64];

// Workgroup-wide max / sum over the first ATT_WG threads: the subgroup's, then across those
// subgroups through shared memory. One barrier each: each has its own array, and att_tile's later
// barriers keep a tile's writes from overtaking the reads of the tile before.
uint att_groups() { return min(gl_NumSubgroups, ATT_WG / gl_SubgroupSize); }
float wg_max(float v) {
  const float s = subgroupMax(v);
  if (subgroupElect()) att_rmax[gl_SubgroupID] = s;
  barrier();
  float r = att_rmax[0];
  for (uint i = 1; i < att_groups(); ++i) r = max(r, att_rmax[i]);
  return r;
}
float wg_sum(float v) {
  const float s = subgroupAdd(v);
  if (subgroupElect()) att_rsum[gl_SubgroupID] = s;
  barrier();
  float r = att_rsum[0];
  for (uint i = 1; i < att_groups(); ++i) r += att_rsum[i];
  return r;
}

#ifndef ATT_MERGE_ONLY
shared float att_ps[ATT_KT];   // the tile's softmax weights
// The value sums of each key class (KQ x HD <= ATT_WG x VPW); an includer whose dispatch may run
// no attention sizes the array with ATT_VP_N.
#ifndef ATT_VP_N
#define ATT_VP_N (ATT_WG * 4u)
#endif
shared float att_vp[ATT_VP_N];
shared float att_ks[HD], att_vs[HD];  // the fresh key / value row (att_fetch's `fresh`)

float att_word(uvec2 w, uint e) {
#ifdef VKLLM_F16
  if (C16) return unpackHalf2x16(e < 2u ? w.x : w.y)[e & 1u];
#endif
  return uintBitsToFloat(e == 0u ? w.x : w.y);
}
uvec2 att_kload(uint e) {  // the word at cache element e
  return ATT_WIDE ? ATT_KCW(e / ATT_VPW) : uvec2(ATT_KCN(e / ATT_VPW), 0u);
}
uvec2 att_vload(uint e) {
  return ATT_WIDE ? ATT_VCW(e / ATT_VPW) : uvec2(ATT_VCN(e / ATT_VPW), 0u);
}

// The tile in flight, and this thread's running softmax state: m and l (the same in every
// thread) and dim tid's accumulator (tid < HD). In a workgroup of 2 ATT_WG threads or more (the
// decode chain's 512) the value words go to the second ATT_WG threads, which also sum them
// (thread ATT_VSHIFT + kq WPR + wd is the value mapping's (kq, wd): the same sums), so that a
// thread holds one array of words, a key's or a value's, not both (// Phi-4-mini's fp32 tile at head dim 128 is 64 registers a thread with both).
#if WG >= 512
const uint ATT_VSHIFT = ATT_WG;
const uint ATT_NW = ATT_NWK > ATT_NWV ? ATT_NWK : ATT_NWV;
uvec2 att_w[ATT_NW];
#define ATT_KWORD(i) att_w[i]
#define ATT_VWORD(i) att_w[i]
#else
const uint ATT_VSHIFT = 0u;
uvec2 att_k[ATT_NWK], att_v[ATT_NWV];
#define ATT_KWORD(i) att_k[i]
#define ATT_VWORD(i) att_v[i]
#endif
float att_m = -3.0e38, att_l = 0.0, att_acc = 0.0;

// Issues the loads of keys base .. base + KT - 1 below n (key j at element ATT_ROW(j) * W + koff
// of each cache). Row `fresh` is not in the cache yet: att_tile takes it from att_ks / att_vs.
void att_fetch(uint base, uint n, uint W, uint koff, uint fresh) {
  const uint tid = gl_LocalInvocationID.x, jk = base + tid / ATT_TPK, s = tid % ATT_TPK;
  if (tid < ATT_WG)
    [[unroll]] for (uint i = 0; i < ATT_NWK; ++i)
      ATT_KWORD(i) = jk < n && jk != fresh
                         ? att_kload(ATT_ROW(jk) * W + koff + (i * ATT_TPK + s) * ATT_VPW)
                         : uvec2(0u);
  const uint vt = tid - ATT_VSHIFT, kq = vt / ATT_WPR, wd = vt % ATT_WPR;
  if (tid >= ATT_VSHIFT)
    [[unroll]] for (uint i = 0; i < ATT_NWV; ++i) {
      const uint kk = kq + ATT_KQ * i, j = base + kk;
      ATT_VWORD(i) = kq < ATT_KQ && kk < ATT_KT && j < n && j != fresh
                         ? att_vload(ATT_ROW(j) * W + koff + wd * ATT_VPW)
                         : uvec2(0u);
    }
}

// Consumes the fetched tile into the running state. Every thread calls it.
void att_tile(uint base, uint n, float scale, uint fresh) {
  const uint tid = gl_LocalInvocationID.x, jk = base + tid / ATT_TPK, s = tid % ATT_TPK;
  float d = 0.0;
  [[unroll]] for (uint i = 0; i < ATT_NWK; ++i)
    [[unroll]] for (uint e = 0; e < ATT_VPW; ++e) {
      const uint dim = (i * ATT_TPK + s) * ATT_VPW + e;
      d += qs[ATT_QOFF + dim] * (jk == fresh ? att_ks[dim] : att_word(ATT_KWORD(i), e));
    }
  d += subgroupShuffleXor(d, 1u);
  d += subgroupShuffleXor(d, 2u);
  const bool key = tid < ATT_WG && jk < n;
  const float sc = key ? d * scale : -3.0e38;
  const float mn = max(att_m, wg_max(sc));
  const float p = key ? exp(sc - mn) : 0.0;
  if (s == 0u && tid < ATT_WG) att_ps[tid / ATT_TPK] = p;
  const float corr = exp(att_m - mn);
  att_l = att_l * corr + wg_sum(s == 0u ? p : 0.0);  // its barriers also publish att_ps
  const uint vt = tid - ATT_VSHIFT, kq = vt / ATT_WPR, wd = vt % ATT_WPR;
  if (tid >= ATT_VSHIFT && kq < ATT_KQ) {
    float a[ATT_VPW];
    [[unroll]] for (uint e = 0; e < ATT_VPW; ++e) a[e] = 0.0;
    [[unroll]] for (uint i = 0; i < ATT_NWV; ++i) {
      const uint kk = kq + ATT_KQ * i;
      if (kk < ATT_KT) {
        const float pj = att_ps[kk];
        [[unroll]] for (uint e = 0; e < ATT_VPW; ++e)
          a[e] += pj * (base + kk == fresh ? att_vs[wd * ATT_VPW + e] : att_word(ATT_VWORD(i), e));
      }
    }
    [[unroll]] for (uint e = 0; e < ATT_VPW; ++e) att_vp[kq * HD + wd * ATT_VPW + e] = a[e];
  }
  barrier();
  if (tid < HD) {
    float t = 0.0;
    for (uint q = 0; q < ATT_KQ; ++q) t += att_vp[q * HD + tid];
    att_acc = att_acc * corr + t;
  }
  att_m = mn;
  barrier();  // att_ps and att_vp are rewritten by the next tile
}

// The running state as split partial `at` of the scratch: m, l, then the HD accumulators.
void att_write_part(uint at) {
  const uint tid = gl_LocalInvocationID.x;
  if (tid == 0u) {
    ATT_PART(at) = att_m;
    ATT_PART(at + 1u) = att_l;
  }
  if (tid < HD) ATT_PART(at + 2u + tid) = att_acc;
}

// Keys first .. n - 1, tile by tile (the first tile's loads may already be in flight: fetched).
void att_run(uint first, uint n, uint W, uint koff, float scale, uint fresh, bool fetched) {
  for (uint base = first; base < n; base += ATT_KT) {
    if (base != first || !fetched) att_fetch(base, n, W, koff, fresh);
    att_tile(base, n, scale, fresh);
  }
}
#endif

#ifdef ATT_MERGE
// The merge of a head's `splits` partials at part[hb + s * (HD + 2)] (m, l, then the HD
// accumulators), in split order; returns dim tid's output (tid < HD). Each chunk of splits is
// loaded into shared memory at once, then summed in order; the first chunk's loads are issued
// with those of m and l (one round trip to L2 for a merge of up to ATT_MCH splits).
// Splits a chunk (16 KB of shared memory at most; the includer may set fewer, ATT_MCH_MAX: the
// chunks only stage the loads, the sums are the same).
#ifndef ATT_MCH_MAX
#define ATT_MCH_MAX 16u
#endif
const uint ATT_MCH0 = HD <= 128u ? 16u : 8u;
const uint ATT_MCH = ATT_MCH0 < ATT_MCH_MAX ? ATT_MCH0 : ATT_MCH_MAX;
shared float att_mw[64], att_ml[64];  // each split's m and l (<= 64)
shared float att_mp[ATT_MCH * HD];
void att_merge_chunk(uint hb, uint s0, uint cnt) {
  const uint tid = gl_LocalInvocationID.x, stride = HD + 2u;
  for (uint i = tid; i < cnt * HD; i += WG)
    att_mp[i] = ATT_PART(hb + (s0 + i / HD) * stride + 2u + i % HD);
}
float att_merge(uint hb, uint splits) {
  const uint tid = gl_LocalInvocationID.x, stride = HD + 2u;
  for (uint s = tid; s < splits; s += WG) {
    att_mw[s] = ATT_PART(hb + s * stride);
    att_ml[s] = ATT_PART(hb + s * stride + 1u);
  }
  att_merge_chunk(hb, 0u, min(ATT_MCH, splits));
  barrier();
  float mm = -3.0e38;
  for (uint s = 0; s < splits; ++s) mm = max(mm, att_mw[s]);
  float ll = 0.0;
  for (uint s = 0; s < splits; ++s) ll += att_ml[s] * exp(att_mw[s] - mm);
  float a = 0.0;
  for (uint s0 = 0; s0 < splits; s0 += ATT_MCH) {
    const uint cnt = min(ATT_MCH, splits - s0);
    if (s0 > 0u) {
      barrier();  // the chunk before is summed
      att_merge_chunk(hb, s0, cnt);
      barrier();
    }
    if (tid < HD)
      for (uint s = 0; s < cnt; ++s) a += att_mp[s * HD + tid] * exp(att_mw[s0 + s] - mm);
  }
  return a / ll;
}
#endif
