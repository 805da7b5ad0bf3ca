#version 450
// argmax_rows: out_id[r] = the index of the maximum of row r of x [rows, V] (lowest index on
// ties): the batched forward's tokens (docs/ir.md "Batched forward"). As argmax.comp, over P
// workgroups a row: workgroup g takes chunk g % P of row g / P with 256 threads, four
// independent loads at a time, and writes its best (value bits, index) to part[g]; the last of a
// row's workgroups to finish (the row's counter) merges its P partials in chunk order and resets
// the counter. (One workgroup over a 128k vocabulary walks 500 dependent loads a thread.)
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) writeonly buffer Out { int out_id[]; };
layout(std430, binding = 2) coherent buffer Part { uvec2 part[]; };
layout(std430, binding = 3) coherent buffer Cnt { uint count[]; };
layout(push_constant) uniform PC { uint V, chunk, P, rows; } pc;
shared float bv[WG];
shared uint bi[WG];
shared uint is_last;
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

void main() {
  const uint tid = gl_LocalInvocationID.x, g = flat_group(), r = g / pc.P, c = g % pc.P;
  if (r >= pc.rows) return;  // (uniform per workgroup)
  const uint base = r * pc.V, end = min(pc.V, (c + 1u) * pc.chunk);
  float best = 0.0;
  uint besti = NONE;
  uint i = c * pc.chunk + tid;
  for (; i + 3u * WG < end; i += 4u * WG) {
    const vec4 v = vec4(LOADF(x, X16, base + i), LOADF(x, X16, base + i + WG),
                        LOADF(x, X16, base + i + 2u * WG), LOADF(x, X16, base + i + 3u * WG));
    take(best, besti, v.x, i);
    take(best, besti, v.y, i + WG);
    take(best, besti, v.z, i + 2u * WG);
    take(best, besti, v.w, i + 3u * WG);
  }
  for (; i < end; i += WG) take(best, besti, LOADF(x, X16, base + i), i);
  reduce(best, besti);
  if (tid == 0u) part[g] = uvec2(floatBitsToUint(bv[0]), bi[0]);
  // The last of the row's workgroups merges (the partials in chunk order: the lowest index on
  // ties).
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) is_last = atomicAdd(count[r], 1u) == pc.P - 1u ? 1u : 0u;
  barrier();
  if (is_last == 0u) return;
  memoryBarrierBuffer();
  best = 0.0;
  besti = NONE;
  for (uint k = tid; k < pc.P; k += WG)
    take(best, besti, uintBitsToFloat(part[r * pc.P + k].x), part[r * pc.P + k].y);
  reduce(best, besti);
  if (tid == 0u) {
    out_id[r] = int(bi[0]);
    count[r] = 0u;
  }
}
