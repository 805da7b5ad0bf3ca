// Per-op consistency of the Vulkan kernels against the CPU reference kernels (backend/cpu):
// random inputs (never zeros), outputs poisoned with NaN before each run, sizes that are not
// multiples of the workgroup sizes, the validation layer on. Thresholds: docs/vulkan.md.
#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "backend/vulkan/vk_ops_internal.h"
#include "backend/vulkan/vk_probe.h"
#include "testutil/op_tolerance.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

// NMSE bounds by op kind and output dtype, from measurement (tests/testutil/op_tolerance.h).
constexpr double kElem = testutil::kElemNmse;       // fp32 elementwise (and exact gathers)
constexpr double kNorm = testutil::kNormNmse;       // rms_norm
constexpr double kMat = testutil::kLinearNmse;      // linear
constexpr double kAttn = testutil::kAttentionNmse;  // attention
constexpr double kF16Out = testutil::kF16OutNmse;   // any op whose output is stored as fp16
using TK = TensorKind;

// Each checked NMSE is printed with its bound ("[nmse] test value bound"): the measurements
// of docs/gates.md, "Per-op bounds".
double logged(double e, double bound) {
  const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[nmse] %s %.3g %.3g\n", t ? t->name() : "?", e, bound);
  return e;
}

std::vector<int32_t> rand_ids(std::mt19937& rng, int T, int64_t V) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& i : ids) i = d(rng);
  ids[0] = 0;
  if (T > 1) ids[1] = static_cast<int32_t>(V - 1);
  return ids;
}

std::vector<uint8_t> rand_q4(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> q(static_cast<size_t>(rows * ((cols + 1) / 2)));
  for (auto& b : q) b = static_cast<uint8_t>(d(rng));
  return q;
}

// embedding / embedding_q4 with a table of `tdt`, output of `ydt`.
void check_embedding(DType tdt, DType ydt, int64_t V, int64_t D, int T, VulkanOptions opt = {}) {
  std::mt19937 rng(11);
  Case c;
  const auto ids = rand_ids(rng, T, V);
  c.p.input_ids = c.add("ids", DType::I32, TK::Input, {-1}, bytes_of(ids));
  std::vector<float> want(static_cast<size_t>(T * D));
  int32_t y = c.add("y", ydt, TK::Activation, {-1, D});
  if (tdt == DType::Q4) {
    const int64_t G = 32;
    auto q = rand_q4(rng, V, D);
    auto s = rand_vec(rng, static_cast<size_t>(V * D / G), 0.01f, 0.2f);
    cpu::embedding_q4(ids.data(), T, q.data(), s.data(), V, D, G, want.data());
    int32_t tq = c.add("tab", DType::Q4, TK::Weight, {V, D}, q);
    int32_t ts = c.add("scales", DType::F32, TK::Weight, {V, D / G}, bytes_f32(s));
    c.op("embedding_q4", {c.p.input_ids, tq, ts}, y, {{"group", G}});
  } else {
    auto tab = rand_vec(rng, static_cast<size_t>(V * D));
    if (tdt == DType::F16) {
      std::vector<uint16_t> h(tab.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(tab[i]);
      cpu::embedding_f16(ids.data(), T, h.data(), V, D, want.data());
    } else {
      cpu::embedding_f32(ids.data(), T, tab.data(), V, D, want.data());
    }
    int32_t t =
        c.add("tab", tdt, TK::Weight, {V, D}, tdt == DType::F16 ? bytes_f16(tab) : bytes_f32(tab));
    c.op("embedding", {c.p.input_ids, t}, y);
  }
  if (ydt == DType::F16) want = round_f16(want);
  OpRun r(c, T, opt);
  r.forward(T, 0);
  EXPECT_LE(logged(nmse(r.read(y, T), want), ydt == DType::F16 ? kF16Out : kElem),
            ydt == DType::F16 ? kF16Out : kElem);
  EXPECT_EQ(r.read(y, T), want);  // a gather is exact
}

TEST(VulkanOps, EmbeddingF32) {
  check_embedding(DType::F32, DType::F32, 300, 77, 7);
}
TEST(VulkanOps, EmbeddingF32ToF16) {
  check_embedding(DType::F32, DType::F16, 300, 77, 7);
}
TEST(VulkanOps, EmbeddingF16) {
  check_embedding(DType::F16, DType::F32, 300, 77, 7);
}
TEST(VulkanOps, EmbeddingQ4) {
  check_embedding(DType::Q4, DType::F32, 300, 96, 9);
}
TEST(VulkanOps, EmbeddingQ4ToF16) {
  check_embedding(DType::Q4, DType::F16, 300, 96, 9);
}

TEST(VulkanOps, EmbeddingChunkedBindings) {
  VulkanOptions o;
  o.max_binding_bytes = 4096;  // 12-row chunks of a 300-row table
  check_embedding(DType::F32, DType::F32, 300, 77, 7, o);
  check_embedding(DType::Q4, DType::F32, 300, 96, 9, o);
}

TEST(VulkanOps, EmbeddingLargerThanStorageBufferRange) {
  // Qwen3-0.6B's table: 151936 x 1024 f32 = 594 MiB, more than lavapipe's 128 MiB binding range.
  check_embedding(DType::F32, DType::F32, 151936, 1024, 5);
}

void check_rms_norm(int64_t N, int64_t G, int T, DType xdt, DType ydt) {
  std::mt19937 rng(static_cast<unsigned>(N + G));
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * N), -3, 3),
       w = rand_vec(rng, static_cast<size_t>(G), 0.5f, 1.5f);
  if (xdt == DType::F16) x = round_f16(x);
  int32_t tx =
      c.add("x", xdt, TK::Activation, {-1, N}, xdt == DType::F16 ? bytes_f16(x) : bytes_f32(x));
  int32_t tw = c.add("w", DType::F32, TK::Weight, {G}, bytes_f32(w));
  int32_t ty = c.add("y", ydt, TK::Activation, {-1, N});
  c.op("rms_norm", {tx, tw}, ty, {{"eps", 1e-6}, {"group", G}});
  std::vector<float> want(x.size());
  cpu::rms_norm(x.data(), T, N, w.data(), G, 1e-6f, want.data());
  if (ydt == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, 0);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), ydt == DType::F16 ? kF16Out : kNorm),
            ydt == DType::F16 ? kF16Out : kNorm);
}

TEST(VulkanOps, RmsNorm) {
  check_rms_norm(200, 200, 7, DType::F32, DType::F32);
  check_rms_norm(1000, 1000, 3, DType::F32, DType::F32);
}
// Per-head norms of forwards of several tokens take a subgroup a group (rms_norm.comp ROWS_SG),
// one-token forwards a workgroup: both against the CPU, Qwen3's shape (16 heads of 128) too.
TEST(VulkanOps, RmsNormPerHead) {
  for (int T : {1, 7}) check_rms_norm(200, 40, T, DType::F32, DType::F32);
  check_rms_norm(2048, 128, 20, DType::F16, DType::F16);
}
TEST(VulkanOps, RmsNormOddGroups) {
  check_rms_norm(202, 101, 3, DType::F32, DType::F32);
  check_rms_norm(3 * 7, 7, 2, DType::F16, DType::F16);
}
TEST(VulkanOps, RmsNormF16) {
  check_rms_norm(200, 40, 7, DType::F16, DType::F16);
}

