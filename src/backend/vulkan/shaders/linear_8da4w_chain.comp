#version 450
// A chain of the decode step's fused mat-vec runs in one persistent dispatch (vk_fused.cpp, chain
// runs): the grid is resident (one workgroup per compute unit), every run of the chain is a stage,
// and consecutive stages meet at a grid-wide sync (grid_sync.glsl, ~1 us on the H200) instead of
// the end of a dispatch, a pipeline barrier and the start of the next (~1.7 us, and the next
// kernel's first weight loads then wait a DRAM latency of their own: docs/perf.md, "The speed
// physics"). Each workgroup issues the loads of its first rows of the next stage before the sync,
// so the weights' latency overlaps the sync and the prologue.
// A stage is one of linear_8da4w_fused.comp's runs, computed the same way (the same int8 codes,
// the same sums in the same order, the same roundings):
//  prologue pro = 0: the input row quantized (quant.glsl's formula);
//               1: the row normalized as rms_norm stores it, then quantized;
//  epilogue epi = 0: each of 1-3 mat-vecs stores its rows;
//               1: the residual add (y = r + W x rounded as the mat-vec's output is stored);
//               2: SwiGLU of the gate and up mat-vecs (rows computed together).
// The prologue runs on the first 256 threads in rms_norm.comp's order (that order depends on the
// workgroup size); the rows are spread over every subgroup of the grid, two in flight per subgroup
// where a stage has more rows than the grid has subgroups.
// Buffers are reached through their device addresses (a stage table, one binding): a chain has
// more tensors than a device's binding limit allows. Activations are `coherent`: a stage reads
// rows that other workgroups wrote before the sync.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#define WG 512
#define PWG 256u  // the prologue's threads (rms_norm.comp's workgroup)
#include "common.glsl"
#include "quant.glsl"
#include "idot.glsl"
#include "shared_row_dot.glsl"
#define GS_BINDING 0
#define GS_SPIN 3
#include "grid_sync.glsl"
// 32-weight blocks per lane: the widest stage's (BPL), and the most of the stages whose rows are
// double-buffered or whose epilogue is SwiGLU (BPLB; the host gives a stage wider than BPLB one
// row in flight).
layout(constant_id = 1) const uint BPL = 2;
layout(constant_id = 2) const uint BPLB = 2;
layout(std430, binding = 1) readonly buffer Table { uint tab[]; };
layout(push_constant) uniform PC { uint stages; } pc;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer QRef { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer FRef { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer IRef { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer ARef { float v[]; };
#ifdef VKLLM_F16
layout(buffer_reference, std430, buffer_reference_align = 2) coherent buffer HRef {
  float16_t v[];
};
#endif

float act_load(uvec2 a, bool h, uint i) {
#ifdef VKLLM_F16
  if (h) return float(HRef(a).v[i]);
#endif
  return ARef(a).v[i];
}
void act_store(uvec2 a, bool h, uint i, float v) {
#ifdef VKLLM_F16
  if (h) {
    HRef(a).v[i] = float16_t(v);
    return;
  }
#endif
  ARef(a).v[i] = v;
}
float round_to(bool f16, float v) {
#ifdef VKLLM_F16
  if (f16) return float(float16_t(v));
#endif
  return v;
}

// The stage table (vk_fused.cpp chain_table): SREC words per stage.
//  0 K, 1 G (group), 2 pro, 3 epi, 4 mat-vecs, 5 flags (1 x f16, 2 norm output f16, 4 mat-vec
//  outputs f16, 8 residual f16, 16 << m: output m f16), 6 eps, 7 rows, 8 x, 10 norm weight,
//  12 residual, and per mat-vec m at 16 + 10 m: rows, nibbles, scales, weight sums, output.
const uint SREC = 48u;
uint T(uint st, uint w) { return tab[st * SREC + w]; }
uvec2 A(uint st, uint w) { return uvec2(tab[st * SREC + w], tab[st * SREC + w + 1u]); }
uint M(uint st, uint m, uint w) { return T(st, 16u + 10u * m + w); }
uvec2 MA(uint st, uint m, uint w) { return A(st, 16u + 10u * m + w); }

const uint MAXV = 32u;  // K <= 32 * 256 (checked by the host)
const uint MAXN = 16u;  // a normalized row: K <= 16 * 256
shared float red[64], red_lo[64], red_hi[64];

// The prologue: the stage's int8 row into qxs, its scale and zero point.
void prologue(uint st, out float sx, out int zp) {
  const uint tid = gl_LocalInvocationID.x, K = T(st, 0u), fl = T(st, 5u);
  const bool norm = T(st, 2u) == 1u, x16 = (fl & 1u) != 0u, h16 = (fl & 2u) != 0u;
  const bool mine = tid < PWG;  // the prologue's threads (whole subgroups: PWG % lanes == 0)
  const uint NSP = PWG / gl_SubgroupSize;
  float xv[MAXV], nv[MAXN];
  const uvec2 xa = A(st, 8u), na = A(st, 10u);
  [[unroll]] for (uint i = 0; i < MAXV; ++i) {
    const uint j = tid + i * PWG;
    xv[i] = mine && j < K ? act_load(xa, x16, j) : 0.0;
    if (i < MAXN) nv[i] = norm && mine && j < K ? FRef(na).v[j] : 0.0;  // issued with x's
  }
  if (norm) {  // rms_norm.comp's order: four-value chunks, then the rest
    vec4 ss = vec4(0.0);
    uint done = 0u;
    [[unroll]] for (uint c = 0; c < MAXV / 4u; ++c)
      if (tid + (4u * c + 3u) * PWG < K) {
        const vec4 v = vec4(xv[4u * c], xv[4u * c + 1u], xv[4u * c + 2u], xv[4u * c + 3u]);
        ss += v * v;
        done = 4u * c + 4u;
      }
    [[unroll]] for (uint i = 0; i < MAXV; ++i)
      if (i >= done && tid + i * PWG < K) ss.x += xv[i] * xv[i];
    const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
    if (mine && subgroupElect()) red[gl_SubgroupID] = part;
    barrier();
    float total = 0.0;
    for (uint i = 0; i < NSP; ++i) total += red[i];
    const float inv = 1.0 / sqrt(total / float(K) + uintBitsToFloat(T(st, 6u)));
    [[unroll]] for (uint i = 0; i < MAXN; ++i) {
      const uint j = tid + i * PWG;
      if (mine && j < K) xv[i] = round_to(h16, nv[i] * (xv[i] * inv));
    }
  }
  float lo = 0.0, hi = 0.0;
  [[unroll]] for (uint i = 0; i < MAXV; ++i)
    if (mine && tid + i * PWG < K) {
      lo = min(lo, xv[i]);
      hi = max(hi, xv[i]);
    }
  lo = subgroupMin(lo);
  hi = subgroupMax(hi);
  if (mine && subgroupElect()) {
    red_lo[gl_SubgroupID] = lo;
    red_hi[gl_SubgroupID] = hi;
  }
  barrier();
  for (uint i = 0; i < NSP; ++i) {
    lo = min(lo, red_lo[i]);
    hi = max(hi, red_hi[i]);
  }
  quant_scale_zp(lo, hi, sx, zp);  // quant.glsl's formula
  if (mine) {
    const float rcp = div_rn(1.0, sx);  // exact, as quant.glsl
    // Element j = tid + i * 256 is this lane's; the word of j / 4 gathers four neighbour lanes.
    const uint lane = gl_SubgroupInvocationID, base = lane & ~3u;
    [[unroll]] for (uint i = 0; i < MAXV; ++i)
      if (i * PWG < K) {
        const uint j = tid + i * PWG;
        const uint c = j < K ? quant_value(xv[i], sx, rcp, zp) : 0u;
        const uint w = subgroupShuffle(c, base) | (subgroupShuffle(c, base + 1u) << 8) |
                       (subgroupShuffle(c, base + 2u) << 16) | (subgroupShuffle(c, base + 3u) << 24);
        if ((lane & 3u) == 0u && j < K) qxs[j >> 2] = w;
      }
  }
  barrier();
}


// Two row slots: slot 0 is A (a row; the gate's in SwiGLU stages) and B (the up row); slot 1 is C
// and D, the same for the row after it. A set holds the nibbles, scale and weight sum of each of a
// lane's blocks (lane + i SG).
#define ROW_SET(X, N)  \
  uvec4 X##q[N];       \
  float X##s[N];       \
  int X##w[N];         \
  void fetch_##X(uint st, uint m, uint n) {                                                   \
    const uint lane = gl_SubgroupInvocationID, K = T(st, 0u), nb = K / 32u,                   \
               bpg = T(st, 1u) / 32u, ng = K / T(st, 1u);                                     \
    const bool live = m != NONE;                                                              \
    const uint mm = live ? m : 0u;                                                            \
    QRef q = QRef(MA(st, mm, 2u));                                                            \
    FRef s = FRef(MA(st, mm, 4u));                                                            \
    IRef ws = IRef(MA(st, mm, 6u));                                                           \
    [[unroll]] for (uint i = 0; i < N; ++i) {                                                 \
      const uint b = lane + i * gl_SubgroupSize;                                              \
      const bool ok = live && b < nb;                                                         \
      const uint gi = n * ng + b / bpg;                                                       \
      X##q[i] = ok ? q.v[n * nb + b] : uvec4(0u);                                             \
      X##s[i] = ok ? s.v[gi] : 0.0;                                                           \
      X##w[i] = ok ? ws.v[gi] : 0;                                                            \
    }                                                                                         \
  }                                                                                           \
  float dot_##X(uint st, float sx, int zp) {                                                  \
    const uint lane = gl_SubgroupInvocationID, nb = T(st, 0u) / 32u, bpg = T(st, 1u) / 32u;   \
    float acc = 0.0;                                                                          \
    [[unroll]] for (uint i = 0; i < N; ++i) {                                                 \
      const uint b = lane + i * gl_SubgroupSize;                                              \
      if (i * gl_SubgroupSize >= nb) break;                                                   \
      int d = b < nb ? block_dot(X##q[i], b) : 0;                                             \
      for (uint off = 1u; off < bpg; off <<= 1u) d += subgroupShuffleXor(d, off);             \
      if (b < nb && (lane & (bpg - 1u)) == 0u) acc += X##s[i] * sx * float(d - zp * X##w[i]); \
    }                                                                                         \
    return subgroupAdd(acc);                                                                  \
  }
const uint NONE = 0xFFFFFFFFu;
ROW_SET(A, BPL)
ROW_SET(B, BPLB)
ROW_SET(C, BPLB)
ROW_SET(D, BPLB)

// Which mat-vec of stage st row r belongs to, and its row there (NONE past the stage's rows).
uint locate(uint st, uint r, out uint n) {
  n = r;
  if (T(st, 3u) != 0u) return r < T(st, 7u) ? 0u : NONE;
  const uint nm = T(st, 4u);
  for (uint m = 0; m < nm; ++m) {
    const uint rows = M(st, m, 0u);
    if (n < rows) return m;
    n -= rows;
  }
  return NONE;
}
// Does stage st keep two rows in flight (its rows fit the slot-1 sets)?
bool two_slots(uint st) { return T(st, 0u) / 32u <= BPLB * gl_SubgroupSize; }

// Slot 0 (A, B) for row r of stage st, slot 1 (C, D) likewise.
void fetch_slot0(uint st, uint r) {
  uint n;
  const uint m = locate(st, r, n);
  fetch_A(st, m, n);
  if (T(st, 3u) == 2u) fetch_B(st, m == NONE ? NONE : 1u, n);
}
void fetch_slot1(uint st, uint r) {
  uint n;
  const uint m = locate(st, r, n);
  fetch_C(st, m, n);
  if (T(st, 3u) == 2u) fetch_D(st, m == NONE ? NONE : 1u, n);
}

// Row n of mat-vec m: its epilogue and store. a: the row's sum; u: the up row's (SwiGLU).
void finish(uint st, uint m, uint n, float a, float u) {
  const uint epi = T(st, 3u), fl = T(st, 5u);
  const bool o16 = (fl & 4u) != 0u, r16 = (fl & 8u) != 0u, y16 = (fl & (16u << m)) != 0u;
  float val = a;
  if (epi == 1u) {
    val = act_load(A(st, 12u), r16, n) + round_to(o16, a);
  } else if (epi == 2u) {
    const float g = round_to(o16, a), up = round_to(o16, u);
    val = g / (1.0 + exp(-g)) * up;
  }
  if (subgroupElect()) act_store(MA(st, m, 8u), y16, n, val);
}

// The first rows of stage st for this subgroup (r0), fetched before the stage begins.
void fetch_first(uint st, uint r0, uint step) {
  fetch_slot0(st, r0);
  if (two_slots(st)) fetch_slot1(st, r0 + step);
}

void main() {
  const uint NS = gl_NumSubgroups, step = grid_groups() * NS;
  const uint r0 = flat_group() * NS + gl_SubgroupID;
  fetch_first(0u, r0, step);
  for (uint st = 0; st < pc.stages; ++st) {
    float sx;
    int zp;
    prologue(st, sx, zp);
    const uint rows = T(st, 7u);
    const bool swiglu = T(st, 3u) == 2u;
    if (two_slots(st)) {
      // Slot 0 holds row r, slot 1 row r + step; each slot is refilled with the row two steps on
      // as soon as its sums are taken, so a row's loads are in flight while the other is summed.
      for (uint r = r0; r < rows; r += 2u * step) {
        uint n;
        const uint m = locate(st, r, n);
        const float a = dot_A(st, sx, zp), u = swiglu ? dot_B(st, sx, zp) : 0.0;
        fetch_slot0(st, r + 2u * step);
        finish(st, m, n, a, u);
        const uint m2 = locate(st, r + step, n);
        if (m2 == NONE) break;
        const float c = dot_C(st, sx, zp), d = swiglu ? dot_D(st, sx, zp) : 0.0;
        fetch_slot1(st, r + 3u * step);
        finish(st, m2, n, c, d);
      }
    } else {
      for (uint r = r0; r < rows; r += step) {
        uint n;
        const uint m = locate(st, r, n);
        if (r != r0) fetch_slot0(st, r);
        finish(st, m, n, dot_A(st, sx, zp), swiglu ? dot_B(st, sx, zp) : 0.0);
      }
    }
    if (st + 1u < pc.stages) {
      fetch_first(st + 1u, r0, step);
      grid_sync(st);
    }
  }
  grid_exit();
}
