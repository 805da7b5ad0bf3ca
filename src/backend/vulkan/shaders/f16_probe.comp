#version 450
// How this device rounds fp32 to fp16 (vk_probe.cpp probe_f16_rounding). Binding 0 holds n fp32
// bit patterns followed by 2n words the probe writes: for input i, common.glsl's f16_round(x) at
// n + i and the pair of conversions float(float16_t(x)) at 2n + i; binding 1 (n halves) receives
// float16_t(x) as a store converts it. One workgroup strides over every input. The host runs the
// _f16 module; the other (no 16-bit types) converts with packHalf2x16 instead.
layout(local_size_x = 64) in;
#include "common.glsl"
layout(std430, binding = 0) buffer IO { uint io[]; };
#ifdef VKLLM_F16
layout(std430, binding = 1) writeonly buffer H { float16_t h[]; };
#define STORE_HALF(I, X) h[I] = float16_t(X)
#define CONVERSION_PAIR(X) float(float16_t(X))
#else
layout(std430, binding = 1) writeonly buffer H { uint h[]; };
#define STORE_HALF(I, X) h[I] = packHalf2x16(vec2(X, 0.0))
#define CONVERSION_PAIR(X) unpackHalf2x16(packHalf2x16(vec2(X, 0.0))).x
#endif

void main() {
  const uint n = uint(io.length()) / 3u;
  for (uint i = gl_LocalInvocationID.x; i < n; i += 64u) {
    const float x = uintBitsToFloat(io[i]);
    io[n + i] = floatBitsToUint(f16_round(x));
    io[2u * n + i] = floatBitsToUint(CONVERSION_PAIR(x));
    STORE_HALF(i, x);
  }
}