// A last_row read only by the norm after it (the end of every forward) records nothing: the norm
// reads row T - 1 in place (vk_ops.cpp fuses_into_next). The output equals the CPU's norm of the
// last row, and the last_row's own output is never written (it keeps the harness's NaN poison).
TEST(VulkanOps, LastRowFusesIntoTheNorm) {
  for (DType dt : {DType::F32, DType::F16})
    for (int T : {1, 5}) {
      const int64_t N = 1000;
      std::mt19937 rng(static_cast<unsigned>(T));
      Case c;
      auto x = rand_vec(rng, static_cast<size_t>(T * N), -3, 3),
           w = rand_vec(rng, static_cast<size_t>(N), 0.5f, 1.5f);
      if (dt == DType::F16) x = round_f16(x);
      int32_t tx =
          c.add("x", dt, TK::Activation, {-1, N}, dt == DType::F16 ? bytes_f16(x) : bytes_f32(x));
      int32_t tl = c.add("last", dt, TK::Activation, {1, N});
      int32_t tw = c.add("w", DType::F32, TK::Weight, {N}, bytes_f32(w));
      int32_t ty = c.add("y", dt, TK::Activation, {1, N});
      c.op("last_row", {tx}, tl);
      c.op("rms_norm", {tl, tw}, ty, {{"eps", 1e-6}, {"group", N}});
      std::vector<float> want(static_cast<size_t>(N));
      cpu::rms_norm(x.data() + (T - 1) * N, 1, N, w.data(), N, 1e-6f, want.data());
      if (dt == DType::F16) want = round_f16(want);
      OpRun r(c, T);
      r.forward(T, 0);
      const double bound = dt == DType::F16 ? kF16Out : kNorm;
      EXPECT_LE(logged(nmse(r.read(ty, 1), want), bound), bound) << "T=" << T;
      for (float v : r.read(tl, 1)) ASSERT_TRUE(std::isnan(v)) << "last_row was not fused, T=" << T;
    }
}

// Activations: Normal; Wide: token rows scaled by powers of two from 2^-30 to 2^29, so the int8
// quantization's divisions see every kind of exponent; Halfway: every quotient x / scale within
// a few ulp of a rounding boundary k + 0.5 (the case a fast reciprocal path could get wrong).
enum class XDist { Normal, Wide, Halfway };
void check_linear(Lin kind, int64_t K, int64_t N, int T, DType act, VulkanOptions opt = {},
                  std::vector<float>* got_out = nullptr, XDist dist = XDist::Normal, int64_t G = 32,
                  std::vector<float>* want_out = nullptr) {
  std::mt19937 rng(static_cast<unsigned>(K * 31 + N + T));
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * K));
  if (dist == XDist::Wide)
    for (int t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) x[t * K + k] = std::ldexp(x[t * K + k], (t * 7) % 60 - 30);
  if (dist == XDist::Halfway)
    for (int t = 0; t < T; ++t) {
      // min and max fix the scale the quantizer will compute (as the CPU reference does)
      float* row = x.data() + t * K;
      const float lo = -std::ldexp(1.0f + 0.01f * static_cast<float>(t), t % 9 - 4),
                  hi = std::ldexp(1.5f + 0.013f * static_cast<float>(t), t % 7 - 3);
      row[0] = lo;
      row[1] = hi;
      const float sc = std::max((hi - lo) / 255.0f, 1.1920928955078125e-7f);
      for (int64_t k = 2; k < K; ++k) {
        const int m = static_cast<int>(rng() % 255) - 127;  // the boundary's integer part
        float v = static_cast<float>((static_cast<double>(m) + 0.5) * static_cast<double>(sc));
        for (int s = static_cast<int>(rng() % 7) - 3; s != 0; s += s > 0 ? -1 : 1)
          v = std::nextafter(v, s > 0 ? 1e30f : -1e30f);
        row[k] = std::clamp(v, lo, hi);
      }
    }
  if (act == DType::F16) x = round_f16(x);
  int32_t tx =
      c.add("x", act, TK::Activation, {-1, K}, act == DType::F16 ? bytes_f16(x) : bytes_f32(x));
  int32_t ty = c.add("y", act, TK::Activation, {-1, N});
  std::vector<float> want(static_cast<size_t>(T * N));
  if (kind == Lin::F32 || kind == Lin::F16) {
    auto w = rand_vec(rng, static_cast<size_t>(N * K));
    if (kind == Lin::F16) {
      std::vector<uint16_t> h(w.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(w[i]);
      cpu::linear_f16(x.data(), T, K, h.data(), N, want.data());
    } else {
      cpu::linear_f32(x.data(), T, K, w.data(), N, want.data());
    }
    DType wdt = kind == Lin::F16 ? DType::F16 : DType::F32;
    int32_t tw =
        c.add("w", wdt, TK::Weight, {N, K}, kind == Lin::F16 ? bytes_f16(w) : bytes_f32(w));
    c.op("linear", {tx, tw}, ty);
  } else {
    auto q = rand_q4(rng, N, K);
    auto s = rand_vec(rng, static_cast<size_t>(N * K / G), 0.01f, 0.1f);
    int32_t tq = c.add("wq", DType::Q4, TK::Weight, {N, K}, q);
    int32_t ts = c.add("ws", DType::F32, TK::Weight, {N, K / G}, bytes_f32(s));
    if (kind == Lin::Q4W) {
      cpu::linear_q4w(x.data(), T, K, q.data(), s.data(), N, G, want.data());
      c.op("linear_q4w", {tx, tq, ts}, ty, {{"group", G}});
    } else {
      std::vector<int32_t> ws(static_cast<size_t>(N * K / G), 0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) ws[n * (K / G) + k / G] += cpu::q4_get(q.data(), K, n, k);
      cpu::linear_8da4w(x.data(), T, K, q.data(), s.data(), ws.data(), N, G, want.data());
      int32_t tws = c.add("wsum", DType::I32, TK::Weight, {N, K / G}, bytes_of(ws));
      c.op("linear_8da4w", {tx, tq, ts, tws}, ty, {{"group", G}});
    }
  }
  if (act == DType::F16) want = round_f16(want);
  OpRun r(c, T, opt);
  r.forward(T, 0);
  auto got = r.read(ty, T);
  EXPECT_LE(logged(nmse(got, want), act == DType::F16 ? kF16Out : kMat),
            act == DType::F16 ? kF16Out : kMat)
      << "K=" << K << " N=" << N << " T=" << T;
  if (kind == Lin::A8W4) {  // the int8 quantization is bit-exact with the CPU's
    auto qx = r.read_bytes(r.env().act_q, static_cast<size_t>(T * K));
    auto qp = r.read_bytes(r.env().act_qp, static_cast<size_t>(T * 8));
    // A forward of at least GemmPlan::kTokens tokens runs the tiled GEMM where G % 32 == 0, and
    // its scratch holds each eight codes e0..e7 as e0 e2 e4 e6 e1 e3 e5 e7 (quant.glsl).
    const bool gemm_order = G % 32 == 0 && T >= static_cast<int>(vk::detail::GemmPlan::kTokens);
    std::vector<int8_t> cq(static_cast<size_t>(K)), natural(static_cast<size_t>(K));
    for (int t = 0; t < T; ++t) {
      float sx;
      int32_t zp;
      cpu::quantize_act_int8(x.data() + t * K, K, natural.data(), &sx, &zp);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = k % 8, to = gemm_order ? k - e + (e % 2) * 4 + e / 2 : k;
        cq[static_cast<size_t>(to)] = natural[static_cast<size_t>(k)];
      }
      float gsx;
      int32_t gzp;
      std::memcpy(&gsx, qp.data() + t * 8, 4);
      std::memcpy(&gzp, qp.data() + t * 8 + 4, 4);
      EXPECT_EQ(gsx, sx) << "token " << t;
      EXPECT_EQ(gzp, zp) << "token " << t;
      EXPECT_EQ(0, std::memcmp(cq.data(), qx.data() + t * K, static_cast<size_t>(K)))
          << "token " << t;
    }
  }
  if (got_out) *got_out = got;
  if (want_out) *want_out = want;
}

