#version 450
// Causal grouped-query attention of a forward of several tokens (prefill), tiled flash-attention
// style, for any float storage (the path of fp32 models such as Phi-4-mini's, and of devices
// without cooperative matrices): a workgroup takes BQ consecutive tokens of one query head and
// walks the keys they see in tiles of BK, online softmax per query row (running max m, sum l,
// accumulator rescaled by exp(m_old - m_new)), as attention.comp does. Both products are register
// tiles, as a GEMM's: 128 threads in 16 row groups (ty) of 8 (tx), thread (ty, tx) the RQ rows
// ty RQ + i of the block,
// - scores: its rows against KT = BK / 8 keys of the tile, 4 (tx + 8 k) + c (k < BK / 32, c < 4);
//   every step of the head dim reads RQ q values and BK / 32 vec4s of keys from shared memory for
//   RQ KT multiply-adds, q staged once for the block, transposed (qs[d][r]), K per tile, transposed
//   too (four keys a vec4);
// - weights times V: its rows' outputs at the dims 4 (tx + 8 m) + c (m < HD / 32; with HD % 32 != 0
//   the dims tx + 8 m), each V row read as vec4s, each weight fetched from the lane that holds it
//   (a shuffle within the row group's 8 lanes);
// - the tile's row max and the final row sum reduced over those 8 lanes (three xor shuffles); each
//   lane keeps its keys' partial sum l, and exp is taken once a score.
// One shared buffer holds a tile's K, then (after the scores) its V: q and one tile fit 32 KiB at
// HD 128 with BK 32 (lavapipe's limit), 48 KiB with BK 64. K's vec4 of keys jq at dim d sits at
// column jq ^ ((d / 4) % 8) of row d, so that both the staging stores (four keys by eight vec4s of
// dims a subgroup) and the scores' reads (eight consecutive vec4s) use distinct banks.
// - The blocks run heaviest first (the last block of a causal prompt walks every key): the
//   workgroup grid's later blocks start before the earlier ones' short walks.
// - A subgroup skips the products of a tile past all of its rows' positions (it still stages and
//   meets every barrier).
// - VKLLM_ROPE (the prefill attention run: [norm, norm,] rope, rope, attention): q is the query
//   before its rope op (and its per-head norm), rotated (and normed) as it is staged
//   (attention_run.glsl); the KV store (attention.comp VKLLM_KV_STORE VKLLM_ROPE) did the same to
//   the keys.
// Push constant win: a sliding window, the tiles before every row's window skipped, the keys
// before a row's window masked like those past it. Push constant rows: the caches' rows, key j
// at row kv_row(j, rows) (a sliding layer's ring; the keys a row sees are never overwritten by
// this forward's, those it masks may be).
// Needs subgroups of at least 8 lanes (a row group's lanes in one subgroup), HD % 8 == 0, BK 32 or
// 64. The KV store (attention.comp VKLLM_KV_STORE) has written this forward's keys before it runs.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG_SPEC
layout(constant_id = 11) const uint NT = 128;  // threads: 16 row groups of 8
layout(local_size_x_id = 11) in;
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;  // q activations
layout(constant_id = 2) const bool C16 = false;  // caches
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (% 8 == 0)
layout(constant_id = 9) const uint BK = 32;      // keys a tile: 32 or 64
layout(constant_id = 10) const uint RQ = 2;      // query rows a thread: 1 or 2
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, kc, readonly)
DECL_FBUF(2, vc, readonly)
DECL_FBUF(3, o, writeonly)
DECL_STEP(4)
// The caches' fp32 view as vec4s (a row starts at a multiple of 4: HD % 8 == 0).
layout(std430, binding = 1) readonly buffer KC4 { vec4 kc4[]; };
layout(std430, binding = 2) readonly buffer VC4 { vec4 vc4[]; };

const uint TX = 8u, TY = NT / TX;  // a row group's lanes; row groups
const uint BQ = TY * RQ;           // query rows a workgroup
const uint KQ = BK / 32u, KT = 4u * KQ;  // a thread's vec4s of keys, keys
const bool V4 = HD % 32u == 0u;          // a thread's output dims as vec4s
const uint DP = HD / TX;                 // a thread's output dims
const uint HQ = HD / 4u, BKQ = BK / 4u;  // vec4s of a row of V, of a row of K (keys)
shared vec2 qs[HD * BQ / 2u];            // q transposed, rows in pairs: qs[(d BQ + r) / 2][r % 2]
shared vec4 kv[HD * BKQ];                // a tile's K (transposed, swizzled), then its V
// win > 0: a query at position p sees keys max(0, p - win + 1)..p only (Gemma's sliding layers).
#ifdef VKLLM_ROPE
layout(push_constant) uniform PC {
  uint T, H, Hkv;
  float scale;
  uint R, orig, ctx;
  float eps;
  uint win, rows;
} pc;
#define RUN_LOAD(i) LOADF(q, X16, i)
#include "attention_run.glsl"
#else
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; uint win, rows; } pc;
#endif
#define ATT_WIN pc.win
// Whether the query at position p sees key j (causal, within the window).
bool seen_key(uint j, uint p) { return j <= p && (ATT_WIN == 0u || j + ATT_WIN > p); }

