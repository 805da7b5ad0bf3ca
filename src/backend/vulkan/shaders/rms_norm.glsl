// The RMS norm of one row, y = x / sqrt(mean(x^2) + eps) * w, shared by rms_norm.comp and the norm
// tail of linear_8da4w.comp (a decode step's norm run by the last workgroup of the mat-vec before
// it), so both sum and round in one order and their rows are bit-identical. 256 threads, each
// issuing four independent loads at a time. Before including, the includer defines WG and:
//   float norm_in(uint i)            element i of the input (with the residual add before the
//                                    norm: a + b rounded as its sum s is stored),
//   void norm_keep(uint i, float v)  stores the sum s (does nothing without the add),
//   float norm_w(uint j)             the weight,
//   void norm_out(uint i, float v)   stores y,  float norm_round(float v): rounds v as y stores it;
// and, to quantize the row for the linear_8da4w ops that read it (quant.glsl included first, the
// includer's row_value(r, j) returning normed(r * G, j)), NORM_QUANT: a constant bool.
// An includer that defines NORM_MAX keeps rows of up to NORM_MAX values in shared memory after
// the first pass, so the later passes read them from there instead of loading (and adding) them
// again (the decode tail runs, and rms_norm.comp's rows of a forward of several tokens), where
// NORM_CACHE_IF (a bool expression, if defined) holds.
#ifdef NORM_MAX
#ifndef NORM_CACHE_IF
#define NORM_CACHE_IF true
#endif
shared float norm_x[NORM_MAX];
#define NORM_CACHE(G) ((G) <= NORM_MAX && NORM_CACHE_IF)
#define NORM_X(J) norm_x[J]
#else
#define NORM_CACHE(G) false
#define NORM_X(J) 0.0
#endif
shared float norm_red[WG];
float norm_inv;
bool norm_cached = false;

// Element j of the normalized row of the row starting at base, as y stores it.
float normed(uint base, uint j) {
  const float x = norm_cached ? NORM_X(j) : norm_in(base + j);
  return norm_round(norm_w(j) * (x * norm_inv));
}

// Normalizes row r of G values; every thread of the workgroup calls it.
void norm_row(uint r, uint G, float eps) {
  const uint tid = gl_LocalInvocationID.x, base = r * G;
  const bool cache = NORM_CACHE(G);
  precise vec4 ss = vec4(0.0);  // (no contraction: every kernel that sums a row's squares alike)
  uint j = tid;
  for (; j + 3u * WG < G; j += 4u * WG) {
    const vec4 v = vec4(norm_in(base + j), norm_in(base + j + WG), norm_in(base + j + 2u * WG),
                        norm_in(base + j + 3u * WG));
    norm_keep(base + j, v.x);
    norm_keep(base + j + WG, v.y);
    norm_keep(base + j + 2u * WG, v.z);
    norm_keep(base + j + 3u * WG, v.w);
#ifdef NORM_MAX
    if (cache) {
      norm_x[j] = v.x;
      norm_x[j + WG] = v.y;
      norm_x[j + 2u * WG] = v.z;
      norm_x[j + 3u * WG] = v.w;
    }
#endif
    ss += v * v;
  }
  for (; j < G; j += WG) {
    const float v = norm_in(base + j);
    norm_keep(base + j, v);
#ifdef NORM_MAX
    if (cache) norm_x[j] = v;
#endif
    ss.x += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) norm_red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += norm_red[i];
  norm_inv = rms_inv(total, G, eps);
  norm_cached = cache;  // (the barrier above made every thread's norm_x entries visible)
#ifdef NORM_QUANT
  if (NORM_QUANT) {
    float lo = 0.0, hi = 0.0;
    for (j = tid; j < G; j += WG) {
      const float v = normed(base, j);
      norm_out(base + j, v);
      lo = min(lo, v);
      hi = max(hi, v);
    }
    quantize_row(r, G, lo, hi);
    return;
  }
#endif
  for (j = tid; j < G; j += WG) norm_out(base + j, normed(base, j));
}

// Row r of G values normalized by one subgroup alone (the includer's ROWS_SG mode: a workgroup
// normalizes as many rows as it has subgroups): each lane sums its strided elements' squares in
// order, then the subgroup adds the lanes'. For rows of few values (per-head norms of 64-128),
// where norm_row would leave most of a 256-thread workgroup idle behind two barriers. No quantizing.
void norm_row_sg(uint r, uint G, float eps) {
  const uint lane = gl_SubgroupInvocationID, n = gl_SubgroupSize, base = r * G;
  precise float ss = 0.0;  // (no contraction: attention_run.glsl's run_inv sums alike)
  for (uint j = lane; j < G; j += n) {
    const float v = norm_in(base + j);
    norm_keep(base + j, v);
    ss += v * v;
  }
  norm_inv = rms_inv(subgroupAdd(ss), G, eps);
  for (uint j = lane; j < G; j += n) norm_out(base + j, normed(base, j));
}