// The subgroups the device runs are the ones the kernels split their work by: full, lanes in order
// (vk_probe.h), at the workgroup sizes the kernels use.
TEST(VulkanOps, SubgroupsAreWhatTheKernelsAssume) {
  vk::Context ctx(validated());
  for (uint32_t wg : {64u, 256u}) {
    const vk::SubgroupLayout s = vk::probe_subgroups(ctx, wg);
    std::printf("subgroups: %s\n", s.describe().c_str());
    EXPECT_TRUE(s.full()) << s.describe();
    EXPECT_EQ(s.reported_size, ctx.info().subgroup_size);
  }
}

TEST(VulkanOps, LinearF32) {
  for (int T : {1, 5, 13}) check_linear(Lin::F32, 100, 77, T, DType::F32);
}
TEST(VulkanOps, LinearF16Weights) {
  for (int T : {1, 6}) check_linear(Lin::F16, 100, 77, T, DType::F32);
}
TEST(VulkanOps, LinearF16Activations) {
  check_linear(Lin::F16, 100, 77, 6, DType::F16);
}
// Forwards of at least GemmPlan::kTokens tokens run the float-activation linears as a tiled GEMM
// (linear_mm.comp: 64 tokens x 64 rows a workgroup, K in chunks of 16; fp16 activations and
// weights with K % 8 == 0 on fp16 cooperative matrices where the device has them,
// linear_mm_coopmat.comp, K in chunks of 64): sizes that are not multiples of the tile, several
// token tiles, fp16 weights and activations, int4 weights with groups that do not divide the chunk.
TEST(VulkanOps, LinearTiledGemmMatchesTheReference) {
  {
    vk::Context ctx(validated());
    std::printf("fp16 linear prefill GEMM path (K %% 8 == 0): %s\n",
                ctx.use_coopmat_f16() ? "cooperative matrix" : "portable");
  }
  check_linear(Lin::F16, 96, 77, 33, DType::F16);    // one chunk and a half
  check_linear(Lin::F16, 200, 130, 70, DType::F16);  // four chunks, two token and three row tiles
  for (int T : {16, 70}) {
    check_linear(Lin::F32, 100, 77, T, DType::F32);
    check_linear(Lin::F16, 72, 130, T, DType::F32);
    check_linear(Lin::Q4W, 96, 77, T, DType::F32);
    check_linear(Lin::Q4W, 200, 65, T, DType::F32, {}, nullptr, XDist::Normal, 8);
  }
  check_linear(Lin::F16, 100, 77, 33, DType::F16);
  check_linear(Lin::Q4W, 160, 45, 20, DType::F16);
  check_linear(Lin::F32, 90, 70, 20, DType::F32);  // K % 4 != 0: the loads one at a time
  check_linear(Lin::F16, 90, 70, 20, DType::F16);
  VulkanOptions o;
  o.max_binding_bytes = 4096;  // four row chunks of the weight, each its columns of y
  check_linear(Lin::F32, 56, 60, 16, DType::F32, o);
}
TEST(VulkanOps, LinearChunkedBindings) {
  VulkanOptions o;
  o.max_binding_bytes = 4096;  // 10-row chunks of the weight
  check_linear(Lin::F32, 100, 77, 5, DType::F32, o);
  check_linear(Lin::Q4W, 96, 77, 5, DType::F32, o);
  check_linear(Lin::A8W4, 96, 77, 5, DType::F32, o);
}
// The shader's correctly rounded division (integer long division) against the CPU's IEEE division
// on 64 x 2048 activations of every magnitude: scale, zero point and every int8 value bit-exact.
TEST(VulkanOps, Linear8da4wQuantizationIsBitExact) {
  check_linear(Lin::A8W4, 2048, 5, 64, DType::F32, {}, nullptr, XDist::Wide);
}
// The quantizer multiplies by the reciprocal and divides exactly only near a rounding boundary:
// activations whose quotients all lie within 3 ulp of k + 0.5 must still match the CPU bit for
// bit (a too-narrow boundary window fails here).
TEST(VulkanOps, Linear8da4wQuantizationAtRoundingBoundaries) {
  check_linear(Lin::A8W4, 2048, 5, 24, DType::F32, {}, nullptr, XDist::Halfway);
}
// Groups of 16 take the kernel's four-weights-at-a-time path (the 32-weight blocks need G % 32 ==
// 0).
TEST(VulkanOps, Linear8da4wGroupsOf16) {
  for (int T : {1, 6})
    check_linear(Lin::A8W4, 112, 45, T, DType::F32, {}, nullptr, XDist::Normal, 16);
  check_linear(Lin::Q4W, 112, 45, 3, DType::F32, {}, nullptr, XDist::Normal, 16);
}
// Groups of 128 (the recipes' default linear group): one scale for four 32-weight blocks.
TEST(VulkanOps, Linear8da4wGroupsOf128) {
  for (int T : {1, 6})
    check_linear(Lin::A8W4, 256, 45, T, DType::F32, {}, nullptr, XDist::Normal, 128);
  check_linear(Lin::A8W4, 128, 300, 1, DType::F32, {}, nullptr, XDist::Normal, 128);
}
// A norm whose output only linear_8da4w ops read quantizes its rows itself (rms_norm_quant) and
// the linears skip their quantization pass; an add right before a norm is computed by the norm's
// kernel (rms_norm_add_quant). Against the same program made unfusable (an add also reads the
// norm's output; an op between the add and the norm): the same values, int8 scratch and linear
// outputs, bit for bit; and the CPU reference within the matmul tolerance.
enum class Producer { Norm, AddNorm, Swiglu };
void check_fused_producer(Producer pr, DType act, int T) {
  const int64_t K = 256, N = 40, G = 32;
  std::vector<std::vector<uint8_t>> outs[2];
  for (int fused = 0; fused < 2; ++fused) {
    std::mt19937 rng(7);
    Case c;
    auto x = rand_vec(rng, static_cast<size_t>(T * K), -3, 3),
         x2 = rand_vec(rng, static_cast<size_t>(T * K), -3, 3),
         w = rand_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
    if (act == DType::F16) x = round_f16(x), x2 = round_f16(x2);
    auto enc = [&](const std::vector<float>& v) {
      return act == DType::F16 ? bytes_f16(v) : bytes_f32(v);
    };
    int32_t tx = c.add("x", act, TK::Activation, {-1, K}, enc(x));
    int32_t tx2 = c.add("x2", act, TK::Activation, {-1, K}, enc(x2));
    int32_t tw = c.add("w", DType::F32, TK::Weight, {K}, bytes_f32(w));
    int32_t th = c.add("h", act, TK::Activation, {-1, K});
    int32_t tsum = -1;
    std::vector<float> hn(x.size());  // the CPU's h
    std::vector<float> sum = x;
    if (pr == Producer::AddNorm) {
      tsum = c.add("s", act, TK::Activation, {-1, K});
      c.op("add", {tx, tx2}, tsum);
      if (!fused) c.op("add", {tx2, tx2}, c.add("between", act, TK::Activation, {-1, K}));
      cpu::add(x.data(), x2.data(), T * K, sum.data());
      if (act == DType::F16) sum = round_f16(sum);
    }
    if (pr == Producer::Swiglu) {
      c.op("swiglu", {tx, tx2}, th);
      cpu::swiglu(x.data(), x2.data(), T * K, hn.data());
    } else {
      c.op("rms_norm", {tsum >= 0 ? tsum : tx, tw}, th, {{"eps", 1e-6}, {"group", K}});
      cpu::rms_norm(sum.data(), T, K, w.data(), K, 1e-6f, hn.data());
    }
    if (act == DType::F16) hn = round_f16(hn);
    const size_t producer = c.p.ops.size() - 1;
    auto q = rand_q4(rng, N, K);
    auto sc = rand_vec(rng, static_cast<size_t>(N * K / G), 0.01f, 0.1f);
    std::vector<int32_t> ws(static_cast<size_t>(N * K / G), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ws[n * (K / G) + k / G] += cpu::q4_get(q.data(), K, n, k);
    int32_t tq = c.add("wq", DType::Q4, TK::Weight, {N, K}, q);
    int32_t ts = c.add("ws", DType::F32, TK::Weight, {N, K / G}, bytes_f32(sc));
    int32_t twsum = c.add("wsum", DType::I32, TK::Weight, {N, K / G}, bytes_of(ws));
    int32_t ty = c.add("y", act, TK::Activation, {-1, N});
    int32_t ty2 = c.add("y2", act, TK::Activation, {-1, N});
    c.op("linear_8da4w", {th, tq, ts, twsum}, ty, {{"group", G}});
    c.op("linear_8da4w", {th, tq, ts, twsum}, ty2, {{"group", G}});
    // Unfused: for the add, an op between it and the norm; otherwise another reader of h.
    if (!fused && pr != Producer::AddNorm)
      c.op("add", {th, th}, c.add("hh", act, TK::Activation, {-1, K}));
    OpRun r(c, T);
    const bool quant = fused || pr == Producer::AddNorm;
    // The producer quantizes only when fusable (its declared writes include the int8 scratch);
    // otherwise the first linear does, in a phase of its own before its mat-vec.
    auto writes_scratch = [&](const vk::PreparedOp& o) {
      const auto& ws0 = o.phases.front().writes;
      return std::find(ws0.begin(), ws0.end(), r.env().act_q.buf) != ws0.end();
    };
    EXPECT_EQ(writes_scratch(r.op(producer)), quant);
    EXPECT_EQ(r.op(producer + 1).phases.size() == 2 && writes_scratch(r.op(producer + 1)), !quant);
    EXPECT_EQ(r.op(producer + 2).phases.size(), 1u);
    if (pr == Producer::AddNorm) {
      EXPECT_EQ(r.op(0).fused_into_next, fused == 1);
    }
    r.forward(T, 0);
    outs[fused] = {r.read_bytes(r.env().act_q, static_cast<size_t>(T * K)),
                   r.read_bytes(r.env().act_qp, static_cast<size_t>(T * 8))};
    auto h = r.read(th, T), y = r.read(ty, T), y2 = r.read(ty2, T);
    outs[fused].push_back(bytes_f32(h));
    outs[fused].push_back(bytes_f32(y));
    if (tsum >= 0) outs[fused].push_back(bytes_f32(r.read(tsum, T)));
    EXPECT_EQ(y, y2) << "the second linear reads the same scratch";
    const double hb = act == DType::F16 ? kF16Out : pr == Producer::Swiglu ? kElem : kNorm;
    EXPECT_LE(logged(nmse(h, hn), hb), hb) << "fused=" << fused;
    // The linears against the CPU's on the device's own h: a device whose norm rounds an ulp
    // away from the CPU's (NVIDIA's rsqrt) flips int8 codes, which is the norm's matter, not
    // theirs.
    std::vector<float> want(static_cast<size_t>(T * N));
    cpu::linear_8da4w(h.data(), T, K, q.data(), sc.data(), ws.data(), N, G, want.data());
    if (act == DType::F16) want = round_f16(want);
    EXPECT_LE(logged(nmse(y, want), act == DType::F16 ? kF16Out : kMat),
              act == DType::F16 ? kF16Out : kMat)
        << "fused=" << fused;
  }
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(outs[0][i], outs[1][i]) << "part " << i;
}
// At 20 tokens the linears run the tiled GEMM, and the scratch is stored in its order.
TEST(VulkanOps, RmsNormQuantizesForLinear8da4w) {
  check_fused_producer(Producer::Norm, DType::F32, 3);
  check_fused_producer(Producer::Norm, DType::F32, 20);
  check_fused_producer(Producer::Norm, DType::F16, 1);
}
// swiglu whose output only linear_8da4w ops read quantizes it for them (swiglu_quant), at prefill
// sizes (the tiled GEMM from 16 tokens) and one token.
TEST(VulkanOps, SwigluQuantizesForLinear8da4w) {
  check_fused_producer(Producer::Swiglu, DType::F32, 20);
  check_fused_producer(Producer::Swiglu, DType::F16, 20);
  check_fused_producer(Producer::Swiglu, DType::F16, 1);
}
TEST(VulkanOps, ResidualAddFusesIntoTheNorm) {
  check_fused_producer(Producer::AddNorm, DType::F32, 3);
  check_fused_producer(Producer::AddNorm, DType::F16, 20);
  check_fused_producer(Producer::AddNorm, DType::F16, 1);
}

TEST(VulkanOps, LinearQ4W) {
  for (int T : {1, 6}) check_linear(Lin::Q4W, 96, 45, T, DType::F32);
  check_linear(Lin::Q4W, 160, 45, 3, DType::F16);
}

TEST(VulkanOps, Linear8da4wBothDotPaths) {
  for (int T : {1, 6}) {
    std::vector<float> with_dot, portable;
    VulkanOptions o;
    check_linear(Lin::A8W4, 160, 45, T, DType::F32, o, &with_dot);
    o.no_int_dot = true;
    check_linear(Lin::A8W4, 160, 45, T, DType::F32, o, &portable);
    EXPECT_EQ(with_dot, portable);  // integer dot products are exact on both paths
  }
  check_linear(Lin::A8W4, 256, 33, 5, DType::F16);
}

// Forwards of 16 tokens or more run linear_8da4w as a tiled GEMM (linear_8da4w_mm.comp, 64 tokens
// x 64 rows a workgroup). It adds the CPU's per-group terms in the CPU's order, so its output is
// bit-identical with cpu::linear_8da4w: at sizes that are not multiples of the tile, for each
// K-chunk it stages (groups of 32, 64, 128; 256, where the coopmat path widens nibbles to q, not
// 16 q), fp16 outputs, on each integer-dot path this device
// has, and in row chunks of the weight.
TEST(VulkanOps, Linear8da4wTiledGemmIsBitExact) {
  struct Shape {
    int64_t K, N;
    int T;
    int64_t G;
    DType act;
  };
  const Shape shapes[] = {{256, 77, 16, 32, DType::F32},  {256, 130, 65, 128, DType::F32},
                          {384, 64, 130, 64, DType::F32}, {128, 45, 17, 128, DType::F32},
                          {256, 70, 40, 128, DType::F16}, {512, 70, 20, 256, DType::F32}};
  // This device's path at 32-, 64- and 128-token tiles (128 on the integer paths where K is
  // staged in chunks of 64 or more: the G = 32 shape falls back to the default), at the tile rule's
  // choice for these few rows (32 x 64 on cooperative matrices: 32 x 128 make too few), then the
  // portable path at 128, then 64 tokens x 128 rows (cooperative matrices: K in chunks of 64, the
  // largest whose buffers fit; elsewhere the rows fall back to 64).
  const char* tiles[] = {"32", "64", "128", "rule", "128", "64"};
  for (int mode = 0; mode < 6; ++mode) {
    const bool portable = mode == 4;
    VulkanOptions o;
    if (mode != 3) o.tuning.gemm_tile = static_cast<uint32_t>(std::atoi(tiles[mode]));
    if (mode == 5) o.tuning.gemm_rows = 128;
    o.no_int_dot = o.no_coopmat = portable;
    vk::Context ctx(validated(o));
    std::printf("tiled GEMM path: %s, tiles: %s\n",
                ctx.use_coopmat()   ? "cooperative matrix"
                : ctx.use_int_dot() ? "int8 dot product"
                                    : "portable integer",
                mode == 5 ? "64 x 128 rows" : tiles[mode]);
    for (const Shape& sh : shapes) {
      std::vector<float> got, want;
      check_linear(Lin::A8W4, sh.K, sh.N, sh.T, sh.act, o, &got, XDist::Normal, sh.G, &want);
      ASSERT_EQ(got.size(), want.size());
      size_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
      EXPECT_EQ(diff, 0u) << "K=" << sh.K << " N=" << sh.N << " T=" << sh.T << " G=" << sh.G
                          << " mode " << mode;
    }
  }
  VulkanOptions chunked;
  chunked.max_binding_bytes = 16384;  // the weight in chunks of 128 and 72 rows
  std::vector<float> got, want;
  check_linear(Lin::A8W4, 256, 200, 16, DType::F32, chunked, &got, XDist::Normal, 32, &want);
  EXPECT_EQ(got, want);
}

// The decode mat-vec (one token, 32-weight blocks) cuts each row into PARTS parts, one subgroup
// each, in workgroups of WG threads: for each forced PARTS every WG gives the same bits, each
// within the CPU bound (check_linear). Shapes: rows not a multiple of a workgroup's rows, K with a
// lane's last blocks past the row, groups of 64 and 128, fp16 output with the weights in row
// chunks.
TEST(VulkanOps, Linear8da4wDecodeInPartsAgreesAtEveryWorkgroupSize) {
  struct Shape {
    int64_t K, N, G;
    DType act;
    uint64_t max_binding;
  };
  const Shape shapes[] = {{2304, 45, 64, DType::F32, 0}, {1024, 200, 128, DType::F16, 16384}};
  for (const Shape& sh : shapes) {
    VulkanOptions o;
    if (sh.max_binding) o.max_binding_bytes = sh.max_binding;
    for (uint32_t parts : {2u, 8u}) {  // (one part: every other decode test)
      o.tuning.matvec_parts = parts;
      std::vector<float> first;
      for (uint32_t wg : {64u, 256u}) {
        o.tuning.matvec_wg = wg;
        std::vector<float> got;
        check_linear(Lin::A8W4, sh.K, sh.N, 1, sh.act, o, &got, XDist::Normal, sh.G);
        if (first.empty()) first = got;
        EXPECT_EQ(got, first) << "K=" << sh.K << " N=" << sh.N << " G=" << sh.G << " parts "
                              << parts << " WG " << wg;
      }
    }
  }
}

// The streamed decode mat-vecs (Tuning::mv 1) against the old decode kernels (mv 0), each
// output against the CPU reference too (check_linear): every group size they take (one to eight
// blocks a group), widths whose groups do not fill the lanes, rows that do not fill a row set,
// fp16 activations, weights in row chunks (rows start at n0), and each depth, batch count and
// grid, and (linear_8da4w_mv) the weight sums from memory or from the nibbles (mv_wsum_nibbles).
// compare(streamed, old, shape) judges each setting's output. `widest`: the last shape's K.
struct MvShape {
  int64_t K, N, G;
  DType act;
  uint64_t max_binding;
};
template <typename Compare>
void check_streamed_matvec(Lin kind, int64_t widest, Compare compare) {
  const MvShape shapes[] = {{256, 45, 128, DType::F32, 0},      {1024, 301, 32, DType::F32, 0},
                            {2304, 37, 64, DType::F16, 0},      {768, 203, 256, DType::F32, 0},
                            {384, 200, 128, DType::F16, 16384}, {widest, 9, 128, DType::F32, 0}};
  struct Setting {
    uint32_t depth, batches, groups;  // 0: the default
    bool wsum;
  };
  // (24 contexts in one process: NVIDIA's driver refuses instances after ~30 validated ones.)
  const Setting settings[] = {{0, 0, 0, false}, {1, 1, 1, true}, {3, 2, 3, false}};
  for (const MvShape& sh : shapes) {
    VulkanOptions o;
    if (sh.max_binding) o.max_binding_bytes = sh.max_binding;
    o.tuning.mv = 0;
    std::vector<float> old;
    check_linear(kind, sh.K, sh.N, 1, sh.act, o, &old, XDist::Normal, sh.G);
    o.tuning.mv = 1;
    for (const Setting& st : settings) {
      o.tuning.mv_depth = st.depth;
      o.tuning.mv_batches = st.batches;
      o.tuning.mv_groups = st.groups;
      o.tuning.mv_wsum_nibbles = st.wsum;
      std::vector<float> got;
      check_linear(kind, sh.K, sh.N, 1, sh.act, o, &got, XDist::Normal, sh.G);
      compare(got, old, sh,
              "K=" + std::to_string(sh.K) + " N=" + std::to_string(sh.N) +
                  " G=" + std::to_string(sh.G) + " tuning " + o.tuning.describe());
    }
  }
}

// linear_8da4w_mv.comp has the bits of matvec_decode.
TEST(VulkanOps, Linear8da4wStreamedMatvecHasTheDecodeKernelsBits) {
  check_streamed_matvec(
      Lin::A8W4, 8192,
      [](const std::vector<float>& got, const std::vector<float>& old, const MvShape&,
         const std::string& what) { EXPECT_EQ(got, old) << what; });
}

// linear_q4w_mv (int4 weight-only) is within the CPU reference's bound (check_linear). Its sums
// run in another order than linear_q4w.comp's, so its fp32 output differs from the old kernel's
// in the last bits: that shows it ran (fp16 outputs round the difference away). (7,680: the
// widest row of 128-groups whose padded copy fits lavapipe's 32 KiB of shared memory.)
TEST(VulkanOps, LinearQ4wStreamedMatvecMatchesTheReference) {
  check_streamed_matvec(Lin::Q4W, 7680,
                        [](const std::vector<float>& got, const std::vector<float>& old,
                           const MvShape& sh, const std::string& what) {
                          if (sh.act == DType::F32) {
                            EXPECT_NE(got, old) << "the streamed kernel did not run: " << what;
                          }
                        });
}

TEST(VulkanOps, IntDotPathIsAvailableOnThisDevice) {
  vk::Context ctx(validated());
  std::printf("device %s: int8 dot product %s\n", ctx.info().name.c_str(),
              ctx.use_int_dot() ? "on" : "off");
  VulkanOptions o = validated();
  o.no_int_dot = true;
  vk::Context off(o);
  EXPECT_FALSE(off.use_int_dot());
}

void check_rope(int T, int pos, bool long_table, DType dt) {
  const int H = 3, hd = 16, R = 12;
  const float a = 1.25f;
  std::mt19937 rng(static_cast<unsigned>(T * 100 + pos));
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * H * hd));
  if (dt == DType::F16) x = round_f16(x);
  std::vector<float> fs(R / 2), fl(R / 2);
  for (int i = 0; i < R / 2; ++i) {
    fs[i] = std::pow(10000.0f, -2.0f * i / R);
    fl[i] = fs[i] / (1.0f + static_cast<float>(i));
  }
  int32_t tx =
      c.add("x", dt, TK::Activation, {-1, H * hd}, dt == DType::F16 ? bytes_f16(x) : bytes_f32(x));
  int32_t tf = c.add("inv", DType::F32, TK::Weight, {R / 2}, bytes_f32(fs));
  int32_t ty = c.add("y", dt, TK::Activation, {-1, H * hd});
  nlohmann::json attrs = {
      {"n_heads", H}, {"head_dim", hd}, {"rotary_dim", R}, {"attention_factor", a}};
  const int orig = 12;
  std::vector<int32_t> in = {tx, tf};
  if (long_table) {
    in.push_back(c.add("inv_long", DType::F32, TK::Weight, {R / 2}, bytes_f32(fl)));
    attrs["original_max_pos"] = orig;
  }
  c.op("rope", in, ty, attrs);
  std::vector<float> want(x.size());
  const bool use_long = long_table && pos + T > orig;
  cpu::rope(x.data(), T, H, hd, R, use_long ? fl.data() : fs.data(), pos, a, want.data());
  if (dt == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, pos);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), dt == DType::F16 ? kF16Out : kElem),
            dt == DType::F16 ? kF16Out : kElem)
      << "T=" << T << " pos=" << pos;
}

