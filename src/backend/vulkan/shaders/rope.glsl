// The rotate-half rotary embedding (the rope op), one head dim at a time, for every kernel that
// rotates: rope.comp, the decode attention's prologue (attention_decode.glsl) and the prefill
// attention run's q loads and KV store (attention_prefill*.comp, attention.comp). One expression
// for all of them, so that they round alike.
// The table (vk_ops.cpp rope_table): [max_ctx][R / 2] pairs (cos * a, sin * a), then the long
// table's (longrope) for forwards that reach past orig positions.

#ifndef VKLLM_ROPE_GLSL
#define VKLLM_ROPE_GLSL

// The table index of pair i (< R / 2) at position p, in a forward whose last position is last.
uint rope_at(uint p, uint last, uint orig, uint ctx, uint half_r, uint i) {
  return ((last + 1u > orig ? ctx : 0u) + p) * half_r + i;
}
// Dim j of a rotated row, j < R: with i = j mod R / 2, a = x[i] and b = x[i + R / 2], and c the
// table's pair of i. Precise: two products rounded, then their sum, as the CPU reference computes
// it; a device that contracts one product and the sum into a fused multiply-add (NVIDIA does,
// choosing which product per kernel) would round differently in each kernel.
float rope_dim(bool first_half, float a, float b, vec2 c) {
  precise float r = first_half ? a * c.x - b * c.y : b * c.x + a * c.y;
  return r;
}
#endif
