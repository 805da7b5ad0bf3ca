// The prologue of the decode mat-vecs that derive their int8 input row themselves, from the float
// row, in every workgroup (linear_8da4w_fused.comp; linear_8da4w_mv.comp VKLLM_MV_NORM): PRO = 0
// the row quantized as linear_8da4w_quant does; PRO = 1 normalized as rms_norm (over the whole
// row) stores it, then quantized as rms_norm_quant does (the sum of squares in rms_norm.comp's
// order, so WG = 256 threads: the same int8 codes). The codes go to qxs in shared_row_dot.glsl's
// layout, with the block sums.
// (linear_q4w_mv.comp VKLLM_MV_NORM, NQP_NORM_ONLY: the normalized row in floats, no codes.)
// The includer includes common.glsl, quant.glsl, idot.glsl and shared_row_dot.glsl first and
// defines the constants PRO, X16 and H16 (the norm's output dtype, as it would be stored), the
// float input row x (DECL_FBUF), the norm weight nw[] and push constants pc.K and pc.eps.
shared float pro_red[WG];

// Element j of the row the prologue quantizes (PRO 1: normalized as rms_norm stores it).
float pval(uint j, float inv) {
  const float xv = LOADF(x, X16, j);
  return PRO == 1u ? round_to(H16, nw[j] * (xv * inv)) : xv;
}

// The row's 1 / sqrt(mean(x^2) + eps), its sum of squares in rms_norm.comp's order (256 threads).
float norm_inv() {
  const uint tid = gl_LocalInvocationID.x, K = pc.K;
  precise vec4 ss = vec4(0.0);  // (no contraction, as rms_norm.glsl's norm_row)
  uint j = tid;
  for (; j + 3u * WG < K; j += 4u * WG) {
    const vec4 v = vec4(LOADF(x, X16, j), LOADF(x, X16, j + WG), LOADF(x, X16, j + 2u * WG),
                        LOADF(x, X16, j + 3u * WG));
    ss += v * v;
  }
  for (; j < K; j += WG) {
    const float v = LOADF(x, X16, j);
    ss.x += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) pro_red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += pro_red[i];
  return rms_inv(total, K, pc.eps);
}

#ifndef NQP_NORM_ONLY  // (an includer that keeps the row in floats takes norm_inv and pval only)
// The prologue: the row's int8 codes into qxs, its scale and zero point. Structured as
// rms_norm_quant: the sum of squares in rms_norm.comp's order, then the minimum and maximum, then
// each thread's word pairs of eight codes, shared_row_dot.glsl's layout (the row is re-read from
// L1/L2 rather than held).
void prologue(out float sx, out int zp) {
  const uint tid = gl_LocalInvocationID.x, K = pc.K;
  const float inv = PRO == 1u ? norm_inv() : 1.0;
  float lo = 0.0, hi = 0.0;
  for (uint w = tid; w < K / 4u; w += WG)
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      const float v = pval(4u * w + e, inv);
      lo = min(lo, v);
      hi = max(hi, v);
    }
  float rcp;
  quant_params(lo, hi, sx, zp, rcp);  // quant.glsl's formula, rcp exact
  for (uint p = tid; p < K / 8u; p += WG) {
    uint ev = 0u, od = 0u;
    [[unroll]] for (uint t = 0; t < 8u; ++t)
      pack_code(t, quant_value(pval(8u * p + t, inv), sx, rcp, zp), ev, od);
    store_pair(p, ev, od);
  }
  barrier();
  block_sums(K, tid, WG);
  barrier();
}
#endif