TEST(VulkanOps, RopePartialRotary) {
  check_rope(5, 9, false, DType::F32);
  check_rope(1, 50, false, DType::F32);
  check_rope(5, 9, false, DType::F16);
}
TEST(VulkanOps, RopeLongTableSwitch) {
  check_rope(5, 3, true, DType::F32);  // 8 <= 12: short table
  check_rope(5, 9, true, DType::F32);  // 14 > 12: long table
}

void check_attention(int H, int Hkv, int hd, int T, int pos, DType act, DType cache, int max_ctx,
                     const Tuning& tune = {}) {
  std::mt19937 rng(static_cast<unsigned>(H * 7 + hd + T * 3 + pos));
  Case c;
  c.p.max_ctx = max_ctx;
  const int64_t W = int64_t(Hkv) * hd;
  auto q = rand_vec(rng, static_cast<size_t>(T * H * hd)),
       k = rand_vec(rng, static_cast<size_t>(T * W)), v = rand_vec(rng, static_cast<size_t>(T * W));
  auto kc = rand_vec(rng, static_cast<size_t>(max_ctx * W)),
       vc = rand_vec(rng, static_cast<size_t>(max_ctx * W));
  if (act == DType::F16) q = round_f16(q), k = round_f16(k), v = round_f16(v);
  if (cache == DType::F16) kc = round_f16(kc), vc = round_f16(vc);
  auto enc = [](DType d, const std::vector<float>& f) {
    return d == DType::F16 ? bytes_f16(f) : bytes_f32(f);
  };
  int32_t tq = c.add("q", act, TK::Activation, {-1, H * hd}, enc(act, q));
  int32_t tk = c.add("k", act, TK::Activation, {-1, W}, enc(act, k));
  int32_t tv = c.add("v", act, TK::Activation, {-1, W}, enc(act, v));
  int32_t tkc = c.add("kc", cache, TK::KVCache, {max_ctx, W}, enc(cache, kc));
  int32_t tvc = c.add("vc", cache, TK::KVCache, {max_ctx, W}, enc(cache, vc));
  int32_t ty = c.add("o", act, TK::Activation, {-1, H * hd});
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  c.op("attention", {tq, tk, tv, tkc, tvc}, ty,
       {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", hd}, {"scale", scale}});
  std::vector<float> want(q.size());
  cpu::attention(q.data(), k.data(), v.data(), T, pos, kc.data(), vc.data(), cache == DType::F16, H,
                 Hkv, hd, scale, want.data());
  if (act == DType::F16) want = round_f16(want);
  VulkanOptions o;
  o.tuning = tune;
  OpRun r(c, T, o);
  r.forward(T, pos);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), act == DType::F16 ? kF16Out : kAttn),
            act == DType::F16 ? kF16Out : kAttn)
      << "T=" << T << " pos=" << pos;
  auto gk = r.read(tkc, max_ctx), gv = r.read(tvc, max_ctx);
  EXPECT_EQ(gk, kc);  // cache rows are copies (rounded like the CPU's)
  EXPECT_EQ(gv, vc);
}

