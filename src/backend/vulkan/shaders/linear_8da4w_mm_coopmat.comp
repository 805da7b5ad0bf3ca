#version 450
// The tiled prefill GEMM of linear_8da4w on NVIDIA cooperative matrices (VK_NV_cooperative_matrix,
// int8 x int8 -> int32, 16 x 8 x 32 on 32-lane subgroups): linear_8da4w_mm.comp's tile (BT tokens
// x BN rows: 64, or here also 128; BT BN / 32 threads, each subgroup a 32 x 32 part), bindings and
// result, bit-identical with cpu::linear_8da4w:
//   y[t, n] = sx[t] * sum_g s[n, g] * float(dot_g[t, n] - zp[t] * wsum[n, g])
// with g ascending, no fused multiply-add (precise) and sx applied once at the end. What it does
// for the tensor units' rate:
// - K in chunks of KC bytes through two shared buffers: chunk c + 1's global loads are issued
//   before chunk c's multiply-adds and stored to the other buffer after them, so one barrier a
//   chunk separates every store from every read;
// - the int4 weights widened with masks instead of nibble by nibble: a word of nibbles n0..n7
//   (byte i holds weights 2i and 2i + 1, each as q + 8) gives the bytes n0 n2 n4 n6 and
//   n1 n3 n5 n7; the quantizer already stored the activations in that order (quant.glsl's
//   gemm_order), so every 32-byte step of K pairs each weight with its own activation (a group's
//   integer dot does not depend on the order of its terms) and they are staged as loaded;
// - each group's terms formed from the accumulators in registers: which token and row each of a
//   lane's four accumulator elements holds (the implementation's layout) is read once, at the
//   start, from a matrix loaded with known values (Context checks the four: vk_probe.cpp); no
//   round trip of the sums through shared memory and no barriers for it;
// - float(x) of a group's x = dot - zp * wsum, exactly, in one addition: the group's integer sums
//   start at the bits of 1.5 * 2^23 minus zp * wsum (one multiply-add, in place of clearing them),
//   so they end as the bits of the float 1.5 * 2^23 + x (|x| < 2^22), from which 1.5 * 2^23 is
//   subtracted;
// - with W16 (where G <= 128, so that |16 x| < 2^22 still), each nibble widened to 16 q (the nibble
//   in the byte's high half) in one mask, or a shift and a mask: the integer sums are 16 times the
//   group's, the weight sums are scaled by 16 to match, so the sum over groups is exactly 16 times
//   the CPU's, and each token's scale by 1 / 16 (powers of two scale a float exactly, away from the
//   subnormal range).
// Needs G % KC == 0 and KC in {32, 64, 128}; BT 128 needs KC >= 64. Rows and tokens past the
// tile's edge are read clamped and never stored.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#define WG_SPEC
layout(constant_id = 9) const uint BT = 64;    // tokens per tile: 128, 64 or 32
layout(constant_id = 10) const uint BN = 64;   // weight rows per tile: 64 or 128
layout(constant_id = 11) const uint NT = 128;  // threads: BT BN / 32 (a subgroup a 32 x 32 part)
layout(constant_id = 12) const bool W16 = false;  // nibbles widened to 16 q (above; G <= 128)
// Measurement only (VKLLM_GEMM_ABLATE, results wrong): bits that leave out one part of the work
// each, to see what a chunk's time is spent on: 1 the groups' epilogue (the sums taken once at
// the end), 2 the multiply-adds (the fragments still loaded), 4 the fragments' loads and the
// multiply-adds, 8 the staging stores (the chunk's global loads still made), 16 the global
// loads (the staged words made up), 32 the chunk's barrier.
layout(constant_id = 13) const uint ABLATE = 0;
layout(local_size_x_id = 11) in;
const uint JN = 4u;  // 16 x 8 accumulators along a subgroup's 32 rows
#include "common.glsl"
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

const uint CV = KC / 16u;          // 16-byte words of a staged row
const uint SV = CV + 1u;           // a staged row in uvec4 (one of padding against bank conflicts)
// Staged words per thread (the last round partial where NT does not divide them).
const uint NA = (BT * CV + NT - 1u) / NT, NB = (BN * CV + NT - 1u) / NT;
const uint SLOT = (BT + BN) * SV;  // one buffer: BT activation rows, then BN weight rows
const uint CE = 4u;                // accumulator elements a lane (16 x 8 on 32 lanes)
shared uvec4 sm[2u * SLOT];
shared uvec2 s_sw[2u][BN];  // per buffer: the chunk's group's scale bits and -wsum (W16: -16 wsum)
shared int s_zp[BT];        // the tile's tokens' zero points (read where a group starts)

