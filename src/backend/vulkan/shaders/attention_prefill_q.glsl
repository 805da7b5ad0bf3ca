// The prefill attention run's queries (attention_prefill.comp and attention_prefill_coopmat.comp
// with VKLLM_ROPE): q is the query before its rope op and, with QKNORM, before its per-head RMS
// norm; each row is normed and rotated as it is loaded (attention_run.glsl). The includer defines
// what attention_run.glsl needs (RUN_LOAD reading q) and BQ.
#include "attention_run.glsl"
shared float pq_inv[BQ];

// The norms of head h's rows of the block t0 .. t0 + BQ - 1 (tokens clamped to the last). Every
// thread calls it.
void pq_norms(uint t0, uint h) {
  if (!QKNORM) return;
  for (uint r = gl_SubgroupID; r < BQ; r += gl_NumSubgroups) {  // (uniform per subgroup)
    const float inv = run_inv((min(t0 + r, pc.T - 1u) * pc.H + h) * HD);
    if (subgroupElect()) pq_inv[r] = inv;
  }
  barrier();
}
// Dim j of the block's row r (token t, at `row` in q) as the attention reads it.
float pq(uint row, uint r, uint j, uint t) { return run_out(row, j, t, QKNORM ? pq_inv[r] : 0.0); }
