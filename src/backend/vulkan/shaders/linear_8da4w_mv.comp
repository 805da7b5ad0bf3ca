#version 450
// The decode step's linear_8da4w mat-vec (one token, G % 32 == 0, BPG = G / 32 a power of two no
// larger than the subgroup): the same bits as linear_8da4w.comp's matvec_decode in one part (and
// so as the fused and chain kernels), with the row walk rebuilt for bandwidth:
//  - every workgroup first lays the token's int8 row out in shared memory as the chain kernel's
//    prologue does (shared_row_dot.glsl: each eight codes' even and odd ones in two words, the
//    block sums apart), so a word of nibbles costs two masks and no unpacking, and the activations
//    are not re-read from global memory for every row;
//  - a lane takes whole groups, so a group's integer dot needs no shuffles: the row's groups are
//    dealt to A = subgroup / BPG lanes, lane j taking groups j, j + A, ..., in that order, which
//    are exactly the groups that matvec_decode's lane BPG j adds up, in the same order; the
//    subgroup holds BPG rows at once (lanes r A .. r A + A - 1 for row r), and each row's sum is
//    the subgroupAdd of the vector matvec_decode reduces (lane BPG j: that lane's sum, zero
//    elsewhere), so the float sums are the same bits;
//  - lane j takes its group's blocks from block (j / QS) % BPG on, QS = max(1, 8 / BPG) (its
//    integer dot is the same in any order), so that the eight lanes of a quarter subgroup, whose
//    groups lie 16 BPG bytes apart in each half of the shared row, read eight different 16-byte
//    slots of a 128-byte line (no bank conflict) rather than the same few;
//  - a unit is one group of each lane (BPG 16-byte loads, its scale and weight sum); a subgroup
//    walks its row sets (strided by the grid) as a stream of units, in batches of DEPTH units
//    (BATCHES 2: one batch's loads are issued before the other's are summed).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG_SPEC
#define WG 256  // (the host's workgroup size; the norm prologue's sums are in a 256-thread order)
layout(local_size_x = 256, local_size_x_id = 17) in;
#include "common.glsl"
#include "quant.glsl"
#include "idot.glsl"
#include "shared_row_dot.glsl"
layout(constant_id = 1) const bool Y16 = false;
layout(constant_id = 9) const uint DEPTH = 2;   // units a batch
layout(constant_id = 10) const uint BPG = 4;    // 32-weight blocks a group (the host's G / 32)
const uint QS = BPG >= 8u ? 1u : 8u / BPG;      // lanes a rotation step (above)
// Batches in flight: 2, one batch's loads issued before the other's are summed; 1, a batch's loads
// issued after its sums (half the registers).
layout(constant_id = 11) const uint BATCHES = 2;
// 1: a group's weight sum comes from its nibbles (nibble_sum) instead of the weight-sum buffer:
// 4 bytes a group fewer from memory (a sixth of an int4 embedding table's bytes at G = 32: the
// tied lm_heads), about eight integer operations a block more. The host's (MatvecPlan).
layout(constant_id = 13) const uint WSUM_NIBBLES = 0;
#ifdef VKLLM_MV_NORM
// VKLLM_MV_NORM (linear_8da4w_mv_norm: the lm_head with the final norm, vk_fused.cpp's head run):
// every workgroup derives the int8 row from the float row x in its prologue, normalized as
// rms_norm stores it (norm_quant_prologue.glsl), instead of reading the quantizer's scratch.
layout(constant_id = 2) const bool X16 = false;
layout(constant_id = 14) const bool H16 = false;  // the norm's output dtype, as it would be stored
const uint PRO = 1u;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer NW { float nw[]; };
#else
layout(std430, binding = 0) readonly buffer QX { uvec2 qx[]; };  // the int8 row, K / 8 pairs
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };
#endif
layout(std430, binding = 2) readonly buffer Q { uvec4 q[]; };    // K / 32 per row
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
DECL_FBUF(5, y, writeonly)
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; float eps; } pc;
#ifdef VKLLM_MV_NORM
#include "norm_quant_prologue.glsl"
#endif

// The walk's constants: groups a row (ng), units a row set (ngl), accumulator lanes a row (A).
uint ng, ngl, A, nb;
// A cursor: this subgroup's row set k (row set k0 + k step) and its unit i.
struct Cur {
  uint k, i;
};
void advance(inout Cur c) {
  if (++c.i == ngl) {
    c.i = 0u;
    ++c.k;
  }
}

// The two batches' loads (module scope, indexed by constants once unrolled).
uvec4 wa[32], wb[32];  // (DEPTH BPG <= 32: the host's)
float sa[16], sb[16];
int za[16], zb[16];