// One chunk's global words for this thread, loaded ahead of their use.
uvec4 pa[NA];
uvec2 pb[NB];
uvec2 p_sw;
void fetch(uint t0, uint r0, uint c, uint tid) {
  const uint k0 = c * KC, g = k0 / pc.G;
  if ((ABLATE & 16u) != 0u) {  // (measurement: words from the chunk index alone)
    [[unroll]] for (uint e = 0; e < NA; ++e) pa[e] = uvec4(c + e);
    [[unroll]] for (uint e = 0; e < NB; ++e) pb[e] = uvec2(c ^ e);
    p_sw = uvec2(c, tid);
    return;
  }
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * NT, r = i / CV, w = i % CV, t = min(t0 + r, pc.T - 1u);
    if (i < BT * CV) pa[e] = qx[t * (pc.K / 16u) + k0 / 16u + w];
  }
  [[unroll]] for (uint e = 0; e < NB; ++e) {
    const uint i = tid + e * NT, r = i / CV, w = i % CV, n = min(r0 + r, pc.Nc - 1u);
    if (i < BN * CV) pb[e] = q[n * (pc.K / 16u) + k0 / 16u + w];
  }
  if (tid < BN) {
    const uint n = min(r0 + tid, pc.Nc - 1u), at = n * (pc.K / pc.G) + g;
    p_sw = uvec2(floatBitsToUint(s[at]), uint(-wsum[at] * (W16 ? 16 : 1)));
  }
}
// Stores the fetched words to buffer b, the weights widened to int8 in the order above.
uint ablated = 0u;  // (measurement: what the left-out parts would have fed)
void stage(uint b, uint tid) {
  const uint base = b * SLOT;
  if ((ABLATE & 8u) != 0u) {
    [[unroll]] for (uint e = 0; e < NA; ++e) ablated ^= pa[e].x ^ pa[e].w;
    [[unroll]] for (uint e = 0; e < NB; ++e) ablated ^= pb[e].x ^ pb[e].y;
    ablated ^= p_sw.x;
    return;
  }
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * NT, r = i / CV, w = i % CV;
    if (i < BT * CV) sm[base + r * SV + w] = pa[e];
  }
  [[unroll]] for (uint e = 0; e < NB; ++e) {
    const uint i = tid + e * NT, r = i / CV, w = i % CV;
    const uvec2 v = pb[e];
    const uint M = 0x0F0F0F0Fu, H = 0xF0F0F0F0u, F = 0x80808080u;  // (16 (q + 8)) ^ 0x80 = 16 q
    if (i >= BN * CV) continue;
    sm[base + BT * SV + r * SV + w] =
        W16 ? uvec4(((v.x << 4) & H) ^ F, (v.x & H) ^ F, ((v.y << 4) & H) ^ F, (v.y & H) ^ F)
            : uvec4(widen_nibbles(v.x & M), widen_nibbles((v.x >> 4) & M), widen_nibbles(v.y & M),
                    widen_nibbles((v.y >> 4) & M));
  }
  if (tid < BN) s_sw[b][tid] = p_sw;
}

