// The op table's row-wise families (op_table.h): embedding (f32, f16 and int4 tables, f32 or
// f16 rows; exact: a gather), rms_norm (whole rows and per-head groups), add, swiglu, geglu,
// scale, bias_add (its output read by the next op: the barrier), last_row and argmax (exact; ties
// to the lowest index). Tables larger than a binding's range or forced into row chunks of the
// binding limit.
#include <algorithm>
#include <cstring>

#include "op_table.h"

namespace vkllm::test::table {
namespace {

struct EmbCase {
  DType table, out;
  int64_t V, D;
  int T;
  uint64_t max_binding = 0;  // VulkanOptions::max_binding_bytes (0: the device's)
  std::string name() const {
    return case_name(std::string("embedding_") + dtype_name(table) + "_to_" + dtype_name(out) +
                     "_V" + std::to_string(V) + "_D" + std::to_string(D) + "_T" +
                     std::to_string(T) +
                     (max_binding ? "_chunked" + std::to_string(max_binding) : ""));
  }
};
void PrintTo(const EmbCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsEmbedding : public ::testing::TestWithParam<EmbCase> {};

TEST_P(VulkanOpsEmbedding, MatchesTheCpu) {
  const EmbCase& e = GetParam();
  const int64_t V = e.V, D = e.D;
  const int T = e.T;
  std::mt19937 rng(11);
  Case c;
  const auto ids = rand_ids(rng, T, V);
  c.p.input_ids = c.add("ids", DType::I32, TK::Input, {-1}, bytes_of(ids));
  std::vector<float> want(static_cast<size_t>(T * D));
  const int32_t y = c.add("y", e.out, TK::Activation, {-1, D});
  if (e.table == DType::Q4) {
    const int64_t G = 32;
    auto q = rand_q4(rng, V, D);
    auto s = rand_vec(rng, static_cast<size_t>(V * D / G), 0.01f, 0.2f);
    cpu::embedding_q4(ids.data(), T, q.data(), s.data(), V, D, G, want.data());
    const int32_t tq = c.add("tab", DType::Q4, TK::Weight, {V, D}, q);
    const int32_t ts = c.add("scales", DType::F32, TK::Weight, {V, D / G}, bytes_f32(s));
    c.op("embedding_q4", {c.p.input_ids, tq, ts}, y, {{"group", G}});
  } else if (e.table == DType::F16) {
    auto tab = rand_vec(rng, static_cast<size_t>(V * D));
    std::vector<uint16_t> h(tab.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(tab[i]);
    cpu::embedding_f16(ids.data(), T, h.data(), V, D, want.data());
    c.op("embedding", {c.p.input_ids, c.add("tab", e.table, TK::Weight, {V, D}, bytes_f16(tab))},
         y);
  } else {
    // The table written once, in place, in the bytes the harness uploads (594 MiB for the largest
    // case): non-zero values in [-1, 1) from a xorshift generator (mt19937 and a second copy of
    // the table took most of the case's time).
    std::vector<uint8_t> bytes(static_cast<size_t>(V * D) * sizeof(float));
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < bytes.size(); i += sizeof(float)) {
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      const float v = static_cast<float>((static_cast<int32_t>(st >> 40) - (1 << 23)) | 1) /
                      static_cast<float>(1 << 23);
      std::memcpy(bytes.data() + i, &v, sizeof v);
    }
    // (operator new's storage is aligned for float)
    cpu::embedding_f32(ids.data(), T, reinterpret_cast<const float*>(bytes.data()), V, D,
                       want.data());
    c.op("embedding", {c.p.input_ids, c.add("tab", e.table, TK::Weight, {V, D}, std::move(bytes))},
         y);
  }
  if (e.out == DType::F16) want = round_f16(want);
  VulkanOptions o;
  o.max_binding_bytes = e.max_binding;
  OpRun r(c, T, o);
  r.forward(T, 0);
  const double bound = bound_for(kElem, e.out);
  EXPECT_LE(logged(nmse(r.read(y, T), want), bound), bound);
  EXPECT_EQ(r.read(y, T), want);  // a gather is exact
  perf(r, c, T, 0);
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsEmbedding,
                         ::testing::Values(EmbCase{DType::F32, DType::F32, 300, 77, 7},
                                           EmbCase{DType::F32, DType::F16, 300, 77, 7},
                                           EmbCase{DType::F16, DType::F32, 300, 77, 7},
                                           EmbCase{DType::Q4, DType::F32, 300, 96, 9},
                                           EmbCase{DType::Q4, DType::F16, 300, 96, 9},
                                           // 12-row chunks of a 300-row table
                                           EmbCase{DType::F32, DType::F32, 300, 77, 7, 4096},
                                           EmbCase{DType::Q4, DType::F32, 300, 96, 9, 4096},
                                           // Qwen3-0.6B's table: 151936 x 1024 f32 = 594 MiB, more
                                           // than lavapipe's 128 MiB binding range.
                                           EmbCase{DType::F32, DType::F32, 151936, 1024, 5}),
                         [](const auto& p) { return p.param.name(); });

// rms_norm over groups of G (G = N: whole rows). Per-head norms of forwards of several tokens take
// a subgroup a group (rms_norm.comp ROWS_SG), one-token forwards a workgroup.
struct NormCase {
  int64_t N, G;
  int T;
  DType x, y;
  std::string name() const {
    return case_name(std::string("rms_norm_") + dtype_name(x) + "_to_" + dtype_name(y) + "_N" +
                     std::to_string(N) + "_G" + std::to_string(G) + "_T" + std::to_string(T));
  }
};
void PrintTo(const NormCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsRmsNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(VulkanOpsRmsNorm, MatchesTheCpu) {
  const NormCase& n = GetParam();
  const int64_t N = n.N, G = n.G;
  const int T = n.T;
  std::mt19937 rng(static_cast<unsigned>(N + G));
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * N), -3, 3),
       w = rand_vec(rng, static_cast<size_t>(G), 0.5f, 1.5f);
  if (n.x == DType::F16) x = round_f16(x);
  const int32_t tx = c.add("x", n.x, TK::Activation, {-1, N}, enc(n.x, x));
  const int32_t tw = c.add("w", DType::F32, TK::Weight, {G}, bytes_f32(w));
  const int32_t ty = c.add("y", n.y, TK::Activation, {-1, N});
  c.op("rms_norm", {tx, tw}, ty, {{"eps", 1e-6}, {"group", G}});
  std::vector<float> want(x.size());
  cpu::rms_norm(x.data(), T, N, w.data(), G, 1e-6f, want.data());
  if (n.y == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, 0);
  const double bound = bound_for(kNorm, n.y);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), bound), bound);
  perf(r, c, T, 0);
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsRmsNorm,
                         ::testing::Values(NormCase{200, 200, 7, DType::F32, DType::F32},
                                           NormCase{1000, 1000, 3, DType::F32, DType::F32},
                                           NormCase{200, 40, 1, DType::F32, DType::F32},
                                           NormCase{200, 40, 7, DType::F32, DType::F32},
                                           // Qwen3's per-head shape: 16 heads of 128
                                           NormCase{2048, 128, 20, DType::F16, DType::F16},
                                           NormCase{202, 101, 3, DType::F32, DType::F32},
                                           NormCase{21, 7, 2, DType::F16, DType::F16},
                                           NormCase{200, 40, 7, DType::F16, DType::F16}),
                         [](const auto& p) { return p.param.name(); });

