#version 450
// Second pass of linear_8da4w: y[t, n] = sum_g s[n, g] * sx * (sum_{k in g} qx[k] q[n, k] - zp * wsum[n, g])
//                                      = sx * (sum_g s[n, g] * dot_g - zp * zs[n]),
// zs[n] = sum_g s[n, g] * wsum[n, g] computed once at load. Four int8 x int4 products at a time:
// OpSDotAccSat (VK_KHR_shader_integer_dot_product) when built with VKLLM_IDOT, a portable integer
// path otherwise; integer dot products are exact either way. Row walk in matvec.glsl.
// VKLLM_B32 (K % 32 == 0 and G % 32 == 0, every real model): lanes take 32 weights at a time with
// 16-byte loads (one uvec4 of nibbles, two of int8 activations); otherwise four at a time.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "matvec.glsl"
#ifdef VKLLM_IDOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4453)
int dotAccSat4x8(int a, int b, int acc, spirv_literal int fmt);
int dot4(int a, int b, int acc) { return dotAccSat4x8(a, b, acc, 0); }
#else
int dot4(int a, int b, int acc) {
  return acc + bitfieldExtract(a, 0, 8) * bitfieldExtract(b, 0, 8) +
         bitfieldExtract(a, 8, 8) * bitfieldExtract(b, 8, 8) +
         bitfieldExtract(a, 16, 8) * bitfieldExtract(b, 16, 8) +
         bitfieldExtract(a, 24, 8) * bitfieldExtract(b, 24, 8);
}
#endif
layout(constant_id = 1) const bool Y16 = false;
#ifdef VKLLM_B32
layout(std430, binding = 0) readonly buffer QX { uvec4 qx[]; };  // K / 16 per token
layout(std430, binding = 2) readonly buffer Q { uvec4 q[]; };    // K / 32 per row
#else
layout(std430, binding = 0) readonly buffer QX { int qx[]; };  // K / 4 per token
layout(std430, binding = 2) readonly buffer Q { uint q[]; };
#endif
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer ZS { float zs[]; };  // indexed by n0 + n
DECL_FBUF(5, y, writeonly)
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; } pc;

void main() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
  const uint lane = gl_SubgroupInvocationID, ng = pc.K / pc.G;
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r;
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
#ifdef VKLLM_B32
    const uint nb = pc.K / 32u;
    for (uint b = lane; b < nb; b += gl_SubgroupSize) {
      const uvec4 w = q[n * nb + b];
      const int w0 = nibbles4_to_i8x4(w.x & 0xFFFFu), w1 = nibbles4_to_i8x4(w.x >> 16),
                w2 = nibbles4_to_i8x4(w.y & 0xFFFFu), w3 = nibbles4_to_i8x4(w.y >> 16),
                w4 = nibbles4_to_i8x4(w.z & 0xFFFFu), w5 = nibbles4_to_i8x4(w.z >> 16),
                w6 = nibbles4_to_i8x4(w.w & 0xFFFFu), w7 = nibbles4_to_i8x4(w.w >> 16);
      const float sc = s[n * ng + (32u * b) / pc.G];
      [[unroll]] for (uint i = 0; i < TT; ++i) {
        if (t0 + i < pc.T) {
          const uvec4 xa = qx[(t0 + i) * (2u * nb) + 2u * b], xb = qx[(t0 + i) * (2u * nb) + 2u * b + 1u];
          int d = dot4(int(xa.x), w0, 0);
          d = dot4(int(xa.y), w1, d);
          d = dot4(int(xa.z), w2, d);
          d = dot4(int(xa.w), w3, d);
          d = dot4(int(xb.x), w4, d);
          d = dot4(int(xb.y), w5, d);
          d = dot4(int(xb.z), w6, d);
          d = dot4(int(xb.w), w7, d);
          acc[i] += sc * float(d);
        }
      }
    }
#else
    const uint row_byte = n * (pc.K / 2u), K4 = pc.K / 4u;
    for (uint k4 = lane; k4 < K4; k4 += gl_SubgroupSize) {
      const uint byte = row_byte + 2u * k4;
      const uint word = q[byte >> 2];
      const int w4 = nibbles4_to_i8x4((byte & 2u) != 0u ? (word >> 16) : (word & 0xFFFFu));
      const float sc = s[n * ng + (4u * k4) / pc.G];
      [[unroll]] for (uint i = 0; i < TT; ++i)
        if (t0 + i < pc.T) acc[i] += sc * float(dot4(qx[(t0 + i) * K4 + k4], w4, 0));
    }
#endif
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float sum = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) {
        const uint t = t0 + i;
        const float sx = uintBitsToFloat(qp[2 * t]);
        const int zp = int(qp[2 * t + 1]);
        STOREF(y, Y16, t * pc.N + pc.n0 + n, sx * (sum - float(zp) * zs[pc.n0 + n]));
      }
    }
  }
}
