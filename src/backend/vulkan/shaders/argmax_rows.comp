#version 450
// argmax_rows: out_id[r] = the index of the maximum of row r of x [rows, V] (lowest index on
// ties), a workgroup a row: the batched forward's tokens (docs/ir.md "Batched forward").
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer Out { int out_id[]; };
layout(push_constant) uniform PC { uint V, rows; } pc;
shared float bv[WG];
shared uint bi[WG];

// The better of (v, i) and (ov, oi): larger value, lower index on ties.
void take(inout float v, inout uint i, float ov, uint oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

void main() {
  const uint r = flat_group(), tid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;  // (uniform per workgroup)
  const uint base = r * pc.V;
  float v = -1.0 / 0.0;
  uint i = 0xFFFFFFFFu;
  for (uint j = tid; j < pc.V; j += WG) take(v, i, LOADF(x, X16, base + j), j);
  bv[tid] = v;
  bi[tid] = i;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (tid < s) {
      float a = bv[tid];
      uint ai = bi[tid];
      take(a, ai, bv[tid + s], bi[tid + s]);
      bv[tid] = a;
      bi[tid] = ai;
    }
    barrier();
  }
  if (tid == 0u) out_id[r] = int(bi[0]);
}