TEST(VulkanOps, AttentionPrefill) {
  check_attention(4, 2, 24, 9, 0, DType::F32, DType::F32, 40);
}
// Several query blocks of the tiled prefill kernel (attention_prefill.comp), after cached keys,
// grouped-query heads, fp16; at each of its shapes: two rows a thread and 64-key tiles (head dim
// 64), 32-key tiles (128 where 32 KiB of shared memory is the limit, and Tuning::attn_bk 32), one
// row a thread (attn_rq 1; head dim 256 where 48 KiB is).
TEST(VulkanOps, AttentionTiledPrefillBlocks) {
  for (int cap = 0; cap < 3; ++cap) {
    Tuning t;
    if (cap == 1) t.attn_bk = 32;
    if (cap == 2) t.attn_rq = 1;
    {
      VulkanOptions o;
      o.tuning = t;
      vk::Context ctx(validated(o));
      const auto pa = vk::detail::prefill_attention(ctx, 64, false, false);
      std::printf("%s: head dim 64 tiled %d, %u rows a thread, %u keys a tile\n",
                  t.describe().c_str(), pa.tiled, pa.rq, pa.bk);
    }
    check_attention(8, 2, 64, 77, 30, DType::F32, DType::F32, 120, t);
    check_attention(4, 1, 128, 40, 0, DType::F32, DType::F32, 48, t);
    check_attention(2, 2, 256, 35, 5, DType::F16, DType::F16, 64, t);
  }
}
// The settings a test of the cooperative-matrix prefill attention runs under: the default, and
// where that kernel runs, Tuning::attn_gqa (a KV head's query heads in one workgroup) and
// attn_portable (the portable kernel in its place).
std::vector<Tuning> coopmat_attention_modes() {
  vk::Context ctx(validated());
  std::printf("fp16 prefill attention path: %s\n",
              ctx.use_coopmat_f16() ? "cooperative matrix" : "portable tiled");
  if (!ctx.use_coopmat_f16()) return {Tuning{}};
  Tuning gqa, portable;
  gqa.attn_gqa = true;
  portable.attn_portable = true;
  return {Tuning{}, gqa, portable};
}
// fp16 q and caches at the models' head dims (64: Llama-3.2-1B, 128: Qwen3, Phi-4-mini): on a GPU
// with fp16 cooperative matrices the prefill runs attention_prefill_coopmat.comp (32-token query
// blocks, 32-key tiles, the weights rounded to fp16; and with a KV head's query heads in one
// workgroup), elsewhere attention_prefill.comp; either within the fp16 bound of the CPU. Blocks
// past the end, cached keys before the chunk, 4:1 and 2:1 grouped-query heads, a chunk shorter
// than one block.
TEST(VulkanOps, AttentionPrefillF16HeadDims) {
  for (const Tuning& t : coopmat_attention_modes()) {
    check_attention(32, 8, 64, 150, 30, DType::F16, DType::F16, 200, t);
    check_attention(16, 8, 128, 100, 0, DType::F16, DType::F16, 128, t);
    check_attention(4, 1, 128, 70, 200, DType::F16, DType::F16, 300, t);
    check_attention(8, 2, 64, 20, 7, DType::F16, DType::F16, 40, t);
  }
}
TEST(VulkanOps, AttentionDecode) {
  check_attention(4, 2, 24, 1, 20, DType::F32, DType::F32, 40);
}
TEST(VulkanOps, AttentionChunkAfterCache) {
  check_attention(6, 2, 40, 5, 11, DType::F32, DType::F32, 40);
}
TEST(VulkanOps, AttentionManyKeyTiles) {
  check_attention(4, 1, 128, 3, 140, DType::F32, DType::F32, 150);
}
// Decode steps split their keys over several workgroups (multiples of 64 keys, at most 64
// splits) and merge the partial softmaxes in a second pass.
TEST(VulkanOps, AttentionDecodeSplitKeys) {
  check_attention(4, 2, 64, 1, 700, DType::F32, DType::F32, 800);  // 13 splits of 64, 2 empty
}
TEST(VulkanOps, AttentionDecodeLongContext) {
  check_attention(2, 1, 128, 1, 4500, DType::F16, DType::F16, 4600);  // 36 splits of 128
}
TEST(VulkanOps, AttentionF16Cache) {
  check_attention(4, 2, 24, 5, 11, DType::F32, DType::F16, 40);
}
TEST(VulkanOps, AttentionF16Activations) {
  check_attention(4, 2, 24, 5, 11, DType::F16, DType::F16, 40);
}

