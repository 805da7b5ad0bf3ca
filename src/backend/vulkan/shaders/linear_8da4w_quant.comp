#version 450
// First pass of linear_8da4w: per-token asymmetric int8 quantization of x (quant.glsl), one
// workgroup of 256 threads per token, any K. Output: qx packed four int8 per uint (row stride
// K/4 words); qp[2t] = scale bits, qp[2t+1] = zero point. (Ops whose output only linear_8da4w
// ops read quantize it themselves, as row kernels: rms_norm_quant, swiglu_quant.)
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WG 256
#include "common.glsl"
#include "quant.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer QX { uint qx[]; };
layout(std430, binding = 2) writeonly buffer QP { uint qp[]; };
layout(push_constant) uniform PC { uint K, T; } pc;

vec4 x4(uint i) {
  return vec4(LOADF(x, X16, i), LOADF(x, X16, i + 1u), LOADF(x, X16, i + 2u),
              LOADF(x, X16, i + 3u));
}

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
  float sc;
  int zp;
  quant_params(lo, hi, sc, zp);
  if (tid == 0) {
    qp[2 * t] = floatBitsToUint(sc);
    qp[2 * t + 1] = uint(zp);
  }
  const float rcp = 1.0 / sc;
  for (uint k4 = tid; k4 < pc.K / 4u; k4 += WG)
    qx[t * (pc.K / 4u) + k4] = quant_pack4(x4(base + 4u * k4), sc, rcp, zp);
}
