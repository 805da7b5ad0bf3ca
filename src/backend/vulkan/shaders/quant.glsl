// The per-token int8 quantizer shared by linear_8da4w_quant.comp and the rms_norm that feeds
// linear_8da4w ops (rms_norm_quant): bit-exact with the CPU reference cpu::quantize_act_int8
// (same float operations; nearbyint = roundEven). SPIR-V's OpFDiv may be 2.5 ulp off (NVIDIA's
// is), and one ulp moves round(x / scale) across a .5 boundary, so the scale and zero point come
// from div_rn (common.glsl), which is exact, and so does every quotient within 2^-12 of a .5
// boundary: the product by the correctly rounded reciprocal (both roundings correct, as Vulkan
// requires of OpFMul) is within 2^-23 relative of the exact quotient, 2^-14 at |q| <= 512, so
// beyond 2^-12 it rounds as the exact one does; a quotient beyond +-512 clamps either way.
// The includer defines WG, enables subgroup arithmetic and shuffles, and calls quant_params with
// every thread of the workgroup.
// With QUANT_ROW_BINDING defined, the includer is an op that quantizes its own output rows for the
// linear_8da4w ops that read them (rms_norm_quant): it defines row_value and calls
// quantize_row; the int8 scratch and the scales are bound at QUANT_ROW_BINDING and the next one.
// An includer that defines QUANT_LANES reduces the minimum and maximum itself and calls
// quant_scale_zp_rcp; it has neither quant_params nor its shared memory.
#ifndef QUANT_LANES
shared float q_lo[WG], q_hi[WG];
#endif

// div_rn(a, 255.0) in integers (the scale's division, on the critical path of every quantizing
// prologue): 255.0's significand is 255 * 2^16, so the 24-bit quotient floor(ma 2^23 / mb) is
// floor(ma * 128 / 255), a division by a constant (no reciprocal, no correction loops), its
// remainder (ma * 128 - q * 255) scaled by 2^16 decides the rounding the same way.
float div_rn_255(float a) {
  const uint ua = floatBitsToUint(a), sgn = ua & 0x80000000u;
  const int ea = int((ua >> 23) & 255u);
  if (ea == 255) return a / 255.0;          // inf, nan: as the hardware does
  if (ea == 0) return uintBitsToFloat(sgn);  // zero or subnormal dividend
  uint ma = (ua & 0x7FFFFFu) | 0x800000u;
  int e = ea - 7;  // ea - 134 + 127
  if (ma < 0xFF0000u) {
    ma <<= 1;
    e -= 1;
  }
  const uint n = ma * 128u;  // < 2^32: ma < 2 * 0xFF0000
  uint q = n / 255u;
  if (2u * (n - q * 255u) > 255u) q += 1u;
  return div_result(sgn, e, q);
}

// x rounded to the nearest integer, ties to even, from floor and exact comparisons (|x| < 2^23,
// where x - floor(x) is exact). GLSL's roundEven is not used: Mesa 22.3's lavapipe at 16 lanes
// (LP_NATIVE_VECTOR_WIDTH=512 on an AVX2 CPU) rounds some ties away from zero
// (docs/portability.md). (Nor the magic-number add, (x + 1.5 * 2^23) - 1.5 * 2^23: spirv-opt's
// unroller drops the NoContraction that keeps the driver from folding it to x, as measured in the
// unrolled chain prologue on lavapipe, measured.)
// At a tie f is even when floor(f / 2) * 2 == f, all exact (GLSL's mod(f, 2.0) may divide).
float round_even(float x) {
  const float f = floor(x), d = x - f;
  if (d > 0.5) return f + 1.0;
  if (d < 0.5) return f;
  return floor(f * 0.5) * 2.0 == f ? f : f + 1.0;
}

// A token's scale from its row's minimum lo and maximum hi (both include 0), and its zero point
// from q = lo / scale (div_rn's).
float quant_scale(float lo, float hi) {
  precise float scale = div_rn_255(hi - lo);
  return max(scale, 1.1920928955078125e-7);  // FLT_EPSILON, as torchao clamps the scale
}
int quant_zero_point(float q) {
  precise float zpf = clamp(-128.0 - round_even(q), -128.0, 127.0);
  return int(zpf);
}

// A token's scale sc, zero point zp (from div_rn(lo, sc)) and rcp = div_rn(1.0, sc), from its
// row's minimum lo and maximum hi (both include 0), with one division's latency for the last two:
// lane 0 of the subgroup divides the minimum, the other lanes 1.0, and the results are shuffled to
// all (subgroup-uniform lo and hi; the includer enables subgroup arithmetic and shuffles).
void quant_scale_zp_rcp(float lo, float hi, out float sc, out int zp, out float rcp) {
  sc = quant_scale(lo, hi);
  const float q = div_rn(gl_SubgroupInvocationID == 0u ? lo : 1.0, sc);
  zp = quant_zero_point(subgroupShuffle(q, 0u));
  rcp = subgroupShuffle(q, 1u);
}

#ifndef QUANT_LANES
// Scale, zero point and rcp = div_rn(1.0, sc) of a token from each thread's partial minimum and
// maximum (both start at 0): the subgroups' minima and maxima (exact in any order), one barrier.
void quant_params(float lo, float hi, out float sc, out int zp, out float rcp) {
  lo = subgroupMin(lo);
  hi = subgroupMax(hi);
  if (subgroupElect()) {
    q_lo[gl_SubgroupID] = lo;
    q_hi[gl_SubgroupID] = hi;
  }
  barrier();
  for (uint i = 0; i < gl_NumSubgroups; ++i) {
    lo = min(lo, q_lo[i]);
    hi = max(hi, q_hi[i]);
  }
  quant_scale_zp_rcp(lo, hi, sc, zp, rcp);
}
#endif