// The prefill attention run (rope, rope, attention: vk_fused.cpp kPrefillPatterns): the ropes
// of q and k in the prefill attention's q loads and KV store. Against the unfused ops bit for bit
// (output and caches), and against the CPU's rope and attention within the attention bound. On a
// GPU with fp16 cooperative matrices the fp16 cases at head dims 64 and 128 take
// attention_prefill_coopmat.comp, the others attention_prefill.comp.
void check_attention_run(int H, int Hkv, int hd, int R, int T, int pos, DType act, DType cache,
                         bool long_table, bool qk_norm = false, const Tuning& tune = {}) {
  std::mt19937 rng(static_cast<unsigned>(H * 5 + hd + R + T * 3 + pos));
  Case c;
  c.p.max_ctx = pos + T + 8;
  const int64_t W = int64_t(Hkv) * hd;
  const float a = 1.125f;
  auto q = rand_vec(rng, static_cast<size_t>(T * H * hd)),
       k = rand_vec(rng, static_cast<size_t>(T * W)), v = rand_vec(rng, static_cast<size_t>(T * W));
  auto kc = rand_vec(rng, static_cast<size_t>(c.p.max_ctx * W)),
       vc = rand_vec(rng, static_cast<size_t>(c.p.max_ctx * W));
  if (act == DType::F16) q = round_f16(q), k = round_f16(k), v = round_f16(v);
  if (cache == DType::F16) kc = round_f16(kc), vc = round_f16(vc);
  std::vector<float> fs(R / 2), fl(R / 2);
  for (int i = 0; i < R / 2; ++i) {
    fs[i] = std::pow(10000.0f, -2.0f * i / R);
    fl[i] = fs[i] / (1.0f + 0.5f * static_cast<float>(i));
  }
  const int orig = pos + T / 2;  // the long table from this forward on
  auto enc = [](DType d, const std::vector<float>& f) {
    return d == DType::F16 ? bytes_f16(f) : bytes_f32(f);
  };
  const int32_t tq = c.add("q", act, TK::Activation, {-1, H * hd}, enc(act, q)),
                tk = c.add("k", act, TK::Activation, {-1, W}, enc(act, k)),
                tv = c.add("v", act, TK::Activation, {-1, W}, enc(act, v)),
                tf = c.add("inv", DType::F32, TK::Weight, {R / 2}, bytes_f32(fs)),
                tfl = c.add("inv_long", DType::F32, TK::Weight, {R / 2}, bytes_f32(fl)),
                tqr = c.add("q_rope", act, TK::Activation, {-1, H * hd}),
                tkr = c.add("k_rope", act, TK::Activation, {-1, W}),
                tkc = c.add("kc", cache, TK::KVCache, {c.p.max_ctx, W}, enc(cache, kc)),
                tvc = c.add("vc", cache, TK::KVCache, {c.p.max_ctx, W}, enc(cache, vc)),
                ty = c.add("o", act, TK::Activation, {-1, H * hd});
  std::vector<int32_t> tables = {tf};
  nlohmann::json ra = {{"head_dim", hd}, {"rotary_dim", R}, {"attention_factor", a}};
  if (long_table) {
    tables.push_back(tfl);
    ra["original_max_pos"] = orig;
  }
  auto rope_in = [&](int32_t x) {
    std::vector<int32_t> in = {x};
    in.insert(in.end(), tables.begin(), tables.end());
    return in;
  };
  nlohmann::json rq = ra, rk = ra;
  rq["n_heads"] = H;
  rk["n_heads"] = Hkv;
  // With qk_norm: Qwen3's per-head norms of q and k before the ropes.
  std::vector<float> wq = rand_vec(rng, static_cast<size_t>(hd), 0.5f, 1.5f),
                     wk = rand_vec(rng, static_cast<size_t>(hd), 0.5f, 1.5f);
  const float eps = 1e-6f;
  int32_t q_in = tq, k_in = tk;
  if (qk_norm) {
    q_in = c.add("q_norm", act, TK::Activation, {-1, H * hd});
    k_in = c.add("k_norm", act, TK::Activation, {-1, W});
    c.op("rms_norm", {tq, c.add("wq", DType::F32, TK::Weight, {hd}, bytes_f32(wq))}, q_in,
         {{"group", hd}, {"eps", eps}});
    c.op("rms_norm", {tk, c.add("wk", DType::F32, TK::Weight, {hd}, bytes_f32(wk))}, k_in,
         {{"group", hd}, {"eps", eps}});
  }
  c.op("rope", rope_in(q_in), tqr, rq);
  c.op("rope", rope_in(k_in), tkr, rk);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  c.op("attention", {tqr, tkr, tv, tkc, tvc}, ty,
       {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", hd}, {"scale", scale}});
  // The CPU: rope (rounded as the rope op stores it), then the attention.
  const bool use_long = long_table && pos + T > orig;
  std::vector<float> qn = q, kn = k, qr(q.size()), kr(k.size()), want(q.size());
  if (qk_norm) {
    cpu::rms_norm(q.data(), T, int64_t(H) * hd, wq.data(), hd, eps, qn.data());
    cpu::rms_norm(k.data(), T, W, wk.data(), hd, eps, kn.data());
    if (act == DType::F16) qn = round_f16(qn), kn = round_f16(kn);
  }
  cpu::rope(qn.data(), T, H, hd, R, use_long ? fl.data() : fs.data(), pos, a, qr.data());
  cpu::rope(kn.data(), T, Hkv, hd, R, use_long ? fl.data() : fs.data(), pos, a, kr.data());
  if (act == DType::F16) qr = round_f16(qr), kr = round_f16(kr);
  cpu::attention(qr.data(), kr.data(), v.data(), T, pos, kc.data(), vc.data(), cache == DType::F16,
                 H, Hkv, hd, scale, want.data());
  if (act == DType::F16) want = round_f16(want);
  std::vector<float> outs[2], kcs[2], vcs[2];
  for (int fused = 0; fused < 2; ++fused) {
    VulkanOptions o;
    o.tuning = tune;
    OpRun r(c, T, o, fused == 1);
    EXPECT_EQ(r.runs().size(), size_t(fused)) << "the prefill attention run";
    if (fused && qk_norm && !r.runs().empty()) {
      EXPECT_EQ(r.runs()[0].first, 0u) << "the run takes the norms";
    }
    if (fused) {
      const auto pa = vk::detail::prefill_attention(r.ctx(), hd, act == DType::F16,
                                                    cache == DType::F16, H / Hkv);
      std::printf("prefill attention path: %s, %u query heads a workgroup\n",
                  pa.coopmat ? "cooperative matrix" : "portable tiled", pa.gq);
    }
    r.forward(T, pos);
    outs[fused] = r.read(ty, T);
    kcs[fused] = r.read(tkc, c.p.max_ctx);
    vcs[fused] = r.read(tvc, c.p.max_ctx);
  }
  EXPECT_EQ(outs[1], outs[0]) << "fused output differs from the unfused ops'";
  EXPECT_EQ(kcs[1], kcs[0]) << "fused key cache differs";
  EXPECT_EQ(vcs[1], vcs[0]) << "fused value cache differs";
  const double bound = act == DType::F16 ? kF16Out : kAttn;
  EXPECT_LE(logged(nmse(outs[1], want), bound), bound) << "T=" << T << " pos=" << pos;
  if (qk_norm) {  // (the norm's sums differ in order from the CPU's)
    EXPECT_LE(logged(nmse(kcs[1], kc), bound), bound);
  } else {
    EXPECT_EQ(kcs[1], kc);  // the rotated keys, rounded like the CPU's
  }
}

// Llama-3.2-1B's shapes (head dim 64, full rotary, fp16), Phi-4-mini's (head dim 128, rotary 96,
// fp32, longrope's switch inside the forward), Qwen3's (head dim 128, fp16, the q/k norms), an
// odd head dim; several query blocks after cached keys.
TEST(VulkanOps, AttentionPrefillRunRotates) {
  check_attention_run(8, 2, 64, 64, 150, 30, DType::F16, DType::F16, false);
  check_attention_run(6, 2, 128, 96, 100, 20, DType::F32, DType::F32, true);
  check_attention_run(4, 2, 128, 128, 70, 0, DType::F16, DType::F16, false, true);
  check_attention_run(3, 3, 64, 32, 40, 5, DType::F32, DType::F32, false, true);
  check_attention_run(4, 1, 24, 16, 9, 3, DType::F32, DType::F16, true);
  const std::vector<Tuning> modes = coopmat_attention_modes();
  for (size_t m = 1; m < modes.size(); ++m) {  // (the fp16 cases again in each other mode)
    check_attention_run(8, 2, 64, 64, 150, 30, DType::F16, DType::F16, false, false, modes[m]);
    check_attention_run(4, 2, 128, 128, 70, 0, DType::F16, DType::F16, false, true, modes[m]);
  }
}

void check_binary(const std::string& f, DType dt) {
  const int T = 7;
  const int64_t N = 133;
  std::mt19937 rng(5);
  Case c;
  auto a = rand_vec(rng, static_cast<size_t>(T * N), -4, 4),
       b = rand_vec(rng, static_cast<size_t>(T * N));
  if (dt == DType::F16) a = round_f16(a), b = round_f16(b);
  auto enc = [&](const std::vector<float>& v) {
    return dt == DType::F16 ? bytes_f16(v) : bytes_f32(v);
  };
  int32_t ta = c.add("a", dt, TK::Activation, {-1, N}, enc(a));
  int32_t tb = c.add("b", dt, TK::Activation, {-1, N}, enc(b));
  int32_t ty = c.add("y", dt, TK::Activation, {-1, N});
  c.op(f, {ta, tb}, ty);
  std::vector<float> want(a.size());
  if (f == "add")
    cpu::add(a.data(), b.data(), T * N, want.data());
  else
    cpu::swiglu(a.data(), b.data(), T * N, want.data());
  if (dt == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, 0);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), dt == DType::F16 ? kF16Out : kElem),
            dt == DType::F16 ? kF16Out : kElem)
      << f;
}

