// One row of the prefill attention run (vk_fused.cpp kPrefillPatterns: [norm, norm,] rope, rope,
// attention), as the unfused ops compute and store it: the per-head RMS norm (QKNORM, Qwen3's
// q_norm / k_norm) summed as rms_norm.comp's ROWS_SG sums it (a subgroup a row: each lane its
// strided elements' squares in order, then the subgroup's sum) and rounded as the norm stores it
// (N16), then the rotation (rope.glsl) rounded as the rope op stores it (A16). Shared by the KV
// store (attention.comp VKLLM_KV_STORE VKLLM_ROPE: the new keys) and the prefill attention kernels
// (attention_prefill.comp, and attention_prefill_coopmat.comp through attention_prefill_q.glsl: the
// queries), so both sides of the attention see the unfused program's rows bit for bit. The includer
// defines HD, A16, step_pos, the push constants pc (T, R, orig, ctx, eps) and RUN_LOAD(i): element
// i of the row before norm and rope (of dtype X16), as float; a batched forward's includer also
// RUN_POS(t) and RUN_LAST(t), row t's position and its forward's last position of its sequence.
#include "rope.glsl"
#ifndef RUN_POS
#define RUN_POS(t) (step_pos + (t))
#define RUN_LAST(t) (step_pos + pc.T - 1u)
#endif
layout(constant_id = 4) const bool X16 = false;     // the rows before norm and rope
layout(constant_id = 5) const bool QKNORM = false;  // the per-head norm first
layout(constant_id = 6) const bool N16 = false;     // the normed rows' dtype
layout(std430, binding = 5) readonly buffer CS { vec2 cs[]; };     // rope's table
layout(std430, binding = 6) readonly buffer RN { float run_w[]; };  // the norm's weight (HD)

// The norm's 1 / rms of the row at `row`. Every lane of the subgroup calls it.
float run_inv(uint row) {
  precise float ss = 0.0;  // (no contraction, as norm_row_sg)
  for (uint j = gl_SubgroupInvocationID; j < HD; j += gl_SubgroupSize) {
    const float v = RUN_LOAD(row + j);
    ss += v * v;
  }
  return rms_inv(subgroupAdd(ss), HD, pc.eps);
}
// Element j of the row at `row` as the rope op reads it (normed with inv where QKNORM).
float run_in(uint row, uint j, float inv) {
  const float x = RUN_LOAD(row + j);
  return QKNORM ? round_to(N16, run_w[j] * (x * inv)) : x;
}
// Element j of the row at `row` (token t of the forward) as the rope op stores it.
float run_out(uint row, uint j, uint t, float inv) {
  float y = run_in(row, j, inv);
  if (j < pc.R) {
    const uint half_r = pc.R / 2u, i = j < half_r ? j : j - half_r;
    const vec2 c = cs[rope_at(RUN_POS(t), RUN_LAST(t), pc.orig, pc.ctx, half_r, i)];
    y = rope_dim(j < half_r, run_in(row, i, inv), run_in(row, i + half_r, inv), c);
  }
  return round_to(A16, y);
}
