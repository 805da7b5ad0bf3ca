#version 450
// linear: y[T, N] = x[T, K] W[N, K]^T with W fp32 or fp16 (row walk in matvec.glsl): W is read
// once per TT tokens.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "matvec.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool W16 = false;
layout(constant_id = 3) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, wt, readonly)
DECL_FBUF(2, y, writeonly)
// Nc: rows in this chunk; n0: first output column of the chunk; N: row stride of y; R: rows per
// workgroup.
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, R; } pc;

void main() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
  const uint lane = gl_SubgroupInvocationID;
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r;
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
    for (uint k = lane; k < pc.K; k += gl_SubgroupSize) {
      const float wv = LOADF(wt, W16, n * pc.K + k);
      [[unroll]] for (uint i = 0; i < TT; ++i)
        if (t0 + i < pc.T) acc[i] += LOADF(x, X16, (t0 + i) * pc.K + k) * wv;
    }
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float s = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) STOREF(y, Y16, (t0 + i) * pc.N + pc.n0 + n, s);
    }
  }
}
