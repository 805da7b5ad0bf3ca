#version 450
// argmax: index of the maximum of x[0 .. V) (lowest index on ties), one workgroup.
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer Out { int out_id[]; };
layout(push_constant) uniform PC { uint V; } pc;
shared float bv[WG];
shared uint bi[WG];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  float best = -1.0 / 0.0;
  uint besti = 0xFFFFFFFFu;
  for (uint i = tid; i < pc.V; i += WG) {
    const float v = LOADF(x, X16, i);
    if (besti == 0xFFFFFFFFu || v > best) {
      best = v;
      besti = i;
    }
  }
  bv[tid] = best;
  bi[tid] = besti;
  barrier();
  [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      const float ov = bv[tid + s];
      const uint oi = bi[tid + s];
      if (oi != 0xFFFFFFFFu && (bi[tid] == 0xFFFFFFFFu || ov > bv[tid] || (ov == bv[tid] && oi < bi[tid]))) {
        bv[tid] = ov;
        bi[tid] = oi;
      }
    }
    barrier();
  }
  if (tid == 0) out_id[0] = int(bi[0]);
}