// (A group's x = dot - zp * wsum has |x| < 2^18, 16 times that with W16, below 2^22 where
// G <= 128: exact_float's range, common.glsl.)

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * BN, t0 = gl_WorkGroupID.y * BT;
  // Subgroup sg: tokens mt .. mt + 31, rows mr .. mr + 31 of the tile.
  const uint sg = gl_SubgroupID, mt = (sg % (BT / 32u)) * 32u, mr = (sg / (BT / 32u)) * 32u;
  // The accumulator layout: a 16 x 8 matrix of the values 8 row + col.
  for (uint u = tid; u < 32u; u += NT) sm[u] = uvec4(4u * u) + uvec4(0u, 1u, 2u, 3u);
  for (uint u = tid; u < BT; u += NT) s_zp[u] = int(qp[2u * min(t0 + u, pc.T - 1u) + 1u]);
  barrier();
  uint row[CE], col[CE];
  {
    icoopmatNV<32, gl_ScopeSubgroup, 16, 8> probe;
    coopMatLoadNV(probe, sm, 0u, 2u, false);
    [[unroll]] for (uint e = 0; e < CE; ++e) {
      row[e] = uint(probe[e]) / 8u;
      col[e] = uint(probe[e]) % 8u;
    }
  }
  barrier();  // every subgroup's probe read before the first chunk overwrites it
  // This lane's tokens: mt + 16 i + row[e]; their zero points from s_zp where a group starts and
  // their scales at the end (not held in registers through the K loop: fewer registers, more
  // workgroups an SM).
  precise float acc[2][JN][CE];  // sum_g s * float(x), 16 times that with W16
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < JN; ++j)
    [[unroll]] for (uint e = 0; e < CE; ++e) acc[i][j][e] = 0.0;
  icoopmatNV<32, gl_ScopeSubgroup, 16, 8> cd[2][JN];
  const uint chunks = pc.K / KC, per_group = pc.G / KC;
  fetch(t0, r0, 0u, tid);
  stage(0u, tid);
  barrier();
  for (uint c = 0; c < chunks; ++c) {
    const uint b = c & 1u, base = b * SLOT;
    if (c + 1u < chunks) fetch(t0, r0, c + 1u, tid);  // in flight during this chunk's work
    if (c % per_group == 0u && (ABLATE & 1u) == 0u) {  // a group's first chunk: its sums start
                                                       // at kMagic - zp * wsum
      int zp[2][CE];
      [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint e = 0; e < CE; ++e)
        zp[i][e] = s_zp[mt + 16u * i + row[e]];
      [[unroll]] for (uint j = 0; j < JN; ++j)[[unroll]] for (uint e = 0; e < CE; ++e) {
        const int nws = int(s_sw[b][mr + 8u * j + col[e]].y);
        [[unroll]] for (uint i = 0; i < 2u; ++i) cd[i][j][e] = zp[i][e] * nws + kMagic;
      }
    }
    [[unroll]] for (uint kk = 0; kk < KC / 32u; ++kk) {
      if ((ABLATE & 4u) != 0u) break;
      icoopmatNV<8, gl_ScopeSubgroup, 16, 32> a[2];
      icoopmatNV<8, gl_ScopeSubgroup, 32, 8> w[JN];
      [[unroll]] for (uint i = 0; i < 2u; ++i)
        coopMatLoadNV(a[i], sm, base + (mt + 16u * i) * SV + 2u * kk, SV, false);
      [[unroll]] for (uint j = 0; j < JN; ++j)
        coopMatLoadNV(w[j], sm, base + BT * SV + (mr + 8u * j) * SV + 2u * kk, SV, true);
      if ((ABLATE & 2u) != 0u) {
        [[unroll]] for (uint i = 0; i < 2u; ++i) ablated ^= uint(a[i][0]);
        [[unroll]] for (uint j = 0; j < JN; ++j) ablated ^= uint(w[j][0]);
        continue;
      }
      [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < JN; ++j)
        cd[i][j] = coopMatMulAddNV(a[i], w[j], cd[i][j]);
    }
    if ((c + 1u) % per_group == 0u && (ABLATE & 1u) == 0u) {
      // The CPU's term of this group, in its order: scale * float(dot - zp * wsum).
      [[unroll]] for (uint j = 0; j < JN; ++j)[[unroll]] for (uint e = 0; e < CE; ++e) {
        const float sc = uintBitsToFloat(s_sw[b][mr + 8u * j + col[e]].x);
        [[unroll]] for (uint i = 0; i < 2u; ++i) {
          precise float term = sc * exact_float(cd[i][j][e]);
          acc[i][j][e] = acc[i][j][e] + term;
        }
      }
    }
    if (c + 1u < chunks) stage(b ^ 1u, tid);
    if ((ABLATE & 32u) == 0u) barrier();  // the next buffer staged; every read of this one done
                                          // before it is restaged
  }
  if (ABLATE != 0u)  // (measurement: the left-out parts' inputs reach the result)
    [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < JN; ++j)
      [[unroll]] for (uint e = 0; e < CE; ++e) acc[i][j][e] += float(cd[i][j][e] ^ int(ablated));
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint e = 0; e < CE; ++e) {
    const uint t = t0 + mt + 16u * i + row[e];
    if (t >= pc.T) continue;
    const float sx = uintBitsToFloat(qp[2u * t]) * (W16 ? 0.0625 : 1.0);  // (exact)
    [[unroll]] for (uint j = 0; j < JN; ++j) {
      const uint n = r0 + mr + 8u * j + col[e];
      precise float v = acc[i][j][e] * sx;
      if (n < pc.Nc) STOREF(y, Y16, t * pc.N + pc.n0 + n, v);
    }
  }
}
