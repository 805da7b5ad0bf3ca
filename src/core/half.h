// fp16 / bf16 <-> fp32 conversions (round to nearest even), bit-exact with IEEE / torch.
#pragma once
#include <cstdint>
#include <cstring>

namespace vkllm {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t h) {
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    float f = static_cast<float>(man) * (1.0f / 16777216.0f);  // subnormal: man * 2^-24
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (a < 0x38800000u) {                                               // subnormal or zero
    // value = a as float; result = round(value / 2^-24)
    float v = bits_to_f32(a);
    float scaled = v * 16777216.0f;  // exact (power of two)
    uint32_t r = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(r);
    if (rem > 0.5f || (rem == 0.5f && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t e = ((a >> 23) - 112) << 10;
  uint32_t m = (a >> 13) & 0x3ffu;
  uint32_t rest = a & 0x1fffu;
  uint32_t h = e | m;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// Round a float through fp16 storage (used to mirror fp16 activations on the CPU).
inline float round_f16(float f) {
  return f16_to_f32(f32_to_f16(f));
}

}  // namespace vkllm
