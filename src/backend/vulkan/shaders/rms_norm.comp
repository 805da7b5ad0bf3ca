#version 450
// rms_norm: each group of G consecutive elements: y = x / sqrt(mean(x^2) + eps) * w.
// One workgroup per group-row. A decode step's norm is a single workgroup, so its speed is the
// latency of its loads: 256 threads, each issuing four independent loads at a time.
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WG 256
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
  vec4 ss = vec4(0.0);
  uint j = tid;
  for (; j + 3u * WG < pc.G; j += 4u * WG) {
    const vec4 v = vec4(LOADF(x, X16, base + j), LOADF(x, X16, base + j + WG),
                        LOADF(x, X16, base + j + 2u * WG), LOADF(x, X16, base + j + 3u * WG));
    ss += v * v;
  }
  for (; j < pc.G; j += WG) {
    const float v = LOADF(x, X16, base + j);
    ss.x += v * v;
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  const float inv = 1.0 / sqrt(total / float(pc.G) + pc.eps);
  for (j = tid; j < pc.G; j += WG) STOREF(y, Y16, base + j, w[j] * (LOADF(x, X16, base + j) * inv));
}
