// The prefill attention run's queries (attention_prefill_coopmat.comp with VKLLM_ROPE): q is the
// query before its rope op and, with QKNORM, before its per-head norm; each row is normed and
// rotated as it is loaded (attention_run.glsl). The includer defines what attention_run.glsl needs
// (RUN_LOAD reading q), QR (the q tile's rows) and q_row(r): row r's (token, head) as
// uvec2(t, h), tokens clamped to the last.
#include "attention_run.glsl"
shared float pq_inv[QR];

// The norms of the q tile's rows. Every thread calls it.
void pq_norms() {
  if (!QKNORM) return;
  for (uint r = gl_SubgroupID; r < QR; r += gl_NumSubgroups) {  // (uniform per subgroup)
    const uvec2 th = q_row(r);
    const float inv = run_inv((th.x * pc.H + th.y) * HD);
    if (subgroupElect()) pq_inv[r] = inv;
  }
  barrier();
}
// Dim j of the tile's row r (token t, at `row` in q) as the attention reads it.
float pq(uint row, uint r, uint j, uint t) { return run_out(row, j, t, QKNORM ? pq_inv[r] : 0.0); }