// The code of an exact quotient q (as the low byte of the result).
uint quant_code(float q, int zp) {
  precise float v = round_even(q) + float(zp);
  return uint(int(clamp(v, -128.0, 127.0))) & 255u;
}

// The code of q = x * rcp (the low byte), and near: whether q lies so near a rounding boundary
// that the exact quotient div_rn(x, sc) must decide instead (then quant_code of it). In integers
// from the bits of t = q' + 1536, q' = q clamped to +-511 (every code beyond +-256 saturates
// either way, |zp| <= 128): t lies in [1025, 2047], so the adder rounds q' to a multiple of
// 2^-13 and t's significand holds (512 + q') * 2^13. The rounding moves q' by at most 2^-14, so
// it crosses no .5 boundary unless q lies within 2^-12 of one, which near flags (fraction within
// two units of 2^-13 of 0.5); otherwise the code rounds the significand half up. No float-to-int
// conversion and no floor: NVIDIA runs those at a quarter of the rate of an add.
uint quant_code_fast(float q, int zp, out bool near) {
  precise float t = clamp(q, -511.0, 511.0) + 1536.0;
  const int m = int(floatBitsToUint(t) & 0x7FFFFFu);
  near = abs((m & 0x1FFF) - 4096) <= 2;
  const int n = ((m + 4096) >> 13) + (zp - 512);
  return uint(clamp(n, -128, 127)) & 255u;
}

// One value's int8 code (as the low byte of the result). rcp = 1 / sc.
uint quant_value(float xv, float sc, float rcp, int zp) {
  precise float qf = xv * rcp;
  bool near;
  const uint c = quant_code_fast(qf, zp, near);
  return near ? quant_code(div_rn(xv, sc), zp) : c;
}

#ifdef QUANT_ROW_BINDING
// (Named apart from the int8 input bindings of the linear_8da4w kernels, which may include this too.)
layout(std430, binding = QUANT_ROW_BINDING) writeonly buffer QXW { uint qx_w[]; };
layout(std430, binding = QUANT_ROW_BINDING + 1) writeonly buffer QPW { uint qp_w[]; };

// Element j of output row r exactly as the op stores it (defined by the includer; it may read the
// op's inputs but not its output, which other threads of the workgroup write). With QUANT_ROW4 the
// includer defines row_value4 instead: elements 4 j4 .. 4 j4 + 3 at once (wide loads).
#ifdef QUANT_ROW4
vec4 row_value4(uint r, uint j4);
#else
float row_value(uint r, uint j);
#endif

// The codes of elements 4 k4 .. 4 k4 + 3 of output row r, packed four to a word. rcp = 1 / sc.
uint quant_word(uint r, uint k4, float sc, float rcp, int zp) {
  uint packed = 0u;
#ifdef QUANT_ROW4
  const vec4 v = row_value4(r, k4);
#endif
  [[unroll]] for (uint e = 0; e < 4u; ++e) {
#ifdef QUANT_ROW4
    const float xv = v[e];
#else
    const float xv = row_value(r, 4u * k4 + e);
#endif
    packed |= quant_value(xv, sc, rcp, zp) << (8u * e);
  }
  return packed;
}

// Word pair (a, b) of eight codes e0..e7 (a = e0 e1 e2 e3) as (e0 e2 e4 e6, e1 e3 e5 e7): the
// order in which the tiled GEMMs stage their activations, pairing each with its weight as the
// int4 weights widen (linear_8da4w_mm*.comp). A group's integer dot does not depend on the order
// of its terms.
uvec2 gemm_order(uint a, uint b) {
  return uvec2((a & 0xFFu) | ((a >> 8) & 0xFF00u) | ((b & 0xFFu) << 16) | ((b << 8) & 0xFF000000u),
               ((a >> 8) & 0xFFu) | ((a >> 16) & 0xFF00u) | ((b & 0xFF00u) << 8) |
                   (b & 0xFF000000u));
}

// Quantizes output row r of G values (G % 4 == 0) into the scratch, from each thread's partial
// minimum and maximum of the row (both starting at 0). Every thread of the workgroup calls it.
// An includer that defines QUANT_GEMM_ORDER (a bool expression: the scratch is read only by the
// tiled GEMMs of this forward, G % 8 == 0) stores each eight codes in gemm_order.
void quantize_row(uint r, uint G, float lo, float hi) {
  const uint tid = gl_LocalInvocationID.x;
  float sc, rcp;  // rcp correctly rounded (div_rn): OpFDiv may be 2.5 ulp off
  int zp;
  quant_params(lo, hi, sc, zp, rcp);
  if (tid == 0) {
    qp_w[2 * r] = floatBitsToUint(sc);
    qp_w[2 * r + 1] = uint(zp);
  }
  const uint base = r * (G / 4u);
#ifdef QUANT_GEMM_ORDER
  if (QUANT_GEMM_ORDER) {
    for (uint k8 = tid; k8 < G / 8u; k8 += WG) {
      const uvec2 w = gemm_order(quant_word(r, 2u * k8, sc, rcp, zp),
                                 quant_word(r, 2u * k8 + 1u, sc, rcp, zp));
      qx_w[base + 2u * k8] = w.x;
      qx_w[base + 2u * k8 + 1u] = w.y;
    }
    return;
  }
#endif
  for (uint k4 = tid; k4 < G / 4u; k4 += WG) qx_w[base + k4] = quant_word(r, k4, sc, rcp, zp);
}
#endif
