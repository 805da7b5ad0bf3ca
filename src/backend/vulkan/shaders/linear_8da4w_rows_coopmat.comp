#version 450
// linear_8da4w for forwards of a few tokens (a batched decode step's rows, a short prompt) on
// NVIDIA cooperative matrices (int8 x int8 -> int32, 16 x 8 x 32): the weights are the matrices'
// 16 rows and the tokens their 8 columns, so one multiply-add covers 16 weight rows for up to 8
// tokens, and the nibbles' widening, which bounds the mat-vecs, is paid once for every token.
// Bindings and result as linear_8da4w_mm_coopmat.comp (the activations in quant.glsl's
// gemm_order, the weights widened to match by masks, 16 q with W16); a group's term
//   s[n, g] * float(dot_g[t, n] - zp[t] * wsum[n, g])
// is exact in integers as there. Workgroup: 16 weight rows, SGS subgroups; subgroup i takes the
// groups g = i, i + SGS, .. in ascending order (its own sum), then the subgroups' sums are added
// in subgroup order and y = sx[t] * that. The order depends on K, G and SGS only, never on the
// tokens: a token's row is the same whatever the other rows of the forward are. TF fragments of
// 8 tokens (T <= 8 TF); the activations of tokens past T are read (the scratch holds at least
// 8 TF rows: the host's rule) and their results never stored.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#define WG_SPEC
layout(constant_id = 9) const uint TF = 1;     // 8-token fragments: 1 .. 8
layout(constant_id = 10) const uint GQ = 4;    // G / 32: 32-weight steps a group
layout(constant_id = 11) const uint NT = 512;  // threads: 32 SGS
layout(constant_id = 12) const bool W16 = false;  // nibbles widened to 16 q (G <= 128)
layout(local_size_x_id = 11) in;
#include "common.glsl"
layout(constant_id = 1) const bool Y16 = false;
layout(std430, binding = 0) readonly buffer QX { uvec4 qx[]; };  // int8 activations (gemm_order)
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };   // per token: scale bits, zero point
layout(std430, binding = 2) readonly buffer Q { uvec2 q[]; };    // int4 weights, K / 16 per row
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
DECL_FBUF(5, y, writeonly)
layout(push_constant) uniform PC {
  uint K, Nc, n0, N, T, G;
} pc;

const uint SGS = NT / 32u;
const uint SV = 2u * GQ + 1u;     // a staged row of one group in uvec4 (one of padding)
const uint STAGE = 16u * SV;      // a subgroup's staged group: 16 rows
const uint CE = 4u;               // accumulator elements a lane (16 x 8 on 32 lanes)
const uint WL = GQ;               // uvec2 of nibbles a lane loads a group (16 rows x G / 16)
shared uvec4 sm[SGS * STAGE];     // the staged groups (first the accumulator layout's probe)
shared uvec4 s_sum[SGS * TF * 32u];  // each lane's sums: [subgroup][fragment][lane], 4 elements
shared int s_zp[8u * TF];

