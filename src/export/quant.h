// Weight quantization of the recipes (docs/design.md section 2, torchao's definitions) and the
// DType::Q4 packing of docs/ir.md.
#pragma once
#include <cstdint>

namespace vkllm {

// Symmetric int4 of one group: scale = max|w| / 7.5 (clamped to FLT_EPSILON, torchao's eps for
// float32, so an all-zero group gets a tiny positive scale and all-zero q);
// q = clamp(round_half_even(w / scale), -8, 7).
float int4_group_scale(const float* w, int64_t n);
int int4_quantize_value(float w, float scale);

// Quantizes a row-major [rows, cols] matrix per group of `group` consecutive columns
// (cols % group == 0). Writes Q4-packed rows (rows padded to whole bytes) into packed
// (rows * ((cols+1)/2) bytes), the scales [rows, cols/group] and, when wsum is not null, the
// per-group sums of q [rows, cols/group] (the 8da4w zero-point correction).
void quantize_int4_rows(const float* w, int64_t rows, int64_t cols, int64_t group, uint8_t* packed,
                        float* scales, int32_t* wsum);

// Q4 packing of one row of int4 values in [-8, 7]: nibble q + 8, element 2i in the low nibble.
void pack_q4_row(const int8_t* q, int64_t cols, uint8_t* out);
void unpack_q4_row(const uint8_t* packed, int64_t cols, int8_t* q);

}  // namespace vkllm
