#version 450
// Tiled GEMM of linear_8da4w for forwards of many tokens (prefill): a workgroup computes a tile
// of BT tokens (64 or 32: the largest that still makes enough workgroups to fill the GPU) x BN = 64
// output rows with WG = 2 BT threads. For each K-chunk of KC bytes it stages the tile's int8
// activations and its int4 weights widened to int8 in shared memory, so that every staged byte
// is used by a whole row (or column) of the tile instead of being re-read per output; the next
// chunk's global loads are issued into registers before the current chunk's arithmetic, so their
// latency hides behind it.
// Integer dots per group g of G weights, then exactly the CPU reference's per-group term in the
// CPU's order:
//   y[t, n] = sx[t] * sum_g s[n, g] * float(dot_g[t, n] - zp[t] * wsum[n, g])
// with g ascending, no fused multiply-add (precise) and sx applied once at the end, so the result
// is bit-identical with cpu::linear_8da4w (integers are exact and every float operation is the
// CPU's).
// Each thread owns 4 tokens x 8 rows in registers and forms their dots four int8 at a time (dot4,
// idot.glsl: OpSDotAccSat with VKLLM_IDOT, portable otherwise). Devices with NVIDIA cooperative
// matrices run linear_8da4w_mm_coopmat.comp instead (same tile, bindings and result).
// Needs G % KC == 0 and KC in {32, 64, 128} (the host picks KC); rows and tokens past the tile's
// edge are read clamped and never stored.
#extension GL_KHR_shader_subgroup_basic : require
#define WG_SPEC
layout(constant_id = 9) const uint BT = 64;  // tokens per tile: 128 (KC >= 64), 64 or 32
layout(local_size_x_id = 9, local_size_y = 2) in;  // NT = 2 BT threads
#include "common.glsl"
#include "idot.glsl"
layout(constant_id = 1) const bool Y16 = false;
layout(constant_id = 8) const uint KC = 32;  // K bytes staged per step (divides G)
layout(std430, binding = 0) readonly buffer QX { uvec4 qx[]; };  // int8 activations (gemm_order)
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };   // per token: scale bits, zero point
layout(std430, binding = 2) readonly buffer Q { uvec2 q[]; };    // int4 weights, K / 16 per row
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
DECL_FBUF(5, y, writeonly)
layout(push_constant) uniform PC {
  uint K, Nc, n0, N, T, G;
} pc;

const uint BN = 64, NT = BT * 2u;  // rows per tile; threads
const uint CV = KC / 16u;          // 16-byte words of a staged row
const uint NA = BT * CV / NT, NB = BN * CV / NT;  // staged words per thread: activations, weights
const uint TX = BT / 4u;  // threads along the tokens: thread (tx, ty) owns tokens tx + TX i, rows ty + 8 j
shared float s_scale[BN];
shared int s_nwsum[BN];  // -wsum
const uint SW = KC / 4u + 1u;  // a staged row in words (one of padding)
shared uint sa[BT * SW], sb[BN * SW];

// One chunk's global words for this thread, loaded ahead of their use.
uvec4 pa[NA];
uvec2 pb[NB];
float p_scale;
int p_wsum;
void fetch(uint t0, uint r0, uint k0, uint g, bool first, uint tid) {
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * NT, r = i / CV, c = i % CV, t = min(t0 + r, pc.T - 1u);
    pa[e] = qx[t * (pc.K / 16u) + k0 / 16u + c];
  }
  [[unroll]] for (uint e = 0; e < NB; ++e) {
    const uint i = tid + e * NT, r = i / CV, c = i % CV, n = min(r0 + r, pc.Nc - 1u);
    pb[e] = q[n * (pc.K / 16u) + k0 / 16u + c];
  }
  if (first && tid < BN) {
    const uint n = min(r0 + tid, pc.Nc - 1u), ng = pc.K / pc.G;
    p_scale = s[n * ng + g];
    p_wsum = -wsum[n * ng + g];
  }
}
// Stores the fetched words to shared memory, the weights widened to int8 with masks: a word of
// nibbles n0..n7 (byte i holds weights 2i and 2i + 1) gives the bytes n0 n2 n4 n6 and n1 n3 n5 n7,
// the order in which the quantizer stored the activations (quant.glsl's gemm_order), so each
// staged word of weights pairs with the staged word of activations at its index.
void stage(bool first, uint tid) {
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * NT, r = i / CV, c = i % CV;
    [[unroll]] for (uint w = 0; w < 4u; ++w) sa[r * SW + 4u * c + w] = pa[e][w];
  }
  [[unroll]] for (uint e = 0; e < NB; ++e) {
    const uint i = tid + e * NT, r = i / CV, c = i % CV;
    const uvec2 w = pb[e];
    const uint M = 0x0F0F0F0Fu;
    const uvec4 v =
        uvec4(widen_nibbles(w.x & M), widen_nibbles((w.x >> 4) & M), widen_nibbles(w.y & M),
              widen_nibbles((w.y >> 4) & M));
    [[unroll]] for (uint x = 0; x < 4u; ++x) sb[r * SW + 4u * c + x] = v[x];
  }
  if (first && tid < BN) {
    s_scale[tid] = p_scale;
    s_nwsum[tid] = p_wsum;
  }
}

