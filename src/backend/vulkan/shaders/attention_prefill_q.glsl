// The prefill attention run's queries (attention_prefill.comp and attention_prefill_coopmat.comp
// with VKLLM_ROPE): q is the query before its rope op and, with QKNORM, before its per-head RMS
// norm (Qwen3's q_norm); each is applied here as the unfused op computes it and rounded as it
// stores its output, so that the attention reads the unfused program's q bit for bit. The norm
// sums as rms_norm.comp's ROWS_SG does (a subgroup a row: each lane its strided elements' squares
// in order, then the subgroup's sum). The includer defines BQ, HD, A16, step_pos, the push
// constants pc (T, H, R, orig, ctx, eps) and PQ_LOAD(i): element i of q as float.
#include "rope.glsl"
layout(constant_id = 4) const bool Q16 = false;     // q before norm and rope
layout(constant_id = 5) const bool QKNORM = false;  // q's per-head norm first
layout(constant_id = 6) const bool N16 = false;     // the normed q's dtype
layout(std430, binding = 5) readonly buffer CS { vec2 cs[]; };   // rope's table
layout(std430, binding = 6) readonly buffer QN { float qn[]; };  // the norm's weight (HD)
shared float pq_inv[BQ];

// The norms of head h's rows of the block t0 .. t0 + BQ - 1 (tokens clamped to the last). Every
// thread calls it.
void pq_norms(uint t0, uint h) {
  if (!QKNORM) return;
  for (uint r = gl_SubgroupID; r < BQ; r += gl_NumSubgroups) {  // (uniform per subgroup)
    const uint row = (min(t0 + r, pc.T - 1u) * pc.H + h) * HD;
    float ss = 0.0;
    for (uint j = gl_SubgroupInvocationID; j < HD; j += gl_SubgroupSize) {
      const float v = PQ_LOAD(row + j);
      ss += v * v;
    }
    const float inv = 1.0 / sqrt(subgroupAdd(ss) / float(HD) + pc.eps);
    if (subgroupElect()) pq_inv[r] = inv;
  }
  barrier();
}
// Element j of the q row at `row` as the rope op reads it (normed with inv where QKNORM).
float pq_in(uint row, uint j, float inv) {
  const float x = PQ_LOAD(row + j);
  return QKNORM ? round_to(N16, qn[j] * (x * inv)) : x;
}
// Dim j of the block's row r (token t, at `row` in q) as the attention reads it.
float pq(uint row, uint r, uint j, uint t) {
  const float inv = QKNORM ? pq_inv[r] : 0.0;
  float y = pq_in(row, j, inv);
  if (j < pc.R) {
    const uint half_r = pc.R / 2u, i = j < half_r ? j : j - half_r;
    const vec2 c = cs[rope_at(step_pos + t, step_pos + pc.T - 1u, pc.orig, pc.ctx, half_r, i)];
    y = rope_dim(j < half_r, pq_in(row, i, inv), pq_in(row, i + half_r, inv), c);
  }
  return round_to(A16, y);
}