// Unit c's loads for this lane: group j + i A of row (k0 + k step) BPG + r.
#define FETCH(W, SC, WZ, D, C, K0, STEP, MINE)                               \
  {                                                                         \
    const uint lane = gl_SubgroupInvocationID, r = lane / A, j = lane - r * A; \
    const uint n = ((K0) + (C).k * (STEP)) * BPG + r, g = j + (C).i * A;      \
    const bool ok = (C).k < (MINE) && n < pc.Nc && g < ng;                   \
    [[unroll]] for (uint bb = 0; bb < BPG; ++bb)                            \
      W[(D) * BPG + bb] = ok ? q[n * nb + g * BPG + ((bb + j / QS) & (BPG - 1u))] : uvec4(0u); \
    SC[D] = ok ? s[n * ng + g] : 0.0;                                       \
    WZ[D] = ok && WSUM_NIBBLES == 0u ? wsum[n * ng + g] : 0;                \
  }

// Unit c's sum into acc; the row set's last unit reduces and stores its BPG rows.
#define CONSUME(W, SC, WZ, D, C, K0, STEP)                                        \
  {                                                                              \
    const uint lane = gl_SubgroupInvocationID, r = lane / A, j = lane - r * A;    \
    const uint n = ((K0) + (C).k * (STEP)) * BPG + r, g = j + (C).i * A;           \
    if (n < pc.Nc && g < ng) {                                                   \
      int gd = 0, gn = 0; /* the group's integer dot, its nibbles' sum */        \
      [[unroll]] for (uint bb = 0; bb < BPG; ++bb) {                             \
        gd += block_dot(W[(D) * BPG + bb], g * BPG + ((bb + j / QS) & (BPG - 1u)));   \
        if (WSUM_NIBBLES != 0u) gn += nibble_sum(W[(D) * BPG + bb]);             \
      }                                                                          \
      const int wz = WSUM_NIBBLES != 0u ? gn - 8 * int(pc.G) : WZ[D];            \
      acc += SC[D] * sx * float(gd - zp * wz);                                   \
    }                                                                            \
    if ((C).i + 1u == ngl) {                                                     \
      const uint base = ((K0) + (C).k * (STEP)) * BPG;                            \
      [[unroll]] for (uint rr = 0; rr < BPG; ++rr) {                             \
        float v = subgroupShuffle(acc, rr * A + lane / BPG);                     \
        v = (lane & (BPG - 1u)) == 0u ? v : 0.0;                                 \
        const float sum = subgroupAdd(v);                                        \
        if (lane == 0u && base + rr < pc.Nc) STOREF(y, Y16, pc.n0 + base + rr, sum) \
      }                                                                          \
      acc = 0.0;                                                                 \
    }                                                                            \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, K = pc.K;
  nb = K / 32u;
  ng = K / pc.G;
  A = gl_SubgroupSize / BPG;
  ngl = (ng + A - 1u) / A;
  const uint NS = gl_NumSubgroups, step = gl_NumWorkGroups.x * NS;
  const uint k0 = gl_WorkGroupID.x * NS + gl_SubgroupID;
  const uint sets = (pc.Nc + BPG - 1u) / BPG;
  const uint mine = k0 < sets ? (sets - k0 + step - 1u) / step : 0u;
  const uint total = mine * ngl;
  // The first batches' loads, then the row's layout in shared memory.
  Cur f;
  f.k = 0u;
  f.i = 0u;
  [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
    FETCH(wa, sa, za, d, f, k0, step, mine)
    advance(f);
  }
  if (BATCHES == 2u)
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wb, sb, zb, d, f, k0, step, mine)
      advance(f);
    }
#ifdef VKLLM_MV_NORM
  float sx;
  int zp;
  prologue(sx, zp);
#else
  for (uint p = tid; p < K / 8u; p += gl_WorkGroupSize.x) {
    const uvec2 w = qx[p];  // codes 8p .. 8p + 7, a byte each
    const uint ev = (w.x & 0xFFu) | ((w.x >> 8) & 0xFF00u) | ((w.y & 0xFFu) << 16) |
                    ((w.y << 8) & 0xFF000000u);
    const uint od = ((w.x >> 8) & 0xFFu) | ((w.x >> 16) & 0xFF00u) | (((w.y >> 8) & 0xFFu) << 16) |
                    (w.y & 0xFF000000u);
    store_pair(p, ev, od);
  }
  barrier();
  block_sums(K, tid, gl_WorkGroupSize.x);
  barrier();
  const float sx = uintBitsToFloat(qp[0]);
  const int zp = int(qp[1]);
#endif
  float acc = 0.0;
  Cur c;
  c.k = 0u;
  c.i = 0u;
  if (BATCHES == 1u) {
    for (uint u = 0u; u < total; u += DEPTH) {
      [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
        if (u + d < total) CONSUME(wa, sa, za, d, c, k0, step)
        advance(c);
      }
      [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
        FETCH(wa, sa, za, d, f, k0, step, mine)
        advance(f);
      }
    }
    return;
  }
  for (uint u = 0u; u < total; u += 2u * DEPTH) {
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      if (u + d < total) CONSUME(wa, sa, za, d, c, k0, step)
      advance(c);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wa, sa, za, d, f, k0, step, mine)
      advance(f);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      if (u + DEPTH + d < total) CONSUME(wb, sb, zb, d, c, k0, step)
      advance(c);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wb, sb, zb, d, f, k0, step, mine)
      advance(f);
    }
  }
}