// add, swiglu and geglu of two T x N operands; scale of one (by 1.7) and softcap (cap 1.7, against
// transformers' formula: values from -4 to 4 reach tanh's flat ends); bias_add of a row of N, its
// output then read by an add in the same forward (the barrier between them; bias_add is one fp32
// add: exact).
struct ElemCase {
  std::string family;
  DType dt;
  int64_t N;
  int T;
  std::string name() const {
    return case_name(family + "_" + dtype_name(dt) + "_N" + std::to_string(N) + "_T" +
                     std::to_string(T));
  }
};
void PrintTo(const ElemCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsElementwise : public ::testing::TestWithParam<ElemCase> {};

TEST_P(VulkanOpsElementwise, MatchesTheCpu) {
  const ElemCase& e = GetParam();
  const int T = e.T;
  const int64_t N = e.N;
  const DType dt = e.dt;
  const bool bias = e.family == "bias_add", unary = e.family == "scale" || e.family == "softcap";
  const float factor = 1.7f;
  std::mt19937 rng(bias ? static_cast<unsigned>(N) : 5u);
  Case c;
  auto a = rand_vec(rng, static_cast<size_t>(T * N), -4, 4),
       b = bias ? rand_vec(rng, static_cast<size_t>(N), -2, 2)
                : rand_vec(rng, static_cast<size_t>(T * N));
  a = dt == DType::F16 ? round_f16(a) : a;
  if (dt == DType::F16 && !bias) b = round_f16(b);
  const int32_t ta = c.add("a", dt, TK::Activation, {-1, N}, enc(dt, a));
  const int32_t tb = bias ? c.add("b", DType::F32, TK::Weight, {N}, bytes_f32(b))
                          : c.add("b", dt, TK::Activation, {-1, N}, enc(dt, b));
  const int32_t ty = c.add("y", dt, TK::Activation, {-1, N});
  if (unary)
    c.op(e.family, {ta}, ty, {{e.family == "scale" ? "factor" : "cap", factor}});
  else
    c.op(e.family, {ta, tb}, ty);
  int32_t tz = -1;
  if (bias) {
    tz = c.add("z", dt, TK::Activation, {-1, N});
    c.op("add", {ty, ta}, tz);  // reads y: the bias_add's write must be visible
  }
  std::vector<float> want(a.size());
  if (e.family == "add")
    cpu::add(a.data(), b.data(), T * N, want.data());
  else if (e.family == "swiglu")
    cpu::swiglu(a.data(), b.data(), T * N, want.data());
  else if (e.family == "geglu")
    cpu::geglu(a.data(), b.data(), T * N, want.data());
  else if (e.family == "softcap")  // logits / cap, tanh, times cap
    for (size_t i = 0; i < a.size(); ++i) want[i] = std::tanh(a[i] / factor) * factor;
  else if (unary)
    cpu::scale(a.data(), T * N, factor, want.data());
  else
    cpu::bias_add(a.data(), T, N, b.data(), want.data());
  if (dt == DType::F16) want = round_f16(want);
  // bias_add's ops are prepared for 9 tokens whatever T (a forward of fewer than prepared).
  OpRun r(c, bias ? std::max(T, 9) : T);
  r.forward(T, 0);
  const double bound = bound_for(kElem, dt);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), bound), bound);
  if (bias) {
    std::vector<float> sum(want.size());
    cpu::add(want.data(), a.data(), T * N, sum.data());
    if (dt == DType::F16) sum = round_f16(sum);
    EXPECT_EQ(r.read(ty, T), want);  // one fp32 add (and the same fp16 rounding)
    EXPECT_EQ(r.read(tz, T), sum);
  }
  perf(r, c, T, 0);
}

