#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x, bit-exact with the CPU
// reference cpu::quantize_act_int8 (same float operations; nearbyint = roundEven).
// Output: qx packed four int8 per uint (row stride K/4 words); qp[2t] = scale bits, qp[2t+1] = zp.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer QX { uint qx[]; };
layout(std430, binding = 2) writeonly buffer QP { uint qp[]; };
layout(push_constant) uniform PC { uint K, T; } pc;
shared float rlo[WG], rhi[WG];

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
  precise float sc = (rhi[0] - rlo[0]) / 255.0;
  sc = max(sc, 1.1920928955078125e-7);  // FLT_EPSILON, as torchao clamps the scale
  precise float zpf = clamp(-128.0 - roundEven(rlo[0] / sc), -128.0, 127.0);
  const int zp = int(zpf);
  if (tid == 0) {
    qp[2 * t] = floatBitsToUint(sc);
    qp[2 * t + 1] = uint(zp);
  }
  for (uint k4 = tid; k4 < pc.K / 4u; k4 += WG) {
    uint packed = 0u;
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      precise float v = roundEven(LOADF(x, X16, base + 4u * k4 + e) / sc) + float(zp);
      const int qv = int(clamp(v, -128.0, 127.0));
      packed |= (uint(qv) & 255u) << (8u * e);
    }
    qx[t * (pc.K / 4u) + k4] = packed;
  }
}