TEST(VulkanOps, Add) {
  check_binary("add", DType::F32);
  check_binary("add", DType::F16);
}
TEST(VulkanOps, Swiglu) {
  check_binary("swiglu", DType::F32);
  check_binary("swiglu", DType::F16);
}

TEST(VulkanOps, LastRowAndArgmax) {
  const int T = 6;
  const int64_t V = 1000;
  std::mt19937 rng(9);
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * V));
  // a tie for the maximum of the last row: the lowest index wins
  x[(T - 1) * V + 417] = 5.0f;
  x[(T - 1) * V + 803] = 5.0f;
  int32_t tx = c.add("x", DType::F32, TK::Activation, {-1, V}, bytes_f32(x));
  int32_t tl = c.add("last", DType::F32, TK::Activation, {1, V});
  int32_t ti = c.add("id", DType::I32, TK::Activation, {1, 1});
  c.op("last_row", {tx}, tl);
  c.op("argmax", {tl}, ti);
  OpRun r(c, T);
  r.forward(T, 0);
  std::vector<float> want(x.end() - V, x.end());
  EXPECT_EQ(r.read(tl, 1), want);
  EXPECT_EQ(r.read(ti, 1)[0], static_cast<float>(cpu::argmax(want.data(), V)));
  EXPECT_EQ(r.read(ti, 1)[0], 417.0f);
}

