#include "op_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "backend/vulkan/vk_ops_internal.h"

namespace vkllm::test::table {

double logged(double e, double bound) {
  const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[nmse] %s %.3g %.3g\n", t ? t->name() : "?", e, bound);
  return e;
}

std::vector<uint8_t> enc(DType dt, const std::vector<float>& v) {
  return dt == DType::F16 ? bytes_f16(v) : bytes_f32(v);
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

std::vector<int32_t> q4_group_sums(const std::vector<uint8_t>& q, int64_t N, int64_t K, int64_t G) {
  std::vector<int32_t> ws(static_cast<size_t>(N * K / G), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) ws[n * (K / G) + k / G] += cpu::q4_get(q.data(), K, n, k);
  return ws;
}

std::string case_name(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return out;
}

void perf(OpRun& r, const Case& c, int T, int pos, double ops) {
  const int reps = op_perf_reps();
  if (reps <= 0) return;
  std::set<int32_t> seen;
  double bytes = 0;
  for (const Op& op : c.p.ops) {
    std::vector<int32_t> ts = op.inputs;
    ts.insert(ts.end(), op.outputs.begin(), op.outputs.end());
    for (int32_t t : ts) {
      if (!seen.insert(t).second) continue;
      const TensorDecl& d = c.p.tensors[static_cast<size_t>(t)];
      std::vector<int64_t> shape = d.shape;
      if (shape[0] < 0) shape[0] = T;
      if (d.kind == TK::KVCache) shape[0] = std::min<int64_t>(shape[0], pos + T);
      bytes += static_cast<double>(dtype_nbytes(d.dtype, shape));
    }
  }
  const double us = r.time_us(T, pos, reps);
  const auto* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      t ? std::string(t->test_suite_name()) + "." + t->name() : std::string("?");
  std::printf("[perf] %s %.2f us %.3g GB/s %s TOPS (%d reps, %s)\n", name.c_str(), us,
              bytes / us / 1e3, ops > 0 ? fmt::format("{:.3g}", ops / us / 1e6).c_str() : "-", reps,
              r.ctx().info().name.c_str());
}

Tuning att_tuning(AttVar v) {
  Tuning t;
  if (v == AttVar::Bk32) t.attn_bk = 32;
  if (v == AttVar::Rq1) t.attn_rq = 1;
  if (v == AttVar::Gqa) t.attn_gqa = true;
  if (v == AttVar::Portable) t.attn_portable = true;
  return t;
}

const char* att_var_name(AttVar v) {
  static const char* n[] = {"", "_bk32", "_rq1", "_gqa", "_portable"};
  return n[static_cast<int>(v)];
}

bool variant_inert_here(AttVar v, int hd, DType act, DType cache, int group) {
  if (v != AttVar::Gqa && v != AttVar::Portable) return false;
  const bool a16 = act == DType::F16, c16 = cache == DType::F16;
  VulkanOptions o;
  o.tuning = att_tuning(v);
  const auto dv = shared_device(validated(o));
  const vk::Context& var = *dv->ctx;
  if (var.use_coopmat_f16() && a16 && c16) return false;
  const auto dd = shared_device(validated());
  const vk::Context& def = *dd->ctx;
  const auto pv = vk::detail::prefill_attention(var, hd, a16, c16, group),
             pd = vk::detail::prefill_attention(def, hd, a16, c16, group);
  EXPECT_FALSE(pv.coopmat);
  EXPECT_EQ(pv.tiled, pd.tiled);
  EXPECT_EQ(pv.rq, pd.rq);
  EXPECT_EQ(pv.bk, pd.bk);
  EXPECT_EQ(pv.bq, pd.bq);
  EXPECT_EQ(pv.gq, pd.gq);
  std::printf(
      "no fp16 cooperative-matrix prefill attention here: the variant's plan is the "
      "default's (%s, %u rows a thread, %u keys a tile)\n",
      pv.tiled ? "tiled" : "untiled", pv.rq, pv.bk);
  return true;
}

}  // namespace vkllm::test::table
