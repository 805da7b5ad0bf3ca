// Int4 quantization (docs/design.md section 2) against hand-computed cases, and the Q4 packing of
// docs/ir.md against the CPU backend's independent nibble reader.
#include <gtest/gtest.h>

#include <cfloat>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "export/quant.h"

using namespace vkllm;

TEST(Quant, HandComputedTiesAndExtremes) {
  // max|w| = 15 -> scale = 15 / 7.5 = 2 exactly; w / 2 lands on the halves below.
  const std::vector<float> w = {-15, 15, 1, 3, 5, -1, -3, 0.9f};
  // -7.5 -> -8 (even), 7.5 -> 8 -> clamped to 7, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0, -1.5 ->
  // -2, 0.45 -> 0
  const std::vector<int8_t> want = {-8, 7, 0, 2, 2, 0, -2, 0};
  uint8_t packed[4];
  float scale;
  int32_t sum;
  quantize_int4_rows(w.data(), 1, 8, 8, packed, &scale, &sum);
  EXPECT_EQ(scale, 2.0f);
  std::vector<int8_t> q(8);
  unpack_q4_row(packed, 8, q.data());
  EXPECT_EQ(q, want);
  EXPECT_EQ(sum, -8 + 7 + 0 + 2 + 2 + 0 - 2 + 0);
  // Nibbles q + 8, element 2i low: (-8, 7) -> 0x0, 0xF -> byte 0xF0.
  EXPECT_EQ(packed[0], 0xF0);
  EXPECT_EQ(packed[1], 0xA8);  // (0, 2) -> low 0x8, high 0xA
  EXPECT_EQ(packed[2], 0x8A);  // (2, 0) -> low 0xA, high 0x8
}

TEST(Quant, NegativeMaximumMapsToMinus8) {
  // The largest magnitude is negative: -7.5 * s -> -8, the positive side stays in range.
  const std::vector<float> w = {-30, 12, 6, -2};  // scale 4: -7.5, 3, 1.5, -0.5
  uint8_t packed[2];
  float scale;
  quantize_int4_rows(w.data(), 1, 4, 4, packed, &scale, nullptr);
  EXPECT_EQ(scale, 4.0f);
  std::vector<int8_t> q(4);
  unpack_q4_row(packed, 4, q.data());
  EXPECT_EQ(q, (std::vector<int8_t>{-8, 3, 2, 0}));
}

TEST(Quant, AllZeroGroupGetsEpsScale) {
  // Two groups per row: the first all zero (scale clamped to FLT_EPSILON, as torchao's eps), the
  // second with max 7.5 (scale 1).
  const std::vector<float> w = {0, 0, 0, 0, 7.5f, -1, 0.5f, 2.5f};
  uint8_t packed[4];
  float scales[2];
  int32_t sums[2];
  quantize_int4_rows(w.data(), 1, 8, 4, packed, scales, sums);
  EXPECT_EQ(scales[0], FLT_EPSILON);
  EXPECT_EQ(scales[1], 1.0f);
  std::vector<int8_t> q(8);
  unpack_q4_row(packed, 8, q.data());
  EXPECT_EQ(q, (std::vector<int8_t>{0, 0, 0, 0, 7, -1, 0, 2}));
  EXPECT_EQ(sums[0], 0);
  EXPECT_EQ(sums[1], 8);
  // Tiny but non-zero values in a group still get a positive scale.
  const float tiny[2] = {1e-30f, -1e-30f};
  float s2;
  uint8_t p2;
  quantize_int4_rows(tiny, 1, 2, 2, &p2, &s2, nullptr);
  EXPECT_EQ(s2, FLT_EPSILON);
}

TEST(Quant, OddColumnsPadRows) {
  // 3 columns: each row takes 2 bytes, the last high nibble is padding (0).
  const std::vector<float> w = {7.5f, -7.5f, 0, 0, 1, -1};  // group 3, 2 rows
  uint8_t packed[4];
  float scales[2];
  quantize_int4_rows(w.data(), 2, 3, 3, packed, scales, nullptr);
  EXPECT_EQ(scales[1], 1.0f / 7.5f);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      const int q = cpu::q4_get(packed, 3, r, c);
      EXPECT_EQ(q, int4_quantize_value(w[r * 3 + c], scales[r])) << r << "," << c;
    }
  EXPECT_EQ(packed[1] >> 4, 0);
  EXPECT_EQ(packed[3] >> 4, 0);
  EXPECT_EQ(cpu::q4_get(packed, 3, 0, 0), 7);
  EXPECT_EQ(cpu::q4_get(packed, 3, 0, 1), -8);
}

TEST(Quant, PackUnpackRoundTrip) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-8, 7);
  for (int64_t n : {1, 2, 3, 7, 32, 33, 128, 1001}) {
    std::vector<int8_t> q(n), back(n);
    for (auto& v : q) v = static_cast<int8_t>(d(rng));
    std::vector<uint8_t> packed((n + 1) / 2);
    pack_q4_row(q.data(), n, packed.data());
    unpack_q4_row(packed.data(), n, back.data());
    EXPECT_EQ(q, back) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(cpu::q4_get(packed.data(), n, 0, i), q[i]);
  }
}

TEST(Quant, RandomMatrixMatchesFormula) {
  // Independent per-element check in double precision: |w - q s| <= s/2 except at the clamped +7.5
  // edge; q in range; scale = max|w| / 7.5 of the group.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const int64_t R = 5, C = 96, G = 32;
  std::vector<float> w(R * C);
  for (auto& v : w) v = nd(rng);
  std::vector<uint8_t> packed(R * C / 2);
  std::vector<float> s(R * C / G);
  std::vector<int32_t> sums(R * C / G);
  quantize_int4_rows(w.data(), R, C, G, packed.data(), s.data(), sums.data());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < C / G; ++g) {
      double mx = 0;
      int sum = 0;
      for (int64_t k = g * G; k < (g + 1) * G; ++k)
        mx = std::max(mx, std::fabs(double(w[r * C + k])));
      const float sc = s[r * (C / G) + g];
      EXPECT_NEAR(sc, mx / 7.5, 1e-6 * mx);
      for (int64_t k = g * G; k < (g + 1) * G; ++k) {
        const int q = cpu::q4_get(packed.data(), C, r, k);
        sum += q;
        ASSERT_GE(q, -8);
        ASSERT_LE(q, 7);
        const double err = std::fabs(double(w[r * C + k]) - double(q) * sc);
        if (q != 7) {
          EXPECT_LE(err, sc * 0.5 * (1 + 1e-5));
        } else {
          EXPECT_LE(err, sc * 0.5 * (1 + 1e-5) + sc);
        }
      }
      EXPECT_EQ(sum, sums[r * (C / G) + g]);
    }
}

TEST(Quant, BadGroupIsAnError) {
  float w[6] = {};
  uint8_t p[3];
  float s[2];
  EXPECT_THROW(quantize_int4_rows(w, 1, 6, 4, p, s, nullptr), Error);
  EXPECT_THROW(quantize_int4_rows(w, 1, 6, 0, p, s, nullptr), Error);
}
