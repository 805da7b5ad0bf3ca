#version 450
// argmax: index of the maximum of x[0 .. V) (lowest index on ties), in one dispatch: workgroup g
// takes the chunk [g * chunk, (g + 1) * chunk) with 256 threads, four independent loads at a time,
// and writes its best (value bits, index) to part[g]; the last workgroup to finish (a counter, as
// the decode attention's split merge) merges the P partials into out_id and resets the counter.
// (One workgroup over a 128k vocabulary would walk 2,000 dependent loads per thread.)
// It also ends the decode step (what the host would otherwise do between two greedy steps of one
// submit): the token becomes the next step's input ids[0] and the submit's token step_n (tokens,
// read back once per submit), and the position advances. The host writes the step buffer (pos,
// 0) before every submit, so a forward that is not followed by another in its submit leaves
// nothing behind that the next one reads.
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) coherent buffer P { uvec2 part[]; };
layout(std430, binding = 2) writeonly buffer Out { int out_id[]; };
layout(std430, binding = 3) coherent buffer Cnt { uint count; };
layout(std430, binding = 4) buffer Step { uint step_pos, step_n; };
layout(std430, binding = 5) writeonly buffer Ids { int ids[]; };
layout(std430, binding = 6) writeonly buffer Tok { int tokens[]; };
layout(push_constant) uniform PC { uint V, chunk, P, ntok; } pc;
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
  // The last workgroup to finish merges (the partials in chunk order: the lowest index on ties).
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) is_last = atomicAdd(count, 1u) == pc.P - 1u ? 1u : 0u;
  barrier();
  if (is_last == 0u) return;
  memoryBarrierBuffer();
  best = 0.0;
  besti = NONE;
  for (uint k = tid; k < pc.P; k += WG) take(best, besti, uintBitsToFloat(part[k].x), part[k].y);
  reduce(best, besti);
  if (tid == 0u) {
    const int tok = int(bi[0]);
    out_id[0] = tok;
    ids[0] = tok;
    const uint n = step_n;
    if (n < pc.ntok) tokens[n] = tok;
    step_n = n + 1u;
    step_pos = step_pos + 1u;
    count = 0u;
  }
}
