#version 450
// rope: rotate-half rotary embedding on the first R dims of each head at position pos + t.
// cs holds [max_ctx][R/2] pairs (cos * a, sin * a) computed on the host exactly as the CPU
// reference computes them, so the GPU result is bit-comparable; longrope ops append a second such
// table, used by forwards that reach past orig positions. Dims >= R are copied.
#include "common.glsl"
#include "rope.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool Y16 = false;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer CS { vec2 cs[]; };
DECL_FBUF(2, y, writeonly)
#ifdef VKLLM_BATCH  // a batched forward: row t at position brow[4 t], its sequence's last brow[4 t + 2]
layout(std430, binding = 3) readonly buffer ROWS { uint brow[]; };
#else
DECL_STEP(3)
#endif
layout(push_constant) uniform PC { uint T, H, hd, R, total, orig, ctx; } pc;

void main() {
  const uint idx = flat_group() * WG + gl_LocalInvocationID.x;
  if (idx >= pc.total) return;
  const uint half_r = pc.R / 2u, per_head = pc.hd - half_r;
  const uint j = idx % per_head, th = idx / per_head;  // th = t * H + h
  const uint t = th / pc.H;
  const uint base = th * pc.hd;
  if (j < half_r) {
#ifdef VKLLM_BATCH
    const vec2 c = cs[rope_at(brow[t * 4u], brow[t * 4u + 2u], pc.orig, pc.ctx, half_r, j)];
#else
    const vec2 c = cs[rope_at(step_pos + t, step_pos + pc.T - 1u, pc.orig, pc.ctx, half_r, j)];
#endif
    const float a = LOADF(x, X16, base + j), b = LOADF(x, X16, base + j + half_r);
    STOREF(y, Y16, base + j, rope_dim(true, a, b, c));
    STOREF(y, Y16, base + j + half_r, rope_dim(false, a, b, c));
  } else {
    const uint d = j + half_r;  // R .. hd-1
    STOREF(y, Y16, base + d, LOADF(x, X16, base + d));
  }
}
