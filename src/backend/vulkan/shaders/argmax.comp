#version 450
// argmax: index of the maximum of x[0 .. V) (lowest index on ties), in two dispatches:
//  (default) workgroup g takes the chunk [g * chunk, (g + 1) * chunk) with 256 threads, four
//    independent loads at a time, and writes its best (value bits, index) to part[g];
//  VKLLM_ARGMAX_FINAL: one workgroup merges the P partials into out_id.
// (One workgroup over a 128k vocabulary would walk 2,000 dependent loads per thread.)
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
shared float bv[WG];
shared uint bi[WG];
const uint NONE = 0xFFFFFFFFu;

// The better of (v, i) and (ov, oi): larger value, lower index on ties; NONE loses.
void take(inout float v, inout uint i, float ov, uint oi) {
  if (oi != NONE && (i == NONE || ov > v || (ov == v && oi < i))) {
    v = ov;
    i = oi;
  }
}

// Workgroup reduction of each thread's (v, i); the result in bv[0], bi[0].
void reduce(float v, uint i) {
  const uint tid = gl_LocalInvocationID.x;
  bv[tid] = v;
  bi[tid] = i;
  barrier();
  [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      float a = bv[tid];
      uint ai = bi[tid];
      take(a, ai, bv[tid + s], bi[tid + s]);
      bv[tid] = a;
      bi[tid] = ai;
    }
    barrier();
  }
}

#ifdef VKLLM_ARGMAX_FINAL
layout(std430, binding = 0) readonly buffer P { uvec2 part[]; };
layout(std430, binding = 1) writeonly buffer Out { int out_id[]; };
layout(push_constant) uniform PC { uint P; } pc;
void main() {
  const uint tid = gl_LocalInvocationID.x;
  float best = 0.0;
  uint besti = NONE;
  for (uint g = tid; g < pc.P; g += WG) take(best, besti, uintBitsToFloat(part[g].x), part[g].y);
  reduce(best, besti);
  if (tid == 0u) out_id[0] = int(bi[0]);
}
#else
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer P { uvec2 part[]; };
layout(push_constant) uniform PC { uint V, chunk; } pc;
void main() {
  const uint tid = gl_LocalInvocationID.x, g = flat_group();
  const uint end = min(pc.V, (g + 1u) * pc.chunk);
  float best = 0.0;
  uint besti = NONE;
  uint i = g * pc.chunk + tid;
  for (; i + 3u * WG < end; i += 4u * WG) {
    const vec4 v = vec4(LOADF(x, X16, i), LOADF(x, X16, i + WG), LOADF(x, X16, i + 2u * WG),
                        LOADF(x, X16, i + 3u * WG));
    take(best, besti, v.x, i);
    take(best, besti, v.y, i + WG);
    take(best, besti, v.z, i + 2u * WG);
    take(best, besti, v.w, i + 3u * WG);
  }
  for (; i < end; i += WG) take(best, besti, LOADF(x, X16, i), i);
  reduce(best, besti);
  if (tid == 0u) part[g] = uvec2(floatBitsToUint(bv[0]), bi[0]);
}
#endif
