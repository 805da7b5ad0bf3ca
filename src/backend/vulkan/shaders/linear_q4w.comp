#version 450
// linear_q4w: int4 weight-only linear, y[t, n] = sum_k x[t, k] * q[n, k] * s[n, k / G] (row walk
// in matvec.glsl). Lanes take four weights (two bytes) at a time; K % 4 == 0 and G % 4 == 0.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "matvec.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
layout(std430, binding = 2) readonly buffer S { float s[]; };
DECL_FBUF(3, y, writeonly)
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; } pc;

void main() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
  const uint lane = gl_SubgroupInvocationID, ng = pc.K / pc.G;
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r, row_byte = n * (pc.K / 2u);
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
    for (uint k = lane * 4u; k < pc.K; k += gl_SubgroupSize * 4u) {
      const uint byte = row_byte + k / 2u;
      const uint word = q[byte >> 2];
      const int w4 = nibbles4_to_i8x4((byte & 2u) != 0u ? (word >> 16) : (word & 0xFFFFu));
      const float sc = s[n * ng + k / pc.G];
      const vec4 wv = vec4(bitfieldExtract(w4, 0, 8), bitfieldExtract(w4, 8, 8),
                           bitfieldExtract(w4, 16, 8), bitfieldExtract(w4, 24, 8));
      [[unroll]] for (uint i = 0; i < TT; ++i) {
        if (t0 + i < pc.T) {
          const uint xb = (t0 + i) * pc.K + k;
          const vec4 xv = vec4(LOADF(x, X16, xb), LOADF(x, X16, xb + 1u), LOADF(x, X16, xb + 2u),
                               LOADF(x, X16, xb + 3u));
          acc[i] += dot(xv, wv) * sc;
        }
      }
    }
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float sum = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) STOREF(y, Y16, (t0 + i) * pc.N + pc.n0 + n, sum);
    }
  }
}
