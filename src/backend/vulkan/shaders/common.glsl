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
// x rounded to the nearest fp16 value (ties to even, subnormals kept, overflow to infinity),
// as core/half.h's round_f16, in integer operations on the bits. Not float(float16_t(x)): a
// driver may drop that pair of conversions and keep x in fp32 (NVIDIA's does), so a value the
// source rounds and then reuses would differ from the same value stored and loaded again.
float f16_round(float x) {
  const uint u = floatBitsToUint(x), s = u & 0x80000000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return x;                                  // NaN
  if (a >= 0x477FF000u) return uintBitsToFloat(s | 0x7F800000u);  // 65520 and above: infinity
  if (a >= 0x38800000u)  // 2^-14 and above (normal fp16): the low 13 significand bits rounded off
    return uintBitsToFloat(s | ((a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu));
  const uint e = a >> 23;  // below 2^-14: a multiple of 2^-24, the significand shifted by 126 - e
  if (e < 102u) return uintBitsToFloat(s);  // below 2^-25: zero
  const uint m = (a & 0x7FFFFFu) | 0x800000u, d = 126u - e, q = m >> d;
  const uint rem = m & ((1u << d) - 1u), mid = 1u << (d - 1u);
  const uint r = q + ((rem > mid || (rem == mid && (q & 1u) != 0u)) ? 1u : 0u);
  return uintBitsToFloat(s | floatBitsToUint(float(r) * 5.9604644775390625e-8));  // r * 2^-24
}

// x as a binding of that dtype stores it (rounded to fp16 where f16).
float round_to(bool f16, float x) { return f16 ? f16_round(x) : x; }

// The cache row of key position j in KV caches of `rows` rows: a sliding-window layer's ring holds
// position j at row j % rows; caches of the whole context (rows above every position) are the
// identity (docs/ir.md "KV caches").
uint kv_row(uint j, uint rows) { return j < rows ? j : j % rows; }

// The float of sign sgn, biased exponent e and rounded 24-bit quotient q (2^23 <= q <= 2^24; q =
// 2^24 carries into the exponent), flushed to a signed zero below the normal range and to infinity
// above it: the last step of div_rn and div_rn_255.
float div_result(uint sgn, int e, uint q) {
  if (q == 0x1000000u) {
    q >>= 1;
    e += 1;
  }
  if (e >= 255) return uintBitsToFloat(sgn | 0x7F800000u);
  if (e <= 0) return uintBitsToFloat(sgn);
  return uintBitsToFloat(sgn | (uint(e) << 23) | (q & 0x7FFFFFu));
}

// Correctly rounded a / b for a normal b > 0, from the significands: an estimate of the 24-bit
// quotient q = floor(ma * 2^23 / mb) from a reciprocal refined by two Newton steps (within a few
// units whatever the device's division), then its exact remainder ma * 2^23 - q * mb in 32-bit
// integers (wrapping: the true remainder is far below 2^31), q corrected until the remainder lies
// in [0, mb), and rounded up when more than half of mb is left (a quotient is never exactly
// halfway). No fma is needed (Vulkan does not require it to be fused). Quotients below the normal
// range come back as a signed zero: every caller here either rounds them to an integer (0) or
// raises them to FLT_EPSILON, exactly as the CPU does with the subnormal. (The former bit-by-bit
// long division took ~700 SM cycles on the H200, measured.)
float div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b), sgn = ua & 0x80000000u;
  const int ea = int((ua >> 23) & 255u), eb = int((ub >> 23) & 255u);
  if (ea == 255 || eb == 255 || eb == 0) return a / b;  // inf, nan: as the hardware does
  if (ea == 0) return uintBitsToFloat(sgn);             // zero or subnormal dividend
  uint ma = (ua & 0x7FFFFFu) | 0x800000u;
  const uint mb = (ub & 0x7FFFFFu) | 0x800000u;
  int e = ea - eb + 127;
  if (ma < mb) {
    ma <<= 1;  // (even, so float(ma) stays exact)
    e -= 1;
  }
  const float fa = float(ma), fb = float(mb);
  float r = 1.0 / fb;
  r = r * (2.0 - fb * r);
  r = r * (2.0 - fb * r);
  uint q = uint(fa * r * 8388608.0);
  int rem = int((ma << 23) - q * mb);
  while (rem < 0) {
    q -= 1u;
    rem += int(mb);
  }
  while (rem >= int(mb)) {
    q += 1u;
    rem -= int(mb);
  }
  if (2 * rem > int(mb)) q += 1u;
  return div_result(sgn, e, q);
}

// Correctly rounded sqrt(x) for a normal x > 0 (others: the device's sqrt, which Vulkan lets be a
// few ulp off): x = X 2^(2k) with X = m << s (m the 24-bit significand, s 23 or 24 so that the
// exponent is even); the result's significand r = round(sqrt(X)), in [2^23, 2^24], starts from the
// device's estimate and moves until (2r - 1)^2 <= 4X < (2r + 1)^2, the squares exact in 64 bits
// (umulExtended; 4X is even, so never equal to an odd square).
bool less64(uvec2 a, uvec2 b) { return a.x < b.x || (a.x == b.x && a.y < b.y); }
uvec2 square64(uint v) {
  uvec2 r;
  umulExtended(v, v, r.x, r.y);
  return r;
}
float sqrt_rn(float x) {
  const uint ux = floatBitsToUint(x);
  const int ex = int((ux >> 23) & 255u);
  if (ex == 0 || ex == 255 || (ux >> 31) != 0u) return sqrt(x);
  const uint m = (ux & 0x7FFFFFu) | 0x800000u;
  const int s = (ex & 1) == 0 ? 24 : 23, sh = s + 2;
  const uvec2 x4 = uvec2(m >> (32 - sh), m << sh);  // 4X
  uint r = uint(roundEven(sqrt(float(m) * exp2(float(s)))));
  for (int i = 0; i < 4; ++i) {
    if (less64(x4, square64(2u * r - 1u))) {
      r -= 1u;
    } else if (!less64(x4, square64(2u * r + 1u))) {
      r += 1u;
    } else {
      break;
    }
  }
  int e = (ex - 150 - s) / 2 + 150;
  if (r == 0x1000000u) {
    r >>= 1;
    e += 1;
  }
  return uintBitsToFloat((uint(e) << 23) | (r & 0x7FFFFFu));
}

// 1 / sqrt(mean + eps) of a row of n values whose squares sum to ss: the RMS norm's scale, for
// every kernel that norms (rms_norm.glsl, norm_quant_prologue.glsl, the attention kernels, the
// decode chain). Each step correctly rounded, as the CPU reference's (ss / n, + eps, sqrt, 1 /):
// Vulkan lets a device's division be 2.5 ulp and its sqrt a few ulp off, and a compiler lower them
// differently in each kernel (NVIDIA's 1 / sqrt as an approximate rsqrt in some), so a fused
// kernel's norm could differ from the unfused op's; the mean and eps are added apart (precise),
// as a device may otherwise fuse them where n is a compile-time constant (docs/portability.md,
// "Contraction").
float rms_inv(float ss, uint n, float eps) {
  precise float ms = div_rn(ss, float(n)) + eps;
  return div_rn(1.0, sqrt_rn(ms));
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
