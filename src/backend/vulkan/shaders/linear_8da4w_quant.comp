#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x (quant.glsl), one
// workgroup of 256 threads per token. Output: qx packed four int8 per uint (row stride K/4 words);
// qp[2t] = scale bits, qp[2t+1] = zero point.
#define WG 256
#include "common.glsl"
#define QUANT_ROW_BINDING 1
#include "quant.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(push_constant) uniform PC { uint K, T; } pc;
float row_value(uint t, uint k) { return LOADF(x, X16, t * pc.K + k); }

void main() {
  const uint t = flat_group(), tid = gl_LocalInvocationID.x;
  if (t >= pc.T) return;
  const uint base = t * pc.K;
  float lo = 0.0, hi = 0.0;
  uint k = tid;
  for (; k + 3u * WG < pc.K; k += 4u * WG) {  // four independent loads in flight
    const vec4 v = vec4(LOADF(x, X16, base + k), LOADF(x, X16, base + k + WG),
                        LOADF(x, X16, base + k + 2u * WG), LOADF(x, X16, base + k + 3u * WG));
    lo = min(lo, min(min(v.x, v.y), min(v.z, v.w)));
    hi = max(hi, max(max(v.x, v.y), max(v.z, v.w)));
  }
  for (; k < pc.K; k += WG) {
    const float v = LOADF(x, X16, base + k);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(t, pc.K, lo, hi);
}
