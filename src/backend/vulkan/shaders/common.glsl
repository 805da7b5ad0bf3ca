// Shared declarations for every vkllm compute shader.
// Activations, KV caches and float weights may be stored as fp32 or fp16. A module compiled with
// VKLLM_F16 declares each such binding twice (an fp32 view and an fp16 view of the same buffer)
// and a specialization constant per binding picks the view; without VKLLM_F16 only the fp32 view
// exists, so the module needs no 16-bit capability. Arithmetic is always fp32; an fp16 store
// rounds to nearest even.
#extension GL_EXT_control_flow_attributes : enable
#ifdef VKLLM_F16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define DECL_FBUF(B, NAME, QUAL)                                             \
  layout(std430, binding = B) QUAL buffer NAME##_F { float NAME##_f[]; }; \
  layout(std430, binding = B) QUAL buffer NAME##_H { float16_t NAME##_h[]; };
#define LOADF(NAME, IS16, I) ((IS16) ? float(NAME##_h[I]) : NAME##_f[I])
#define STOREF(NAME, IS16, I, V)          \
  {                                       \
    if (IS16)                             \
      NAME##_h[I] = float16_t(V);         \
    else                                  \
      NAME##_f[I] = (V);                  \
  }
#else
#define DECL_FBUF(B, NAME, QUAL) layout(std430, binding = B) QUAL buffer NAME##_F { float NAME##_f[]; };
#define LOADF(NAME, IS16, I) (NAME##_f[I])
#define STOREF(NAME, IS16, I, V) \
  { NAME##_f[I] = (V); }
#endif
// Four values a load: an fp32 view (four floats a word) and an fp16 one (four halves a word pair)
// of binding B, read as a vec4 at index I4 (of a multiple of four values).
#define DECL_VIEW4(B, NAME)                                                     \
  layout(std430, binding = B) readonly buffer NAME##_V4 { uvec4 NAME##_v4[]; }; \
  layout(std430, binding = B) readonly buffer NAME##_V2 { uvec2 NAME##_v2[]; };
#define LOAD4(NAME, IS16, I4)                                                          \
  ((IS16) ? vec4(unpackHalf2x16(NAME##_v2[I4].x), unpackHalf2x16(NAME##_v2[I4].y)) \
          : uintBitsToFloat(NAME##_v4[I4]))
// x as a binding of that dtype stores it (rounded to fp16 where f16).
float round_to(bool f16, float x) {
#ifdef VKLLM_F16
  if (f16) return float(float16_t(x));
#endif
  return x;
}

// The cache row of key position j in KV caches of `rows` rows: a sliding-window layer's ring holds
// position j at row j % rows; caches of the whole context (rows above every position) are the
// identity (docs/ir.md "KV caches").
uint kv_row(uint j, uint rows) { return j < rows ? j : j % rows; }

// 1 / sqrt(mean + eps) of a row of n values whose squares sum to ss: the RMS norm's scale, for
// every kernel that norms (rms_norm.glsl, norm_quant_prologue.glsl, the attention kernels, the
// decode chain). The mean and eps are added apart (precise), as the CPU reference adds them: a
// device may otherwise fuse them into one multiply-add where n is a compile-time constant, and so
// round each kernel's norm differently (docs/portability.md, "Contraction").
float rms_inv(float ss, uint n, float eps) {
  precise float ms = ss / float(n) + eps;
  return 1.0 / sqrt(ms);
}

// GeGLU's product gelu_tanh(x) * u (Gemma's MLP; geglu.comp and the decode chain's GeGLU
// epilogue), with gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp32 in the
// CPU reference's order and tanh(z) as 1 - 2 / (exp(2z) + 1), which saturates to +-1 instead of
// overflowing. Every step precise: no device contracts it differently in either kernel.
float geglu_of(float x, float u) {
  precise float inner = 0.7978845608028654 * (x + 0.044715 * (x * x * x));
  precise float th = 1.0 - 2.0 / (exp(2.0 * inner) + 1.0);
  precise float y = 0.5 * x * (1.0 + th) * u;
  return y;
}

#ifndef WG
#define WG 64
#endif
#ifndef WG_SPEC  // (an includer with WG_SPEC declares its workgroup size as a specialization constant)
layout(local_size_x = WG) in;
#endif

// The forward's first position (the executor writes it before each forward, so that recorded
// command buffers replay at any position).
#define DECL_STEP(B) layout(std430, binding = B) readonly buffer STEP { uint step_pos; };

// Large dispatches are split over x and y (x <= 65535); this is the flat workgroup index.
uint flat_group() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// Byte i of a buffer viewed as uint words (little-endian).
#define BYTE_AT(BUF, I) ((BUF[(I) >> 2] >> (((I) & 3u) * 8u)) & 255u)

// Four nibbles as stored (q + 8, one a byte in the low four bits) as four int8: per byte
// (n | 0x80) - 8 = 120 + n in [120, 135], then the top bit flipped: n - 8.
uint widen_nibbles(uint n) { return ((n | 0x80808080u) - 0x08080808u) ^ 0x80808080u; }
// Four consecutive int4 nibbles (stored as q + 8) starting at an even byte offset, as four signed
// int8 packed into one int (element 0 in the low byte).
int nibbles4_to_i8x4(uint h16) {
  uint b = (h16 & 0xFu) | ((h16 & 0xF0u) << 4) | ((h16 & 0xF00u) << 8) | ((h16 & 0xF000u) << 12);
  return int(widen_nibbles(b));
}

// The tiled GEMMs' exact float(x) of a group's x = dot - zp * wsum (linear_8da4w_mm*.comp): its
// integer sums start at kMagic - zp * wsum and end at kMagic + x, the bits of the float
// 1.5 * 2^23 + x exactly while |x| < 2^22, so float(x) is one subtraction.
const int kMagic = 0x4B400000;  // 1.5 * 2^23
float exact_float(int magic_plus_x) {
  precise float f = uintBitsToFloat(uint(magic_plus_x)) - 12582912.0;
  return f;
}
