#version 450
// linear_mm_coopmat: the tiled prefill GEMM of the fp16 `linear` (fp16 activations and fp16
// weights: the fp16 recipe) on NVIDIA cooperative matrices (VK_NV_cooperative_matrix, fp16 x fp16
// -> fp32, 16 x 8 x 16 on 32-lane subgroups): y[t, n] = sum_k x[t, k] w[n, k], as linear_mm.comp
// computes it, the products exact and summed in fp32 in another order (within the fp16 bound of
// the CPU reference: tests/backend_vulkan). A workgroup takes BT = 64 tokens x BN = 64 rows, each
// of its four subgroups a 32 x 32 part: two A fragments (16 tokens x 16 k) by four B fragments
// (16 k x 8 rows) a step of 16 k into eight fp32 accumulators. K passes in chunks of KC = 64
// through two shared buffers, chunk c + 1's global loads issued before chunk c's multiply-adds and
// stored to the other buffer after them (linear_8da4w_mm_coopmat.comp's pipeline), one barrier a
// chunk. The accumulators leave through shared memory (coopMatStoreNV: no fragment layout is
// assumed), rounded to fp16 where Y16. Needs K % 8 == 0 (rows of whole 16-byte words). Rows and
// tokens past the tile's edge are read clamped and never stored; K past its end reads zeros.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define WG 128
#include "common.glsl"
layout(constant_id = 3) const bool Y16 = false;
layout(std430, binding = 0) readonly buffer X4 { uvec4 x4[]; };  // fp16 activations, 8 a word
layout(std430, binding = 1) readonly buffer W4 { uvec4 w4[]; };  // fp16 weights, 8 a word
DECL_FBUF(3, y, writeonly)
// Nc rows in this chunk of the weights, n0 its first output column, N y's row stride, T tokens
// (G unused: linear_mm.comp's push constants).
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G; } pc;

#define F16A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F16B fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define F32C fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>
const uint BT = 64u, BN = 64u, KC = 64u;  // tokens, rows, K halves a chunk
const uint CW = KC / 8u;                  // 16-byte words of a row's chunk
const uint SW = CW + 1u;                  // a staged row in words (one of padding)
const uint SLOT = (BT + BN) * SW;         // one buffer: BT rows of x, then BN rows of w
const uint NA = BT * CW / WG;             // words of x (and of w) a thread stages a chunk
const uint OW = BN / 4u;                  // the output tile's rows in words of four floats
shared uvec4 sm[2u * SLOT];               // the two buffers, then the output tile

uvec4 pa[NA], pb[NA];  // this thread's words of the next chunk
void fetch(uint t0, uint r0, uint c, uint tid) {
  const uint KW = pc.K / 8u;
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * WG, r = i / CW, kw = c * CW + i % CW;
    pa[e] = kw < KW ? x4[min(t0 + r, pc.T - 1u) * KW + kw] : uvec4(0u);
    pb[e] = kw < KW ? w4[min(r0 + r, pc.Nc - 1u) * KW + kw] : uvec4(0u);
  }
}
void stage(uint b, uint tid) {
  [[unroll]] for (uint e = 0; e < NA; ++e) {
    const uint i = tid + e * WG, r = i / CW, w = i % CW;
    sm[b * SLOT + r * SW + w] = pa[e];
    sm[b * SLOT + (BT + r) * SW + w] = pb[e];
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  const uint nb = (pc.Nc + BN - 1u) / BN, g = flat_group();
  const uint r0 = (g % nb) * BN, t0 = (g / nb) * BT;
  if (t0 >= pc.T) return;  // (uniform per workgroup)
  // Subgroup sg: tokens mt .. mt + 31, rows mr .. mr + 31 of the tile.
  const uint mt = (sg % 2u) * 32u, mr = (sg / 2u) * 32u;
  F32C acc[2][4];
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
    acc[i][j] = F32C(0.0);
  const uint chunks = (pc.K + KC - 1u) / KC;
  fetch(t0, r0, 0u, tid);
  stage(0u, tid);
  barrier();
  for (uint c = 0; c < chunks; ++c) {
    const uint base = (c & 1u) * SLOT;
    if (c + 1u < chunks) fetch(t0, r0, c + 1u, tid);  // in flight during this chunk's work
    [[unroll]] for (uint kk = 0; kk < KC / 16u; ++kk) {
      F16A a[2];
      F16B w[4];
      [[unroll]] for (uint i = 0; i < 2u; ++i)
        coopMatLoadNV(a[i], sm, base + (mt + 16u * i) * SW + 2u * kk, SW, false);
      [[unroll]] for (uint j = 0; j < 4u; ++j)
        coopMatLoadNV(w[j], sm, base + (BT + mr + 8u * j) * SW + 2u * kk, SW, true);
      [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
        acc[i][j] = coopMatMulAddNV(a[i], w[j], acc[i][j]);
    }
    if (c + 1u < chunks) stage((c & 1u) ^ 1u, tid);
    barrier();  // the next buffer staged; every read of this one done before it is restaged
  }
  // The output tile, row-major in words of four floats (every read of the buffers is done: the
  // loop's last barrier).
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
    coopMatStoreNV(acc[i][j], sm, (mt + 16u * i) * OW + (mr + 8u * j) / 4u, OW, false);
  barrier();
  for (uint e = tid; e < BT * BN; e += WG) {
    const uint t = e / BN, n = e % BN;
    if (t0 + t < pc.T && r0 + n < pc.Nc)
      STOREF(y, Y16, (t0 + t) * pc.N + pc.n0 + r0 + n,
             uintBitsToFloat(sm[t * OW + n / 4u][n % 4u]));
  }
}
