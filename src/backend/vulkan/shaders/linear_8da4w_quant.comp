#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x, bit-exact with the CPU
// reference cpu::quantize_act_int8 (same float operations; nearbyint = roundEven). SPIR-V's OpFDiv
// may be 2.5 ulp off (NVIDIA's is), and one ulp moves round(x / scale) across a .5 boundary, so
// every division here goes through div_rn, which is exact.
// Only quotients near a rounding boundary need div_rn: the element pass first multiplies by the
// reciprocal (a few ulp off) and takes the exact division when that lands within 2^-10 of a .5
// boundary (far more than the error), or never when the result clamps either way.
// Output: qx packed four int8 per uint (row stride K/4 words); qp[2t] = scale bits, qp[2t+1] = zp.
// 256 threads: one workgroup per token, so decode (one token) has one workgroup.
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer QX { uint qx[]; };
layout(std430, binding = 2) writeonly buffer QP { uint qp[]; };
layout(push_constant) uniform PC { uint K, T; } pc;
shared float rlo[WG], rhi[WG];

// Correctly rounded a / b for a normal b > 0, by integer long division of the significands
// (fma is not required to be fused in Vulkan, so a residual correction would not be portable).
// Quotients below the normal range come back as a signed zero: every caller here either rounds
// them to an integer (0) or raises them to FLT_EPSILON, exactly as the CPU does with the subnormal.
float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b), sgn = ua & 0x80000000u;
  const int ea = int((ua >> 23) & 255u), eb = int((ub >> 23) & 255u);
  if (ea == 255 || eb == 255 || eb == 0) return a / b;  // inf, nan: as the hardware does
  if (ea == 0) return uintBitsToFloat(sgn);             // zero or subnormal dividend
  uint ma = (ua & 0x7FFFFFu) | 0x800000u;
  const uint mb = (ub & 0x7FFFFFu) | 0x800000u;
  int e = ea - eb + 127;
  if (ma < mb) {
    ma <<= 1;
    e -= 1;
  }
  uint q = 0u, rem = ma;  // rem < 2 mb < 2^25 throughout
  for (int i = 0; i < 24; ++i) {
    q <<= 1;
    if (rem >= mb) {
      rem -= mb;
      q |= 1u;
    }
    rem <<= 1;
  }
  if (rem > mb) q += 1u;  // more than half an ulp left (a quotient is never exactly halfway)
  if (q == 0x1000000u) {
    q >>= 1;
    e += 1;
  }
  if (e >= 255) return uintBitsToFloat(sgn | 0x7F800000u);
  if (e <= 0) return uintBitsToFloat(sgn);
  return uintBitsToFloat(sgn | (uint(e) << 23) | (q & 0x7FFFFFu));
}

void main() {
  const uint t = flat_group(), tid = gl_LocalInvocationID.x;
  if (t >= pc.T) return;
  const uint base = t * pc.K;
  float lo = 0.0, hi = 0.0;
  for (uint k = tid; k < pc.K; k += WG) {
    const float v = LOADF(x, X16, base + k);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  rlo[tid] = lo;
  rhi[tid] = hi;
  barrier();
  [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      rlo[tid] = min(rlo[tid], rlo[tid + s]);
      rhi[tid] = max(rhi[tid], rhi[tid + s]);
    }
    barrier();
  }
  precise float sc = div_rn(rhi[0] - rlo[0], 255.0);
  sc = max(sc, 1.1920928955078125e-7);  // FLT_EPSILON, as torchao clamps the scale
  precise float zpf = clamp(-128.0 - roundEven(div_rn(rlo[0], sc)), -128.0, 127.0);
  const int zp = int(zpf);
  if (tid == 0) {
    qp[2 * t] = floatBitsToUint(sc);
    qp[2 * t + 1] = uint(zp);
  }
  const float rcp = 1.0 / sc;
  for (uint k4 = tid; k4 < pc.K / 4u; k4 += WG) {
    uint packed = 0u;
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      const float xv = LOADF(x, X16, base + 4u * k4 + e);
      precise float qf = xv * rcp;
      // |q| > 512: the sum with zp in [-128, 127] clamps whatever the exact quotient's rounding.
      if (abs(qf) <= 512.0 && abs(fract(qf) - 0.5) < 0.0009765625) qf = div_rn(xv, sc);
      precise float v = roundEven(qf) + float(zp);
      const int qv = int(clamp(v, -128.0, 127.0));
      packed |= (uint(qv) & 255u) << (8u * e);
    }
    qx[t * (pc.K / 4u) + k4] = packed;
  }
}
