#version 450
// Second pass of linear_8da4w: y[t, n] = sum_g s[n, g] * sx * (sum_{k in g} qx[k] q[n, k] - zp * wsum[n, g])
//                                      = sx * (sum_g s[n, g] * dot_g - zp * sum_g s[n, g] * wsum[n, g]).
// Four int8 x int4 products at a time: OpSDotAccSat (VK_KHR_shader_integer_dot_product) when built
// with VKLLM_IDOT, a portable integer path otherwise. Integer dot products are exact either way.
// Row walk in matvec.glsl.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "matvec.glsl"
#ifdef VKLLM_IDOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4453)
int dotAccSat4x8(int a, int b, int acc, spirv_literal int fmt);
int dot4(int a, int b) { return dotAccSat4x8(a, b, 0, 0); }
#else
int dot4(int a, int b) {
  return bitfieldExtract(a, 0, 8) * bitfieldExtract(b, 0, 8) + bitfieldExtract(a, 8, 8) * bitfieldExtract(b, 8, 8) +
         bitfieldExtract(a, 16, 8) * bitfieldExtract(b, 16, 8) + bitfieldExtract(a, 24, 8) * bitfieldExtract(b, 24, 8);
}
#endif
layout(constant_id = 1) const bool Y16 = false;
layout(std430, binding = 0) readonly buffer QX { int qx[]; };
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };
layout(std430, binding = 2) readonly buffer Q { uint q[]; };
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
DECL_FBUF(5, y, writeonly)
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G, R; } pc;

void main() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
  const uint lane = gl_SubgroupInvocationID, ng = pc.K / pc.G, K4 = pc.K / 4u;
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r, row_byte = n * (pc.K / 2u);
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
    for (uint k4 = lane; k4 < K4; k4 += gl_SubgroupSize) {
      const uint byte = row_byte + 2u * k4;
      const uint word = q[byte >> 2];
      const int w4 = nibbles4_to_i8x4((byte & 2u) != 0u ? (word >> 16) : (word & 0xFFFFu));
      const float sc = s[n * ng + (4u * k4) / pc.G];
      [[unroll]] for (uint i = 0; i < TT; ++i)
        if (t0 + i < pc.T) acc[i] += sc * float(dot4(qx[(t0 + i) * K4 + k4], w4));
    }
    float zs = 0.0;
    for (uint gi = lane; gi < ng; gi += gl_SubgroupSize) zs += s[n * ng + gi] * float(wsum[n * ng + gi]);
    zs = subgroupAdd(zs);
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float sum = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) {
        const uint t = t0 + i;
        const float sx = uintBitsToFloat(qp[2 * t]);
        const int zp = int(qp[2 * t + 1]);
        STOREF(y, Y16, t * pc.N + pc.n0 + n, sx * (sum - float(zp) * zs));
      }
    }
  }
}
