#version 450
// linear: y[T, N] = x[T, K] W[N, K]^T with W fp32 or fp16 (row walk in matvec.glsl): W is read
// once per TT tokens. With VEC8 (the host sets it where K % 8 == 0 and Tuning::linear_vec8 asks)
// a lane takes eight consecutive values of the row at a time (one 16-byte load of fp16, two of
// fp32), two such loads in flight; otherwise one value at a time. Either way a token's sum is the
// same whatever TT: each lane adds its values in order, then subgroupAdd.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "matvec.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool W16 = false;
layout(constant_id = 3) const bool Y16 = false;
layout(constant_id = 9) const bool VEC8 = false;
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, wt, readonly)
DECL_FBUF(2, y, writeonly)
DECL_VIEW4(0, x)  // (x_v4: 16-byte words, eight fp16 or four fp32 values a word)
DECL_VIEW4(1, wt)
// Nc: rows in this chunk; n0: first output column of the chunk; N: row stride of y; R: rows per
// workgroup.
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, R; } pc;

// Values 8 i .. 8 i + 7 of NAME (fp16 where F16: one 16-byte word) as two vec4s.
#define LOAD8(NAME, F16, I, LO, HI)                          \
  if (F16) {                                                 \
    const uvec4 q_ = NAME##_v4[I];                           \
    LO = vec4(unpackHalf2x16(q_.x), unpackHalf2x16(q_.y));   \
    HI = vec4(unpackHalf2x16(q_.z), unpackHalf2x16(q_.w));   \
  } else {                                                   \
    LO = LOAD4(NAME, false, 2u * (I));                       \
    HI = LOAD4(NAME, false, 2u * (I) + 1u);                  \
  }

// One token's partial sum over the eight values at word i of w (lo, hi) and of its x row.
float dot8(uint xi, vec4 wl, vec4 wh) {
  vec4 xl, xh;
  LOAD8(x, X16, xi, xl, xh);
  return dot(wl, xl) + dot(wh, xh);
}

void main() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
  const uint lane = gl_SubgroupInvocationID, n_sg = gl_SubgroupSize;
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r;
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
    if (VEC8) {
      const uint K8 = pc.K / 8u, w0 = n * K8;
      uint k8 = lane;
      for (; k8 + n_sg < K8; k8 += 2u * n_sg) {  // two words of the row in flight
        vec4 al, ah, bl, bh;
        LOAD8(wt, W16, w0 + k8, al, ah);
        LOAD8(wt, W16, w0 + k8 + n_sg, bl, bh);
        [[unroll]] for (uint i = 0; i < TT; ++i)
          if (t0 + i < pc.T) {
            acc[i] += dot8((t0 + i) * K8 + k8, al, ah);
            acc[i] += dot8((t0 + i) * K8 + k8 + n_sg, bl, bh);
          }
      }
      if (k8 < K8) {
        vec4 al, ah;
        LOAD8(wt, W16, w0 + k8, al, ah);
        [[unroll]] for (uint i = 0; i < TT; ++i)
          if (t0 + i < pc.T) acc[i] += dot8((t0 + i) * K8 + k8, al, ah);
      }
    } else {
      for (uint k = lane; k < pc.K; k += n_sg) {
        const float wv = LOADF(wt, W16, n * pc.K + k);
        [[unroll]] for (uint i = 0; i < TT; ++i)
          if (t0 + i < pc.T) acc[i] += LOADF(x, X16, (t0 + i) * pc.K + k) * wv;
      }
    }
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float s = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) STOREF(y, Y16, (t0 + i) * pc.N + pc.n0 + n, s);
    }
  }
}