TEST(VulkanOps, ArgmaxRandom) {
  std::mt19937 rng(21);
  for (int64_t V : {1, 63, 151936}) {
    Case c;
    auto x = rand_vec(rng, static_cast<size_t>(V), -10, 10);
    int32_t tx = c.add("x", DType::F32, TK::Activation, {1, V}, bytes_f32(x));
    int32_t ti = c.add("id", DType::I32, TK::Activation, {1, 1});
    c.op("argmax", {tx}, ti);
    OpRun r(c, 1);
    r.forward(1, 0);
    EXPECT_EQ(r.read(ti, 1)[0], static_cast<float>(cpu::argmax(x.data(), V))) << "V=" << V;
  }
}

// The maximum appears three times, in different workgroups' chunks and inside one chunk: the
// lowest index wins, as on the CPU.
TEST(VulkanOps, ArgmaxTiesAcrossChunks) {
  const int64_t V = 128256;
  std::vector<float> x(static_cast<size_t>(V), -1.0f);
  for (int64_t i : {int64_t(70001), int64_t(5000), int64_t(5001), int64_t(V - 1)}) x[i] = 7.5f;
  Case c;
  int32_t tx = c.add("x", DType::F32, TK::Activation, {1, V}, bytes_f32(x));
  int32_t ti = c.add("id", DType::I32, TK::Activation, {1, 1});
  c.op("argmax", {tx}, ti);
  OpRun r(c, 1);
  r.forward(1, 0);
  EXPECT_EQ(r.read(ti, 1)[0], 5000.0f);
  EXPECT_EQ(cpu::argmax(x.data(), V), 5000);
}

TEST(VulkanOps, OutOfRangeTokenIdIsAnError) {
  Case c;
  std::vector<int32_t> ids = {3, 300};
  c.p.input_ids = c.add("ids", DType::I32, TK::Input, {-1}, bytes_of(ids));
  std::mt19937 rng(1);
  int32_t t = c.add("tab", DType::F32, TK::Weight, {300, 8}, bytes_f32(rand_vec(rng, 2400)));
  int32_t y = c.add("y", DType::F32, TK::Activation, {-1, 8});
  c.op("embedding", {c.p.input_ids, t}, y);
  OpRun r(c, 2);
  EXPECT_THROW(r.forward(2, 0), Error);
}

TEST(VulkanDevice, SelectByNameAndIndex) {
  auto devs = vk::list_devices();
  ASSERT_FALSE(devs.empty()) << "no Vulkan device found";
  VulkanOptions o = validated();
  o.device = "0";
  {
    vk::Context c(o);
    EXPECT_EQ(c.info().index, 0u);
  }
  o.device = devs[0].name.substr(0, 4);
  {
    vk::Context c(o);
    EXPECT_EQ(c.info().name, devs[0].name);
  }
  o.device = "no-such-gpu-name";
  EXPECT_THROW(vk::Context c(o), Error);
  o.device = "99";
  EXPECT_THROW(vk::Context c(o), Error);
}

}  // namespace
}  // namespace vkllm::test
