#version 450
// The decode step's linear_q4w mat-vec (one token, float activations, int4 weights with a scale a
// group of G = 32 BPG weights, BPG a power of two no larger than the subgroup), streamed as
// linear_8da4w_mv.comp walks its rows, with the sums of q4w.glsl (a decode chain's q4w stage
// has this kernel's bits):
//  - every workgroup first copies the token's row into shared memory (fp32, one vec4 of padding
//    after each group's 8 BPG vec4s, so that the lanes of a row, whose groups lie 32 BPG floats
//    apart, read different banks: lane j's vec4 k of a group sits at bank quad (j + k) % 8);
//  - a lane takes whole groups: the row's groups are dealt to A = subgroup / BPG lanes, lane j
//    taking groups j, j + A, ..., which are the groups that a chain's lane BPG j adds up, in the
//    same order; the subgroup holds BPG rows at once (lanes r A .. r A + A - 1 for row r), and each
//    row's sum is the subgroupAdd of the vector a chain reduces (lane BPG j: that lane's sum, zero
//    elsewhere);
//  - a unit is one group of each lane (BPG 16-byte loads and its scale); a subgroup walks its row
//    sets (strided by the grid) as a stream of units, in batches of DEPTH units (BATCHES 2: one
//    batch's loads are issued before the other's are summed).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG_SPEC
#define WG 256  // (the host's workgroup size; the norm prologue's sums are in a 256-thread order)
layout(local_size_x = 256, local_size_x_id = 17) in;
#include "common.glsl"
layout(constant_id = 1) const bool Y16 = false;
layout(constant_id = 2) const bool X16 = false;
layout(constant_id = 9) const uint DEPTH = 2;   // units a batch
layout(constant_id = 10) const uint BPG = 4;    // 32-weight blocks a group (the host's G / 32)
layout(constant_id = 11) const uint BATCHES = 2;
layout(constant_id = 12) const uint XN = 2112;  // the row's vec4s in shared memory, padding included
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer Q { uvec4 q[]; };  // K / 32 per row
layout(std430, binding = 2) readonly buffer S { float s[]; };
DECL_FBUF(3, y, writeonly)
#ifdef VKLLM_MV_NORM
// VKLLM_MV_NORM (linear_q4w_mv_norm: the lm_head with the final norm, vk_fused.cpp's head run):
// every workgroup normalizes the float row x into shared memory itself, as rms_norm stores it
// (norm_quant_prologue.glsl), instead of reading the norm's output.
layout(constant_id = 14) const bool H16 = false;  // the norm's output dtype, as it would be stored
const uint PRO = 1u;
layout(std430, binding = 4) readonly buffer NW { float nw[]; };
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; float eps; } pc;
#define NQP_NORM_ONLY
#include "norm_quant_prologue.glsl"
#else
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; } pc;
#endif

shared vec4 xv[XN];
#include "q4w.glsl"

// The walk's constants: groups a row (ng), units a row set (ngl), accumulator lanes a row (A).
uint ng, ngl, A, nb;
struct Cur {
  uint k, i;
};
void advance(inout Cur c) {
  if (++c.i == ngl) {
    c.i = 0u;
    ++c.k;
  }
}

uvec4 wa[32], wb[32];  // (DEPTH BPG <= 32: the host's)
float sa[16], sb[16];

// Unit c's loads for this lane: group j + i A of row (k0 + k step) BPG + r.
#define FETCH(W, SC, D, C, K0, STEP, MINE)                                       \
  {                                                                             \
    const uint lane = gl_SubgroupInvocationID, r = lane / A, j = lane - r * A;   \
    const uint n = ((K0) + (C).k * (STEP)) * BPG + r, g = j + (C).i * A;        \
    const bool ok = (C).k < (MINE) && n < pc.Nc && g < ng;                     \
    [[unroll]] for (uint bb = 0; bb < BPG; ++bb)                                \
      W[(D) * BPG + bb] = ok ? q[n * nb + g * BPG + bb] : uvec4(0u);            \
    SC[D] = ok ? s[n * ng + g] : 0.0;                                           \
  }

// Unit c's sum into acc; the row set's last unit reduces and stores its BPG rows.
#define CONSUME(W, SC, D, C, K0, STEP)                                                 \
  {                                                                                   \
    const uint lane = gl_SubgroupInvocationID, r = lane / A, j = lane - r * A;         \
    const uint n = ((K0) + (C).k * (STEP)) * BPG + r, g = j + (C).i * A;                \
    if (n < pc.Nc && g < ng) {                                                        \
      float bp[32];                                                                   \
      [[unroll]] for (uint bb = 0; bb < BPG; ++bb)                                    \
        bp[bb] = q4_block(W[(D) * BPG + bb], g * (8u * BPG + 1u) + 8u * bb);          \
      [[unroll]] for (uint w = 1u; w < BPG; w <<= 1u)                                 \
        [[unroll]] for (uint bb = 0; bb < BPG; bb += 2u * w) bp[bb] += bp[bb + w];     \
      acc += bp[0] * SC[D];                                                           \
    }                                                                                 \
    if ((C).i + 1u == ngl) {                                                          \
      const uint base = ((K0) + (C).k * (STEP)) * BPG;                                 \
      [[unroll]] for (uint rr = 0; rr < BPG; ++rr) {                                  \
        float v = subgroupShuffle(acc, rr * A + lane / BPG);                          \
        v = (lane & (BPG - 1u)) == 0u ? v : 0.0;                                      \
        const float sum = subgroupAdd(v);                                             \
        if (lane == 0u && base + rr < pc.Nc) STOREF(y, Y16, pc.n0 + base + rr, sum)   \
      }                                                                               \
      acc = 0.0;                                                                      \
    }                                                                                 \
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
  // The first batches' loads, then the row into shared memory.
  Cur f;
  f.k = 0u;
  f.i = 0u;
  [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
    FETCH(wa, sa, d, f, k0, step, mine)
    advance(f);
  }
  if (BATCHES == 2u)
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wb, sb, d, f, k0, step, mine)
      advance(f);
    }
#ifdef VKLLM_MV_NORM
  const float inv = norm_inv();
#define XVAL(J) pval(J, inv)  // the row as the norm stores it
#else
#define XVAL(J) LOADF(x, X16, J)
#endif
  for (uint i = tid; i < K / 4u; i += gl_WorkGroupSize.x)
    xv[i + i / (8u * BPG)] =
        vec4(XVAL(4u * i), XVAL(4u * i + 1u), XVAL(4u * i + 2u), XVAL(4u * i + 3u));
  barrier();
  float acc = 0.0;
  Cur c;
  c.k = 0u;
  c.i = 0u;
  if (BATCHES == 1u) {
    for (uint u = 0u; u < total; u += DEPTH) {
      [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
        if (u + d < total) CONSUME(wa, sa, d, c, k0, step)
        advance(c);
      }
      [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
        FETCH(wa, sa, d, f, k0, step, mine)
        advance(f);
      }
    }
    return;
  }
  for (uint u = 0u; u < total; u += 2u * DEPTH) {
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      if (u + d < total) CONSUME(wa, sa, d, c, k0, step)
      advance(c);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wa, sa, d, f, k0, step, mine)
      advance(f);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      if (u + DEPTH + d < total) CONSUME(wb, sb, d, c, k0, step)
      advance(c);
    }
    [[unroll]] for (uint d = 0; d < DEPTH; ++d) {
      FETCH(wb, sb, d, f, k0, step, mine)
      advance(f);
    }
  }
}
