#include "export/quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace vkllm {

float int4_group_scale(const float* w, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  // torchao: max_val_pos / ((quant_max - quant_min) / 2), then clamp(scale, min=eps).
  return std::max(m / 7.5f, FLT_EPSILON);
}

int int4_quantize_value(float w, float scale) {
  // nearbyint rounds half to even in the default floating-point environment (torch.round).
  const float r = std::nearbyint(w / scale);
  return static_cast<int>(std::clamp(r, -8.0f, 7.0f));
}

void pack_q4_row(const int8_t* q, int64_t cols, uint8_t* out) {
  for (int64_t i = 0; i < cols; i += 2) {
    const unsigned lo = static_cast<unsigned>(q[i] + 8) & 15u;
    const unsigned hi = i + 1 < cols ? static_cast<unsigned>(q[i + 1] + 8) & 15u : 0u;
    out[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void unpack_q4_row(const uint8_t* packed, int64_t cols, int8_t* q) {
  for (int64_t i = 0; i < cols; ++i) {
    const uint8_t b = packed[i / 2];
    q[i] = static_cast<int8_t>(static_cast<int>((i & 1) ? (b >> 4) : (b & 15)) - 8);
  }
}

void quantize_int4_rows(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* packed,
                        float* scales, int32_t* wsum) {
  if (group <= 0 || cols % group != 0)
    fail("int4 quantization: {} columns are not a multiple of the group {}", cols, group);
  const int64_t ng = cols / group, row_bytes = (cols + 1) / 2;
  std::vector<int8_t> q(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    for (int64_t g = 0; g < ng; ++g) {
      const float s = int4_group_scale(wr + g * group, group);
      int32_t sum = 0;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) {
        q[static_cast<size_t>(k)] = static_cast<int8_t>(int4_quantize_value(wr[k], s));
        sum += q[static_cast<size_t>(k)];
      }
      scales[r * ng + g] = s;
      if (wsum) wsum[r * ng + g] = sum;
    }
    pack_q4_row(q.data(), cols, packed + r * row_bytes);
  }
}

}  // namespace vkllm