// (A group's x = dot - zp * wsum has |x| < 2^18: exact_float's range, common.glsl.)

void main() {
  const uint tid = gl_LocalInvocationID.x + gl_LocalInvocationID.y * BT;  // (BT x 2 threads)
  const uint tx = tid % TX, ty = tid / TX;
  const uint r0 = gl_WorkGroupID.x * BN, t0 = gl_WorkGroupID.y * BT, ng = pc.K / pc.G;
  float sx[4];
  int zp[4];
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    const uint t = min(t0 + tx + TX * i, pc.T - 1u);
    sx[i] = uintBitsToFloat(qp[2u * t]);
    zp[i] = int(qp[2u * t + 1u]);
  }
  precise float acc[4][8];
  [[unroll]] for (uint i = 0; i < 4u; ++i)[[unroll]] for (uint j = 0; j < 8u; ++j) acc[i][j] = 0.0;
  const uint chunks = pc.G / KC;
  fetch(t0, r0, 0u, 0u, true, tid);
  for (uint g = 0; g < ng; ++g) {
    int d[4][8];
    for (uint kc = 0; kc < chunks; ++kc) {
      barrier();  // every read of the previous chunk done
      stage(kc == 0u, tid);
      barrier();
      if (kc == 0u)  // the group's sums start at kMagic - zp * wsum
        [[unroll]] for (uint j = 0; j < 8u; ++j) {
          const int nws = s_nwsum[ty + 8u * j];
          [[unroll]] for (uint i = 0; i < 4u; ++i) d[i][j] = zp[i] * nws + kMagic;
        }
      const uint next = g * chunks + kc + 1u;  // the next chunk, fetched while this one computes
      if (next < ng * chunks) fetch(t0, r0, next * KC, next / chunks, next % chunks == 0u, tid);
      for (uint k4 = 0; k4 < KC / 4u; ++k4) {
        int a[4], b[8];
        [[unroll]] for (uint i = 0; i < 4u; ++i) a[i] = int(sa[(tx + TX * i) * SW + k4]);
        [[unroll]] for (uint j = 0; j < 8u; ++j) b[j] = int(sb[(ty + 8u * j) * SW + k4]);
        [[unroll]] for (uint i = 0; i < 4u; ++i)[[unroll]] for (uint j = 0; j < 8u; ++j)
          d[i][j] = dot4(a[i], b[j], d[i][j]);
      }
    }
    // The CPU's term of group g, in its order: scale * float(dot - zp * wsum).
    [[unroll]] for (uint j = 0; j < 8u; ++j) {
      const float sc = s_scale[ty + 8u * j];
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        precise float term = sc * exact_float(d[i][j]);
        acc[i][j] = acc[i][j] + term;
      }
    }
  }
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    const uint t = t0 + tx + TX * i;
    if (t >= pc.T) continue;
    [[unroll]] for (uint j = 0; j < 8u; ++j) {
      const uint n = r0 + ty + 8u * j;
      precise float v = acc[i][j] * sx[i];
      if (n < pc.Nc) STOREF(y, Y16, t * pc.N + pc.n0 + n, v);
    }
  }
}
