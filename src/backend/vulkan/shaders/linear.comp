#version 450
// linear: y[T, N] = x[T, K] W[N, K]^T with W fp32 or fp16. One workgroup per (output row n of the
// bound row chunk, block of TT tokens): W is read once per TT tokens.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool W16 = false;
layout(constant_id = 3) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, wt, readonly)
DECL_FBUF(2, y, writeonly)
// Nc: rows in this chunk; n0: first output column of the chunk; N: row stride of y.
layout(push_constant) uniform PC { uint K, Nc, n0, N, T; } pc;
#define TT 4
shared float red[TT][WG];

void main() {
  const uint g = flat_group(), tid = gl_LocalInvocationID.x;
  const uint n = g % pc.Nc, t0 = (g / pc.Nc) * TT;
  if (t0 >= pc.T) return;  // uniform per workgroup
  float acc[TT];
  [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
  for (uint k = tid; k < pc.K; k += WG) {
    const float wv = LOADF(wt, W16, n * pc.K + k);
    [[unroll]] for (uint i = 0; i < TT; ++i)
      if (t0 + i < pc.T) acc[i] += LOADF(x, X16, (t0 + i) * pc.K + k) * wv;
  }
#include "linear_tail.glsl"
  if (tid < TT && t0 + tid < pc.T) STOREF(y, Y16, (t0 + tid) * pc.N + pc.n0 + n, red[tid][0]);
}