std::vector<ElemCase> elementwise_cases() {
  std::vector<ElemCase> v;
  for (const char* f : {"add", "swiglu", "geglu", "scale", "softcap"})
    for (DType dt : {DType::F32, DType::F16}) v.push_back({f, dt, 133, 7});
  for (int T : {1, 9}) {
    v.push_back({"bias_add", DType::F32, 133, T});
    v.push_back({"bias_add", DType::F16, 133, T});
    v.push_back({"bias_add", DType::F32, 64, T});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsElementwise, ::testing::ValuesIn(elementwise_cases()),
                         [](const auto& p) { return p.param.name(); });

// argmax of a row of V (T = 1), or last_row then argmax of a forward of T rows (the gathered row
// equal to the input's last), or (rows > 0) a batched forward's argmax of `rows` output rows
// (argmax_rows.comp). Ties: the maximum placed several times (in different workgroups' chunks
// and inside one chunk), whose lowest index must win, as on the CPU.
struct ArgmaxCase {
  int64_t V;
  int T;
  std::vector<int64_t> ties;  // indices of the maximum in the last row (empty: random values)
  int rows = 0;
  std::string name() const {
    return case_name(std::string(rows    ? "argmax_rows" + std::to_string(rows)
                                 : T > 1 ? "last_row_argmax"
                                         : "argmax") +
                     "_V" + std::to_string(V) + "_T" + std::to_string(T) +
                     (ties.empty() ? "" : "_ties"));
  }
};
void PrintTo(const ArgmaxCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsArgmax : public ::testing::TestWithParam<ArgmaxCase> {};

TEST_P(VulkanOpsArgmax, MatchesTheCpu) {
  const ArgmaxCase& a = GetParam();
  const int64_t V = a.V;
  const int T = a.T;
  std::mt19937 rng(static_cast<unsigned>(V + T));
  if (a.rows > 0) {  // each output row's argmax, the ties in the last row
    std::vector<float> x = rand_vec(rng, static_cast<size_t>(a.rows * V), -10, 10);
    for (int64_t i : a.ties) x[static_cast<size_t>((a.rows - 1) * V + i)] = 20.0f;
    Case c;
    const int32_t tx = c.add("x", DType::F32, TK::Activation, {1, V}, bytes_f32(x));
    const int32_t ti = c.add("id", DType::I32, TK::Activation, {1, 1});
    c.op("argmax", {tx}, ti);
    OpRun r(c, a.rows, {}, false, a.rows);
    for (int rep = 0; rep < 2; ++rep) {  // (the second: the counters were reset)
      r.forward(1, 0);
      const std::vector<float> got = r.read(ti, a.rows);
      for (int k = 0; k < a.rows; ++k)
        EXPECT_EQ(got[static_cast<size_t>(k)], static_cast<float>(cpu::argmax(x.data() + k * V, V)))
            << "row " << k << ", forward " << rep;
      if (!a.ties.empty()) {
        EXPECT_EQ(got.back(), static_cast<float>(*std::min_element(a.ties.begin(), a.ties.end())));
      }
    }
    return;
  }
  std::vector<float> x = rand_vec(rng, static_cast<size_t>(T * V), -10, 10);
  float peak = 0;
  for (float v : x) peak = std::max(peak, v);
  for (int64_t i : a.ties) x[static_cast<size_t>((T - 1) * V + i)] = peak + 5.0f;
  Case c;
  const int32_t tx = c.add("x", DType::F32, TK::Activation, {T > 1 ? -1 : 1, V}, bytes_f32(x));
  const int32_t ti = c.add("id", DType::I32, TK::Activation, {1, 1});
  int32_t tl = tx;
  if (T > 1) {
    tl = c.add("last", DType::F32, TK::Activation, {1, V});
    c.op("last_row", {tx}, tl);
  }
  c.op("argmax", {tl}, ti);
  OpRun r(c, T);
  r.forward(T, 0);
  const std::vector<float> last(x.end() - V, x.end());
  if (T > 1) {
    EXPECT_EQ(r.read(tl, 1), last);
  }
  const float got = r.read(ti, 1)[0];
  EXPECT_EQ(got, static_cast<float>(cpu::argmax(last.data(), V)));
  if (!a.ties.empty()) {
    EXPECT_EQ(got, static_cast<float>(*std::min_element(a.ties.begin(), a.ties.end())));
  }
  perf(r, c, T, 0);
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsArgmax,
                         ::testing::Values(ArgmaxCase{1, 1, {}}, ArgmaxCase{63, 1, {}},
                                           ArgmaxCase{151936, 1, {}},
                                           ArgmaxCase{128256, 1, {70001, 5000, 5001, 128255}},
                                           ArgmaxCase{1000, 6, {417, 803}},
                                           ArgmaxCase{97, 1, {}, 3},
                                           ArgmaxCase{50000, 1, {49999, 20480, 2049, 2048}, 5}),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace vkllm::test::table
