// The op table's fusion cases (op_table.h): each fused kernel against the same program made
// unfusable, bit for bit, and against the CPU reference within its op's bound.
// - Producers of linear_8da4w's int8 rows: a norm whose output only linear_8da4w ops read
//   quantizes its rows itself (rms_norm_quant) and the linears skip their quantization pass;
//   swiglu and geglu likewise (swiglu_quant, geglu_quant); an add right before a norm is computed
//   by the norm's kernel (rms_norm_add[_quant]).
// - A last_row read only by the norm after it records nothing: the norm reads row T - 1 in place.
// - The prefill attention run (vk_fusion.h kPrefillPatterns: [rms_norm x2+] rope x2+attention):
//   the norms and ropes of q and k in the prefill attention's q loads and KV store.
// The decode step's patterns (kPatterns: mat-vec, tail, head and attention runs, decode chains)
// run in whole programs: VulkanFusion (test_vk_executor.cpp).
#include <cmath>

#include "backend/vulkan/vk_ops_internal.h"
#include "op_table.h"

namespace vkllm::test::table {
namespace {

enum class Producer { Norm, AddNorm, Swiglu, Geglu };
struct ProducerCase {
  Producer pr;
  DType act;
  int T;
  uint32_t rows_to = 0;  // > 0: Tuning::gemm_from 2 and gemm_rows_to, the linears' rows kernel
  uint32_t few_to = 0;   // > 0: Tuning::gemm_few_rows_to (these 40-row linears are few-row ones)
  std::string name() const {
    static const char* n[] = {"rms_norm_quant", "add_rms_norm_quant", "swiglu_quant",
                              "geglu_quant"};
    return case_name(std::string(n[static_cast<int>(pr)]) + "_2x_linear_8da4w_G32_" +
                     dtype_name(act) + "_K256_N40_T" + std::to_string(T) +
                     (rows_to ? "_rows" + std::to_string(rows_to) : "") +
                     (few_to ? "_few" + std::to_string(few_to) : ""));
  }
};
void PrintTo(const ProducerCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsFusedProducer : public ::testing::TestWithParam<ProducerCase> {};

// The producer, then two linear_8da4w reading its output h. Unfused: for the add, an op between
// it and the norm; otherwise another reader of h. The same values, int8 scratch and linear
// outputs, bit for bit; h within its op's bound of the CPU's; the linears within the matmul bound.
TEST_P(VulkanOpsFusedProducer, EqualsTheUnfusedOps) {
  const Producer pr = GetParam().pr;
  const DType act = GetParam().act;
  const int T = GetParam().T;
  const int64_t K = 256, N = 40, G = 32;
  std::vector<std::vector<uint8_t>> outs[2];
  for (int fused = 1; fused >= 0; --fused) {
    std::mt19937 rng(7);
    Case c;
    auto x = rand_vec(rng, static_cast<size_t>(T * K), -3, 3),
         x2 = rand_vec(rng, static_cast<size_t>(T * K), -3, 3),
         w = rand_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
    if (act == DType::F16) x = round_f16(x), x2 = round_f16(x2);
    const int32_t tx = c.add("x", act, TK::Activation, {-1, K}, enc(act, x));
    const int32_t tx2 = c.add("x2", act, TK::Activation, {-1, K}, enc(act, x2));
    const int32_t tw = c.add("w", DType::F32, TK::Weight, {K}, bytes_f32(w));
    const int32_t th = c.add("h", act, TK::Activation, {-1, K});
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
    const bool glu = pr == Producer::Swiglu || pr == Producer::Geglu;
    if (pr == Producer::Swiglu) {
      c.op("swiglu", {tx, tx2}, th);
      cpu::swiglu(x.data(), x2.data(), T * K, hn.data());
    } else if (pr == Producer::Geglu) {
      c.op("geglu", {tx, tx2}, th);
      cpu::geglu(x.data(), x2.data(), T * K, hn.data());
    } else {
      c.op("rms_norm", {tsum >= 0 ? tsum : tx, tw}, th, {{"eps", 1e-6}, {"group", K}});
      cpu::rms_norm(sum.data(), T, K, w.data(), K, 1e-6f, hn.data());
    }
    if (act == DType::F16) hn = round_f16(hn);
    const size_t producer = c.p.ops.size() - 1;
    auto q = rand_q4(rng, N, K);
    auto sc = rand_vec(rng, static_cast<size_t>(N * K / G), 0.01f, 0.1f);
    const auto ws = q4_group_sums(q, N, K, G);
    const int32_t tq = c.add("wq", DType::Q4, TK::Weight, {N, K}, q);
    const int32_t ts = c.add("ws", DType::F32, TK::Weight, {N, K / G}, bytes_f32(sc));
    const int32_t twsum = c.add("wsum", DType::I32, TK::Weight, {N, K / G}, bytes_of(ws));
    const int32_t ty = c.add("y", act, TK::Activation, {-1, N});
    const int32_t ty2 = c.add("y2", act, TK::Activation, {-1, N});
    c.op("linear_8da4w", {th, tq, ts, twsum}, ty, {{"group", G}});
    c.op("linear_8da4w", {th, tq, ts, twsum}, ty2, {{"group", G}});
    if (!fused && pr != Producer::AddNorm)
      c.op("add", {th, th}, c.add("hh", act, TK::Activation, {-1, K}));
    VulkanOptions opt;
    if (GetParam().rows_to) {
      opt.tuning.gemm_from = 2;
      opt.tuning.gemm_rows_to = GetParam().rows_to;
    }
    opt.tuning.gemm_few_rows_to = GetParam().few_to;
    OpRun r(c, T, opt);
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
    const double hb = bound_for(glu ? kElem : kNorm, act);
    EXPECT_LE(logged(nmse(h, hn), hb), hb) << "fused=" << fused;
    // The linears against the CPU's on the device's own h: a device whose norm rounds an ulp
    // away from the CPU's (NVIDIA's rsqrt) flips int8 codes, which is the norm's matter, not
    // theirs.
    std::vector<float> want(static_cast<size_t>(T * N));
    cpu::linear_8da4w(h.data(), T, K, q.data(), sc.data(), ws.data(), N, G, want.data());
    if (act == DType::F16) want = round_f16(want);
    EXPECT_LE(logged(nmse(y, want), bound_for(kMat, act)), bound_for(kMat, act))
        << "fused=" << fused;
    if (fused) perf(r, c, T, 0, 2 * 2.0 * double(T) * double(K) * double(N));
  }
  for (size_t i = 0; i < outs[0].size(); ++i) {
    size_t first = outs[0][i].size(), n = 0;
    for (size_t b = 0; b < std::min(outs[0][i].size(), outs[1][i].size()); ++b)
      if (outs[0][i][b] != outs[1][i][b]) first = std::min(first, b), ++n;
    EXPECT_TRUE(outs[0][i] == outs[1][i])
        << "part " << i << " (0 the int8 scratch, 1 its scales, 2 h, 3 y, 4 the sum): " << n
        << " bytes differ, the first at " << first;
  }
}

// At 20 tokens the linears run the tiled GEMM, and the scratch is stored in its order; with
// rows_to, or few_to at 16-31 tokens, the rows kernel where the device has int8 cooperative
// matrices (elsewhere the tiles or the mat-vecs). (On an H100 the fp16 rows cases fail: docs/perf.md, "Many streams".)
INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsFusedProducer,
                         ::testing::Values(ProducerCase{Producer::Norm, DType::F32, 3},
                                           ProducerCase{Producer::Norm, DType::F32, 20},
                                           ProducerCase{Producer::Norm, DType::F16, 1},
                                           ProducerCase{Producer::Swiglu, DType::F32, 20},
                                           ProducerCase{Producer::Swiglu, DType::F16, 20},
                                           ProducerCase{Producer::Swiglu, DType::F16, 1},
                                           ProducerCase{Producer::Geglu, DType::F32, 20},
                                           ProducerCase{Producer::Geglu, DType::F16, 1},
                                           ProducerCase{Producer::AddNorm, DType::F32, 3},
                                           ProducerCase{Producer::AddNorm, DType::F16, 20},
                                           ProducerCase{Producer::AddNorm, DType::F16, 1},
                                           ProducerCase{Producer::Norm, DType::F32, 20, 32},
                                           ProducerCase{Producer::Norm, DType::F16, 20, 32},
                                           ProducerCase{Producer::Swiglu, DType::F32, 20, 32},
                                           ProducerCase{Producer::Swiglu, DType::F16, 9, 32},
                                           ProducerCase{Producer::Swiglu, DType::F16, 16, 32},
                                           ProducerCase{Producer::Swiglu, DType::F16, 20, 32},
                                           ProducerCase{Producer::AddNorm, DType::F16, 20, 32},
                                           ProducerCase{Producer::Norm, DType::F16, 16, 0, 32},
                                           ProducerCase{Producer::Swiglu, DType::F16, 20, 0, 32},
                                           ProducerCase{Producer::AddNorm, DType::F16, 31, 0, 32}),
                         [](const auto& p) { return p.param.name(); });

// last_row then rms_norm (the end of every forward): the output equals the CPU's norm of the last
// row, and the last_row's own output is never written (it keeps the harness's NaN poison).
struct LastRowCase {
  DType dt;
  int T;
  std::string name() const {
    return case_name(std::string("last_row_rms_norm_") + dtype_name(dt) + "_N1000_T" +
                     std::to_string(T));
  }
};
void PrintTo(const LastRowCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsFusedLastRow : public ::testing::TestWithParam<LastRowCase> {};

TEST_P(VulkanOpsFusedLastRow, NormReadsTheRowInPlace) {
  const DType dt = GetParam().dt;
  const int T = GetParam().T;
  const int64_t N = 1000;
  std::mt19937 rng(static_cast<unsigned>(T));
  Case c;
  auto x = rand_vec(rng, static_cast<size_t>(T * N), -3, 3),
       w = rand_vec(rng, static_cast<size_t>(N), 0.5f, 1.5f);
  if (dt == DType::F16) x = round_f16(x);
  const int32_t tx = c.add("x", dt, TK::Activation, {-1, N}, enc(dt, x));
  const int32_t tl = c.add("last", dt, TK::Activation, {1, N});
  const int32_t tw = c.add("w", DType::F32, TK::Weight, {N}, bytes_f32(w));
  const int32_t ty = c.add("y", dt, TK::Activation, {1, N});
  c.op("last_row", {tx}, tl);
  c.op("rms_norm", {tl, tw}, ty, {{"eps", 1e-6}, {"group", N}});
  std::vector<float> want(static_cast<size_t>(N));
  cpu::rms_norm(x.data() + (T - 1) * N, 1, N, w.data(), N, 1e-6f, want.data());
  if (dt == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, 0);
  const double bound = bound_for(kNorm, dt);
  EXPECT_LE(logged(nmse(r.read(ty, 1), want), bound), bound);
  for (float v : r.read(tl, 1)) ASSERT_TRUE(std::isnan(v)) << "last_row was not fused";
  perf(r, c, T, 0);
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsFusedLastRow,
                         ::testing::Values(LastRowCase{DType::F32, 1}, LastRowCase{DType::F32, 5},
                                           LastRowCase{DType::F16, 1}, LastRowCase{DType::F16, 5}),
                         [](const auto& p) { return p.param.name(); });

// The prefill attention run against the unfused ops bit for bit (output and caches), and against
// the CPU's rope and attention within the attention bound. On a GPU with fp16 cooperative
// matrices the fp16 cases at head dims 64 and 128 take attention_prefill_coopmat.comp, the others
// attention_prefill.comp. With qk_norm: Qwen3's per-head norms of q and k before the ropes.
struct RunCase {
  int H, Hkv, hd, R, T, pos;
  DType act, cache;
  bool long_table, qk_norm;
  AttVar var = AttVar::Default;
  int win = 0;  // the attention's sliding window (Gemma 3), 0: none
  std::string name() const {
    return case_name(std::string(qk_norm ? "rms_norm_x2_" : "") + "rope_x2_attention_H" +
                     std::to_string(H) + "_KV" + std::to_string(Hkv) + "_hd" + std::to_string(hd) +
                     "_R" + std::to_string(R) + "_" + dtype_name(act) + "_cache" +
                     dtype_name(cache) + "_T" + std::to_string(T) + "_pos" + std::to_string(pos) +
                     (long_table ? "_longrope" : "") + att_var_name(var) +
                     (win ? "_window" + std::to_string(win) : ""));
  }
};
void PrintTo(const RunCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsFusedPrefillAttention : public ::testing::TestWithParam<RunCase> {};

TEST_P(VulkanOpsFusedPrefillAttention, EqualsTheUnfusedOps) {
  const RunCase& rc = GetParam();
  const int H = rc.H, Hkv = rc.Hkv, hd = rc.hd, R = rc.R, T = rc.T, pos = rc.pos;
  const DType act = rc.act, cache = rc.cache;
  if (variant_inert_here(rc.var, hd, act, cache, H / Hkv)) return;
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
  if (rc.long_table) {
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
  std::vector<float> wq = rand_vec(rng, static_cast<size_t>(hd), 0.5f, 1.5f),
                     wk = rand_vec(rng, static_cast<size_t>(hd), 0.5f, 1.5f);
  const float eps = 1e-6f;
  int32_t q_in = tq, k_in = tk;
  if (rc.qk_norm) {
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
  nlohmann::json aa = {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", hd}, {"scale", scale}};
  if (rc.win) aa["window"] = rc.win;
  c.op("attention", {tqr, tkr, tv, tkc, tvc}, ty, aa);
  // The CPU: rope (rounded as the rope op stores it), then the attention.
  const bool use_long = rc.long_table && pos + T > orig;
  std::vector<float> qn = q, kn = k, qr(q.size()), kr(k.size()), want(q.size());
  if (rc.qk_norm) {
    cpu::rms_norm(q.data(), T, int64_t(H) * hd, wq.data(), hd, eps, qn.data());
    cpu::rms_norm(k.data(), T, W, wk.data(), hd, eps, kn.data());
    if (act == DType::F16) qn = round_f16(qn), kn = round_f16(kn);
  }
  cpu::rope(qn.data(), T, H, hd, R, use_long ? fl.data() : fs.data(), pos, a, qr.data());
  cpu::rope(kn.data(), T, Hkv, hd, R, use_long ? fl.data() : fs.data(), pos, a, kr.data());
  if (act == DType::F16) qr = round_f16(qr), kr = round_f16(kr);
  cpu::attention(qr.data(), kr.data(), v.data(), T, pos, kc.data(), vc.data(), cache == DType::F16,
                 H, Hkv, hd, scale, want.data(), rc.win);
  if (act == DType::F16) want = round_f16(want);
  std::vector<float> outs[2], kcs[2], vcs[2];
  for (int fused = 1; fused >= 0; --fused) {
    VulkanOptions o;
    o.tuning = att_tuning(rc.var);
    OpRun r(c, T, o, fused == 1);
    // (A windowed run is not planned where the cooperative-matrix kernel would run.)
    const bool coopmat =
        vk::detail::prefill_attention(r.ctx(), hd, act == DType::F16, cache == DType::F16, H / Hkv)
            .coopmat;
    EXPECT_EQ(r.runs().size(), size_t(fused && !(rc.win && coopmat)))
        << "the prefill attention run";
    if (fused && rc.qk_norm && !r.runs().empty()) {
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
    if (fused) perf(r, c, T, pos, 4.0 * H * hd * (double(T) * pos + double(T) * (T + 1) / 2));
  }
  EXPECT_EQ(outs[1], outs[0]) << "fused output differs from the unfused ops'";
  EXPECT_EQ(kcs[1], kcs[0]) << "fused key cache differs";
  EXPECT_EQ(vcs[1], vcs[0]) << "fused value cache differs";
  const double bound = bound_for(kAttn, act);
  EXPECT_LE(logged(nmse(outs[1], want), bound), bound);
  if (rc.qk_norm) {  // (the norm's sums differ in order from the CPU's)
    EXPECT_LE(logged(nmse(kcs[1], kc), bound), bound);
  } else {
    EXPECT_EQ(kcs[1], kc);  // the rotated keys, rounded like the CPU's
  }
}

// Llama-3.2-1B's shapes (head dim 64, full rotary, fp16), Phi-4-mini's (head dim 128, rotary 96,
// fp32, longrope's switch inside the forward), Qwen3's (head dim 128, fp16, the q/k norms), an
// odd head dim; several query blocks after cached keys; the fp16 cases again in each
// cooperative-matrix variant; Gemma 3's sliding windows (a forward below, across and past the
// window's edge after cached keys; one from position 0 whose later rows drop the first keys, with
// one KV head: a key norm over the whole row, as Gemma 3's).
std::vector<RunCase> prefill_run_cases() {
  const DType f32 = DType::F32, f16 = DType::F16;
  std::vector<RunCase> v = {{8, 2, 64, 64, 150, 30, f16, f16, false, false},
                            {6, 2, 128, 96, 100, 20, f32, f32, true, false},
                            {4, 2, 128, 128, 70, 0, f16, f16, false, true},
                            {3, 3, 64, 32, 40, 5, f32, f32, false, true},
                            {4, 1, 24, 16, 9, 3, f32, f16, true, false}};
  v.push_back({4, 2, 64, 64, 40, 30, f32, f32, false, true, AttVar::Default, 37});
  v.push_back({4, 1, 128, 128, 70, 0, f32, f32, false, true, AttVar::Default, 50});
  for (AttVar var : {AttVar::Gqa, AttVar::Portable}) {
    v.push_back({8, 2, 64, 64, 150, 30, f16, f16, false, false, var});
    v.push_back({4, 2, 128, 128, 70, 0, f16, f16, false, true, var});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsFusedPrefillAttention,
                         ::testing::ValuesIn(prefill_run_cases()),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace vkllm::test::table