// One group's words for this lane: its nibbles (lane l, word j: row (l + 32 j) / (2 GQ), word
// (l + 32 j) % (2 GQ) of the row's group), and the scales and weight sums of its accumulator rows.
uvec2 pw[WL];
float p_s[CE];
int p_ws[CE];
void fetch(uint r0, uint g, uint lane, uint row[CE]) {
  const uint ng = pc.K / pc.G, rw = pc.K / 16u;
  [[unroll]] for (uint j = 0; j < WL; ++j) {
    const uint i = lane + 32u * j, r = i / (2u * GQ), w = i % (2u * GQ);
    pw[j] = q[min(r0 + r, pc.Nc - 1u) * rw + g * (2u * GQ) + w];
  }
  [[unroll]] for (uint e = 0; e < CE; ++e) {
    const uint at = min(r0 + row[e], pc.Nc - 1u) * ng + g;
    p_s[e] = s[at];
    p_ws[e] = wsum[at];
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
  const uint r0 = gl_WorkGroupID.x * 16u, ng = pc.K / pc.G, rw = pc.K / 16u;
  // The accumulator layout: a 16 x 8 matrix of the values 8 row + col.
  for (uint u = tid; u < 32u; u += NT) sm[u] = uvec4(4u * u) + uvec4(0u, 1u, 2u, 3u);
  for (uint u = tid; u < 8u * TF; u += NT) s_zp[u] = int(qp[2u * min(u, pc.T - 1u) + 1u]);
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
  int zp[TF][CE];
  [[unroll]] for (uint f = 0; f < TF; ++f)[[unroll]] for (uint e = 0; e < CE; ++e)
    zp[f][e] = s_zp[8u * f + col[e]];
  barrier();  // every subgroup's probe read before the staging overwrites it
  precise float acc[TF][CE];
  [[unroll]] for (uint f = 0; f < TF; ++f)[[unroll]] for (uint e = 0; e < CE; ++e) acc[f][e] = 0.0;
  const uint base = sg * STAGE;
  if (sg < ng) fetch(r0, sg, lane, row);
  for (uint g = sg; g < ng; g += SGS) {
    // Stage this group's weights widened (as linear_8da4w_mm_coopmat.comp's stage()).
    [[unroll]] for (uint j = 0; j < WL; ++j) {
      const uint i = lane + 32u * j, r = i / (2u * GQ), w = i % (2u * GQ);
      const uvec2 v = pw[j];
      const uint M = 0x0F0F0F0Fu, H = 0xF0F0F0F0u, F = 0x80808080u;
      sm[base + r * SV + w] =
          W16 ? uvec4(((v.x << 4) & H) ^ F, (v.x & H) ^ F, ((v.y << 4) & H) ^ F, (v.y & H) ^ F)
              : uvec4(widen_nibbles(v.x & M), widen_nibbles((v.x >> 4) & M), widen_nibbles(v.y & M),
                      widen_nibbles((v.y >> 4) & M));
    }
    float sc[CE];
    int nws[CE];
    [[unroll]] for (uint e = 0; e < CE; ++e) {
      sc[e] = p_s[e];
      nws[e] = -p_ws[e] * (W16 ? 16 : 1);
    }
    if (g + SGS < ng) fetch(r0, g + SGS, lane, row);  // in flight during this group's work
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    icoopmatNV<32, gl_ScopeSubgroup, 16, 8> cd[TF];
    [[unroll]] for (uint f = 0; f < TF; ++f)[[unroll]] for (uint e = 0; e < CE; ++e)
      cd[f][e] = zp[f][e] * nws[e] + kMagic;
    [[unroll]] for (uint kk = 0; kk < GQ; ++kk) {
      icoopmatNV<8, gl_ScopeSubgroup, 16, 32> a;
      coopMatLoadNV(a, sm, base + 2u * kk, SV, false);
      [[unroll]] for (uint f = 0; f < TF; ++f) {
        icoopmatNV<8, gl_ScopeSubgroup, 32, 8> x;
        coopMatLoadNV(x, qx, 8u * f * rw + g * (2u * GQ) + 2u * kk, rw, true);
        cd[f] = coopMatMulAddNV(a, x, cd[f]);
      }
    }
    [[unroll]] for (uint f = 0; f < TF; ++f)[[unroll]] for (uint e = 0; e < CE; ++e) {
      precise float term = sc[e] * exact_float(cd[f][e]);
      acc[f][e] = acc[f][e] + term;
    }
    subgroupBarrier();  // every lane's fragment loads done before the next group is staged
  }
  // The sums of every subgroup, each lane's four elements as one word; then the lanes of
  // subgroup f % SGS add those of fragment f in subgroup order and store them.
  [[unroll]] for (uint f = 0; f < TF; ++f)
    s_sum[(sg * TF + f) * 32u + lane] =
        floatBitsToUint(vec4(acc[f][0], acc[f][1], acc[f][2], acc[f][3]));
  barrier();
  for (uint f = sg; f < TF; f += SGS) {
    precise float v[CE];
    [[unroll]] for (uint e = 0; e < CE; ++e) v[e] = 0.0;
    for (uint i = 0; i < min(SGS, ng); ++i) {
      const vec4 p = uintBitsToFloat(s_sum[(i * TF + f) * 32u + lane]);
      [[unroll]] for (uint e = 0; e < CE; ++e) v[e] = v[e] + p[e];
    }
    [[unroll]] for (uint e = 0; e < CE; ++e) {
      const uint t = 8u * f + col[e], n = r0 + row[e];
      if (t >= pc.T || n >= pc.Nc) continue;
      const float sx = uintBitsToFloat(qp[2u * t]) * (W16 ? 0.0625 : 1.0);  // (exact)
      precise float out_v = v[e] * sx;
      STOREF(y, Y16, t * pc.N + pc.n0 + n, out_v);
    }
  }
}
