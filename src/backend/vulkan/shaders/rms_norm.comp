#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer W { float w[]; };
DECL_FBUF(2, y, writeonly)
layout(push_constant) uniform PC { uint G, rows; float eps; } pc;
shared float red[WG];

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // uniform per workgroup
  const uint base = r * pc.G;
  float ss = 0.0;
  for (uint j = tid; j < pc.G; j += WG) {
    const float v = LOADF(x, X16, base + j);
    ss += v * v;
  }
  red[tid] = ss;
  barrier();
  [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float inv = 1.0 / sqrt(red[0] / float(pc.G) + pc.eps);
  for (uint j = tid; j < pc.G; j += WG) STOREF(y, Y16, base + j, w[j] * (LOADF(x, X16, base + j) * inv));
}
