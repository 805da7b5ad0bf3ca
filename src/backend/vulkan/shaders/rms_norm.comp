#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row (the row's arithmetic in rms_norm.glsl).
// VKLLM_ADD (rms_norm_add*, the residual add before the norm, fused into it): x = a + b is first
// stored to s, as the add would store it, and normalized from there.
// VKLLM_QUANT (rms_norm_quant*, a norm over whole rows read only by linear_8da4w ops): also
// quantizes each row of y as stored into the int8 scratch (quant.glsl), saving those linears a
// dispatch and a barrier.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
layout(constant_id = 3) const bool B16 = false;
layout(constant_id = 4) const bool S16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer W { float w[]; };
DECL_FBUF(2, y, writeonly)
#ifdef VKLLM_ADD
DECL_FBUF(3, b, readonly)
DECL_FBUF(4, s, writeonly)
#define QUANT_ROW_BINDING 5
#else
#define QUANT_ROW_BINDING 3
#endif
// gemm: the scratch is read only by tiled GEMMs (quant.glsl's gemm_order).
// x0: where the input starts in x (a fused last_row: the last token's row, vk_ops.cpp
// fuses_into_next).
layout(push_constant) uniform PC { uint G, rows; float eps; uint gemm, x0; } pc;
#ifdef VKLLM_QUANT
#define QUANT_GEMM_ORDER (pc.gemm != 0u)
#include "quant.glsl"
#endif

// The input (with VKLLM_ADD: a + b rounded as s stores it). Always computed from the inputs: s and
// y are written by other threads of the workgroup.
float norm_in(uint i) {
#ifdef VKLLM_ADD
  const float v = LOADF(x, X16, i) + LOADF(b, B16, i);
  return round_to(S16, v);
#else
  return LOADF(x, X16, pc.x0 + i);
#endif
}
void norm_keep(uint i, float v) {
#ifdef VKLLM_ADD
  STOREF(s, S16, i, v);
#endif
}
float norm_w(uint j) { return w[j]; }
void norm_out(uint i, float v) { STOREF(y, Y16, i, v); }
float norm_round(float v) { return round_to(Y16, v); }
#ifdef VKLLM_QUANT
#define NORM_QUANT true
#endif
// Forwards of several rows (prefill) keep rows of up to 4,096 values (16 KiB) in shared memory
// after the first pass: the output and quantizing passes read them there instead of loading (and
// adding) them again. (A decode step's single row does not: holding it measured slower there,
// measured.)
#define NORM_MAX 4096
#define NORM_CACHE_IF (pc.rows > 1u)
#include "rms_norm.glsl"
#ifdef VKLLM_QUANT
float row_value(uint r, uint j) { return normed(r * pc.G, j); }
#endif

// ROWS_SG: a subgroup a row (rms_norm.glsl's norm_row_sg; the host picks it for prefill's
// per-head norms), not a workgroup.
layout(constant_id = 5) const bool ROWS_SG = false;
void main() {
  if (ROWS_SG) {  // rows strided over every subgroup of the dispatch (whatever the subgroup size)
    const uint all = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumSubgroups;
    for (uint r = flat_group() * gl_NumSubgroups + gl_SubgroupID; r < pc.rows; r += all)
      norm_row_sg(r, pc.G, pc.eps);  // (uniform per subgroup)
    return;
  }
  const uint r = flat_group();
  if (r >= pc.rows) return;  // uniform per workgroup
  norm_row(r, pc.G, pc.eps);
}