// Four consecutive values of a cache row (i % 4 == 0).
vec4 load4_k(uint i) {
  if (C16)
    return vec4(LOADF(kc, C16, i), LOADF(kc, C16, i + 1u), LOADF(kc, C16, i + 2u),
                LOADF(kc, C16, i + 3u));
  return kc4[i / 4u];
}
vec4 load4_v(uint i) {
  if (C16)
    return vec4(LOADF(vc, C16, i), LOADF(vc, C16, i + 1u), LOADF(vc, C16, i + 2u),
                LOADF(vc, C16, i + 3u));
  return vc4[i / 4u];
}
// K's vec4 of keys 4 jq .. 4 jq + 3 at dim d.
uint k_at(uint d, uint jq) { return d * BKQ + (jq ^ ((d / 4u) % 8u)); }

void main() {
  const uint tid = gl_LocalInvocationID.x, ty = tid / TX, tx = tid % TX;
  const uint h = gl_WorkGroupID.x, t0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * BQ;
  const uint kvh = h / (pc.H / pc.Hkv), W = pc.Hkv * HD, koff = kvh * HD;
  const uint last = step_pos + min(t0 + BQ, pc.T) - 1u;  // the block's last position
  // q staged transposed (tokens past the end clamped to the last; their rows are never stored).
#ifdef VKLLM_ROPE
  // The rows' norms first (a subgroup a row), kept in kv until the rows are staged.
  if (QKNORM) {
    for (uint r = gl_SubgroupID; r < BQ; r += gl_NumSubgroups) {  // (uniform per subgroup)
      const float inv = run_inv((min(t0 + r, pc.T - 1u) * pc.H + h) * HD);
      if (subgroupElect()) kv[r / 4u][r % 4u] = inv;
    }
    barrier();
  }
#endif
  for (uint e = tid; e < BQ * HD; e += NT) {
    const uint r = e % BQ, d = e / BQ, t = min(t0 + r, pc.T - 1u), row = (t * pc.H + h) * HD;
#ifdef VKLLM_ROPE
    qs[e / 2u][e % 2u] = run_out(row, d, t, QKNORM ? kv[r / 4u][r % 4u] : 0.0);
#else
    qs[e / 2u][e % 2u] = LOADF(q, A16, row + d);
#endif
  }
  uint pos[RQ];
  float acc[RQ][DP], m[RQ], l[RQ];  // l: this lane's keys' part of the row sum
  [[unroll]] for (uint i = 0; i < RQ; ++i) {
    pos[i] = step_pos + min(t0 + ty * RQ + i, pc.T - 1u);
    [[unroll]] for (uint d = 0; d < DP; ++d) acc[i][d] = 0.0;
    m[i] = -3.0e38;
    l[i] = 0.0;
  }
  // The last position of this subgroup's rows (subgroup-uniform).
  const uint sg_rows = (gl_SubgroupID + 1u) * (gl_SubgroupSize / TX) * RQ;
  const uint sg_last = step_pos + min(t0 + sg_rows, pc.T) - 1u;
  const uint lane0 = gl_SubgroupInvocationID & ~(TX - 1u);  // the row group's first lane
  // The first tile any row of the block sees (a multiple of BK: tiles line up as without window).
  const uint first_pos = step_pos + t0;
  const uint base0 = ATT_WIN > 0u && first_pos + 1u > ATT_WIN ? (first_pos + 1u - ATT_WIN) / BK * BK : 0u;
  for (uint base = base0; base <= last; base += BK) {
    const bool skip = base > sg_last;  // (subgroup-uniform: the tile adds nothing to its rows)
    barrier();  // the previous tile's V (the first tile: the q staging, the norms) read
    // K: four keys (e % 4) by dims 4 dq .. 4 dq + 3 a thread a step.
    for (uint e = tid; e < BK * HQ; e += NT) {
      const uint c = e % 4u, dq = (e / 4u) % HQ, jq = e / (4u * HQ);
      const uint j = min(base + 4u * jq + c, last);
      const vec4 x = load4_k(kv_row(j, pc.rows) * W + koff + 4u * dq);
      [[unroll]] for (uint u = 0; u < 4u; ++u) kv[k_at(4u * dq + u, jq)][c] = x[u];
    }
    barrier();
    float p[RQ][KT];  // scores, then weights
    if (!skip) {
      [[unroll]] for (uint i = 0; i < RQ; ++i)[[unroll]] for (uint k = 0; k < KT; ++k)
        p[i][k] = 0.0;
      for (uint d = 0; d < HD; ++d) {
        float qv[RQ];
        if (RQ == 2u) {  // (one read of the thread's two rows)
          const vec2 two = qs[d * (BQ / 2u) + ty];
          qv[0] = two.x;
          qv[RQ - 1u] = two.y;
        } else {
          qv[0] = qs[d * (BQ / 2u) + ty / 2u][ty % 2u];
        }
        [[unroll]] for (uint k = 0; k < KQ; ++k) {
          const vec4 kk = kv[k_at(d, tx + 8u * k)];
          [[unroll]] for (uint i = 0; i < RQ; ++i)[[unroll]] for (uint c = 0; c < 4u; ++c)
            p[i][4u * k + c] += qv[i] * kk[c];
        }
      }
      // The tile's row max (its visible keys), the rescale, the weights.
      [[unroll]] for (uint i = 0; i < RQ; ++i) {
        float mx = m[i];
        [[unroll]] for (uint k = 0; k < KT; ++k) {
          p[i][k] *= pc.scale;
          if (seen_key(base + 4u * (tx + 8u * (k / 4u)) + k % 4u, pos[i])) mx = max(mx, p[i][k]);
        }
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        mx = max(mx, subgroupShuffleXor(mx, 2u));
        mx = max(mx, subgroupShuffleXor(mx, 4u));
        const float corr = exp(m[i] - mx);
        l[i] *= corr;
        [[unroll]] for (uint d = 0; d < DP; ++d) acc[i][d] *= corr;
        m[i] = mx;
        [[unroll]] for (uint k = 0; k < KT; ++k) {
          const bool seen = seen_key(base + 4u * (tx + 8u * (k / 4u)) + k % 4u, pos[i]);
          p[i][k] = seen ? exp(p[i][k] - mx) : 0.0;
          l[i] += p[i][k];
        }
      }
    }
    barrier();  // every read of K done
    for (uint e = tid; e < BK * HQ; e += NT) {
      const uint dq = e % HQ, j = min(base + e / HQ, last);
      kv[e] = load4_v(kv_row(j, pc.rows) * W + koff + 4u * dq);
    }
    barrier();
    if (skip) continue;
    [[unroll]] for (uint jj = 0; jj < BK; ++jj) {
      // Key jj's weights: lane (jj / 4) % 8 of the row group holds them, as its key 4 k + c.
      const uint from = lane0 + (jj / 4u) % TX, k = 4u * (jj / 32u) + jj % 4u;
      float w[RQ];
      [[unroll]] for (uint i = 0; i < RQ; ++i) w[i] = subgroupShuffle(p[i][k], from);
      if (V4) {
        [[unroll]] for (uint mm = 0; mm < HD / 32u; ++mm) {
          const vec4 v = kv[jj * HQ + tx + 8u * mm];
          [[unroll]] for (uint i = 0; i < RQ; ++i)[[unroll]] for (uint c = 0; c < 4u; ++c)
            acc[i][4u * mm + c] += w[i] * v[c];
        }
      } else {
        [[unroll]] for (uint mm = 0; mm < DP; ++mm) {
          const uint d = tx + TX * mm;
          const float v = kv[jj * HQ + d / 4u][d % 4u];
          [[unroll]] for (uint i = 0; i < RQ; ++i) acc[i][mm] += w[i] * v;
        }
      }
    }
  }
  [[unroll]] for (uint i = 0; i < RQ; ++i) {
    float sum = l[i];
    sum += subgroupShuffleXor(sum, 1u);
    sum += subgroupShuffleXor(sum, 2u);
    sum += subgroupShuffleXor(sum, 4u);
    const uint t = t0 + ty * RQ + i;
    if (t >= pc.T) continue;
    [[unroll]] for (uint mm = 0; mm < DP; ++mm) {
      const uint d = V4 ? 4u * (tx + 8u * (mm / 4u)) + mm % 4u : tx + TX * mm;
      STOREF(o, Y16, (t * pc.H + h) * HD + d, acc[i][mm] / sum);
    }
  }
}
