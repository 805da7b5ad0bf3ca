// The op table's linear families (op_table.h): linear (f32 and f16 weights), linear_q4w and
// linear_8da4w (groups of 8, 16, 32, 64, 128, 256) against the CPU reference kernels, at the
// token counts whose kernels differ: T = 1 the decode mat-vec, 2-15 the mat-vec of a few rows (the
// batched decode step), 16 and more the tiled GEMM, in one or several token tiles. linear_8da4w's
// int8 activation quantization (scales, zero points, every code) is bit-exact with the CPU's in
// every case, and its tiled GEMM's output too (groups of 32 or more). Tuning variants: the GEMM's
// tiles and paths, the decode mat-vec's parts and workgroup sizes, the streamed decode mat-vecs,
// the portable integer dot product, weights in row chunks (max_binding_bytes); a variant whose
// kernel promises the default's bits is compared with the default run bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "backend/vulkan/vk_ops_internal.h"
#include "op_table.h"

namespace vkllm::test::table {
namespace {

// Activations: Normal; Wide: token rows scaled by powers of two from 2^-30 to 2^29, so the int8
// quantization's divisions see every kind of exponent; Halfway: every quotient x / scale within
// a few ulp of a rounding boundary k + 0.5 (the case a fast reciprocal path could get wrong).
enum class XDist { Normal, Wide, Halfway };
// How a variant's output relates to its base run's: not compared; bit-identical; different (the
// variant's kernel sums in another order, which shows it ran; fp32 outputs only).
enum class Rel { None, Same, Differs };

struct LinCase {
  Lin kind;
  int64_t K, N, G;
  int T;
  DType act;
  XDist dist = XDist::Normal;
  std::string var;  // the tuning variant's name ("": the defaults)
  VulkanOptions opt;
  Rel rel = Rel::None;
  std::string base_var;
  VulkanOptions base;
  bool exact = false;  // the output bit-identical with the CPU's

  std::string name() const {
    static const char* kinds[] = {"linear_f32w", "linear_f16w", "linear_q4w", "linear_8da4w"};
    std::string s = kinds[static_cast<int>(kind)];
    if (kind == Lin::Q4W || kind == Lin::A8W4) s += "_G" + std::to_string(G);
    s += std::string("_") + dtype_name(act) + "_K" + std::to_string(K) + "_N" + std::to_string(N) +
         "_T" + std::to_string(T);
    if (dist == XDist::Wide) s += "_wide";
    if (dist == XDist::Halfway) s += "_halfway";
    if (!var.empty()) s += "_" + var;
    return case_name(s);
  }
};
void PrintTo(const LinCase& c, std::ostream* os) {
  *os << c.name();
}

std::vector<float> make_x(const LinCase& c, std::mt19937& rng) {
  const int T = c.T;
  const int64_t K = c.K;
  auto x = rand_vec(rng, static_cast<size_t>(T * K));
  if (c.dist == XDist::Wide)
    for (int t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) x[t * K + k] = std::ldexp(x[t * K + k], (t * 7) % 60 - 30);
  if (c.dist == XDist::Halfway)
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
  if (c.act == DType::F16) x = round_f16(x);
  return x;
}

// One run of the case under `opt`: the output against the CPU's within the linear bound (exactly
// where c.exact), linear_8da4w's int8 scratch against the CPU's quantization bit for bit. Returns
// the output.
std::vector<float> run_linear(const LinCase& c, const VulkanOptions& opt, bool timed) {
  const int T = c.T;
  const int64_t K = c.K, N = c.N, G = c.G;
  std::mt19937 rng(static_cast<unsigned>(K * 31 + N + T));
  Case cs;
  const auto x = make_x(c, rng);
  const int32_t tx = cs.add("x", c.act, TK::Activation, {-1, K}, enc(c.act, x));
  const int32_t ty = cs.add("y", c.act, TK::Activation, {-1, N});
  std::vector<float> want(static_cast<size_t>(T * N));
  if (c.kind == Lin::F32 || c.kind == Lin::F16) {
    auto w = rand_vec(rng, static_cast<size_t>(N * K));
    if (c.kind == Lin::F16) {
      std::vector<uint16_t> h(w.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(w[i]);
      cpu::linear_f16(x.data(), T, K, h.data(), N, want.data());
    } else {
      cpu::linear_f32(x.data(), T, K, w.data(), N, want.data());
    }
    const DType wdt = c.kind == Lin::F16 ? DType::F16 : DType::F32;
    cs.op("linear", {tx, cs.add("w", wdt, TK::Weight, {N, K}, enc(wdt, w))}, ty);
  } else {
    auto q = rand_q4(rng, N, K);
    auto s = rand_vec(rng, static_cast<size_t>(N * K / G), 0.01f, 0.1f);
    const int32_t tq = cs.add("wq", DType::Q4, TK::Weight, {N, K}, q);
    const int32_t ts = cs.add("ws", DType::F32, TK::Weight, {N, K / G}, bytes_f32(s));
    if (c.kind == Lin::Q4W) {
      cpu::linear_q4w(x.data(), T, K, q.data(), s.data(), N, G, want.data());
      cs.op("linear_q4w", {tx, tq, ts}, ty, {{"group", G}});
    } else {
      const auto ws = q4_group_sums(q, N, K, G);
      cpu::linear_8da4w(x.data(), T, K, q.data(), s.data(), ws.data(), N, G, want.data());
      const int32_t tws = cs.add("wsum", DType::I32, TK::Weight, {N, K / G}, bytes_of(ws));
      cs.op("linear_8da4w", {tx, tq, ts, tws}, ty, {{"group", G}});
    }
  }
  if (c.act == DType::F16) want = round_f16(want);
  OpRun r(cs, T, opt);
  if (T >= static_cast<int>(vk::detail::GemmPlan::kTokens))
    std::printf("tiled GEMM path: %s\n", c.kind == Lin::A8W4
                                             ? (r.ctx().use_coopmat()   ? "int8 cooperative matrix"
                                                : r.ctx().use_int_dot() ? "int8 dot product"
                                                                        : "portable integer")
                                         : r.ctx().use_coopmat_f16() && c.kind == Lin::F16 &&
                                                 c.act == DType::F16 && K % 8 == 0
                                             ? "fp16 cooperative matrix"
                                             : "portable float");
  // linear_8da4w on the matrix units from gemm_from tokens: the tiles from GemmPlan::kTokens, the
  // rows kernel below, bit-exact with the CPU where K has at most 16 groups (its subgroups' sums
  // then are the groups' terms, added in group order).
  const bool on_mm =
      c.kind == Lin::A8W4 && G % 32 == 0 && T >= static_cast<int>(vk::detail::gemm_from(r.ctx()));
  if (on_mm && T < static_cast<int>(vk::detail::GemmPlan::kTokens))
    std::printf("rows on the int8 cooperative matrices (%lld groups)\n",
                static_cast<long long>(K / G));
  r.forward(T, 0);
  auto got = r.read(ty, T);
  const double bound = bound_for(kMat, c.act);
  EXPECT_LE(logged(nmse(got, want), bound), bound);
  if (c.exact || (on_mm && K / G <= 16)) {
    size_t diff = 0;
    for (size_t i = 0; i < got.size() && got.size() == want.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0u) << "outputs differ from the CPU's of " << got.size();
  }
  if (c.kind == Lin::A8W4) {  // the int8 quantization is bit-exact with the CPU's
    auto qx = r.read_bytes(r.env().act_q, static_cast<size_t>(T * K));
    auto qp = r.read_bytes(r.env().act_qp, static_cast<size_t>(T * 8));
    // A forward on the matrix units (on_mm, G % 32 == 0) has its scratch hold each eight codes
    // e0..e7 as e0 e2 e4 e6 e1 e3 e5 e7 (quant.glsl).
    const bool gemm_order = on_mm;
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
  if (timed) perf(r, cs, T, 0, 2.0 * double(T) * double(K) * double(N));
  return got;
}

class VulkanOpsLinear : public ::testing::TestWithParam<LinCase> {};

TEST_P(VulkanOpsLinear, MatchesTheCpu) {
  const LinCase& c = GetParam();
  const auto got = run_linear(c, c.opt, true);
  if (c.base_var.empty()) return;
  const auto base = run_linear(c, c.base, false);  // (within the CPU's bound too)
  if (c.rel == Rel::Same) {
    EXPECT_EQ(got, base) << "the variant's bits differ from " << c.base_var;
  } else if (c.rel == Rel::Differs) {
    EXPECT_NE(got, base) << "the variant's kernel did not run (bits equal to " << c.base_var << ")";
  }
}

// The token counts every linear family is checked at (the decode step, the batched decode
// step's 2-15 rows on each side of the 4-token tile, the tiled GEMM's first token tile, beyond it
// and its full tile).
constexpr int kSweep[] = {1, 2, 3, 4, 5, 8, 15, 16, 17, 64};

std::vector<LinCase> linear_cases() {
  std::vector<LinCase> v;
  std::set<std::string> names;
  auto add = [&](LinCase c) {
    if (names.insert(c.name()).second) v.push_back(std::move(c));
  };
  auto lin = [](Lin kind, int64_t K, int64_t N, int T, DType act, int64_t G = 32) {
    LinCase c{kind, K, N, G, T, act};
    c.exact =
        kind == Lin::A8W4 && G % 32 == 0 && T >= static_cast<int>(vk::detail::GemmPlan::kTokens);
    return c;
  };
  auto sweep = [&](Lin kind, int64_t K, int64_t N, DType act, int64_t G,
                   std::initializer_list<int> extra) {
    for (int T : kSweep) add(lin(kind, K, N, T, act, G));
    for (int T : extra) add(lin(kind, K, N, T, act, G));
  };
  // Each family at every token count; K and N not multiples of the workgroup or tile sizes.
  sweep(Lin::F32, 100, 77, DType::F32, 32, {13, 70});
  sweep(Lin::F16, 100, 77, DType::F32, 32, {6});
  sweep(Lin::F16, 100, 77, DType::F16, 32, {6, 33});
  sweep(Lin::Q4W, 96, 45, DType::F32, 32, {6});
  sweep(Lin::A8W4, 160, 45, DType::F32, 32, {6});
  sweep(Lin::A8W4, 112, 45, DType::F32, 16, {6});   // the four-weights-at-a-time path
  sweep(Lin::A8W4, 256, 45, DType::F32, 128, {6});  // one scale for four 32-weight blocks
  // The rows kernel (Tuning::gemm_from: forwards of 2-15 tokens on int8 cooperative matrices;
  // elsewhere the mat-vecs run): few groups, more groups than subgroups (72: a subgroup sums 4 or
  // 5 of them), groups of 128 and 256 (nibbles widened to q, not 16 q), fp16, one and two token
  // fragments.
  auto rows = [](LinCase c) {
    c.opt.tuning.gemm_from = 2;
    c.var = "rows";
    return c;
  };
  for (int T : {2, 5, 8, 9, 15}) add(rows(lin(Lin::A8W4, 160, 45, T, DType::F32, 32)));
  for (int T : {4, 12}) add(rows(lin(Lin::A8W4, 2304, 45, T, DType::F32, 32)));
  add(rows(lin(Lin::A8W4, 256, 45, 6, DType::F32, 128)));
  add(rows(lin(Lin::A8W4, 512, 70, 6, DType::F32, 256)));
  add(rows(lin(Lin::A8W4, 256, 33, 5, DType::F16, 32)));
  // fp16 activations of the quantized families.
  for (int T : {1, 3, 16, 20}) add(lin(Lin::Q4W, 160, 45, T, DType::F16));
  for (int T : {1, 5, 16}) add(lin(Lin::A8W4, 256, 33, T, DType::F16));
  // The float tiled GEMM (linear_mm.comp; fp16 x fp16 with K % 8 == 0 on cooperative matrices,
  // linear_mm_coopmat.comp, where the device has them): a chunk and a half, four chunks over two
  // token and three row tiles, K % 4 != 0 (the loads one at a time), int4 groups of 8 that do not
  // divide the chunk.
  add(lin(Lin::F16, 96, 77, 33, DType::F16));
  add(lin(Lin::F16, 200, 130, 70, DType::F16));
  for (int T : {16, 70}) {
    add(lin(Lin::F16, 72, 130, T, DType::F32));
    add(lin(Lin::Q4W, 96, 77, T, DType::F32));
    add(lin(Lin::Q4W, 200, 65, T, DType::F32, 8));
  }
  add(lin(Lin::F32, 90, 70, 20, DType::F32));
  add(lin(Lin::F16, 90, 70, 20, DType::F16));
  add(lin(Lin::Q4W, 112, 45, 3, DType::F32, 16));
  add(lin(Lin::A8W4, 128, 300, 1, DType::F32, 128));
  // int8 quantization over 2048-wide rows of every magnitude, and at rounding boundaries.
  {
    LinCase w = lin(Lin::A8W4, 2048, 5, 64, DType::F32);
    w.dist = XDist::Wide;
    add(w);
    LinCase h = lin(Lin::A8W4, 2048, 5, 24, DType::F32);
    h.dist = XDist::Halfway;
    add(h);
  }
  // Weights in row chunks (the binding-size limit): 10-row chunks, four chunks of the GEMM's
  // weight each its columns of y, linear_8da4w's GEMM in chunks of 128 and 72 rows.
  auto chunked = [](LinCase c, uint64_t bytes) {
    c.opt.max_binding_bytes = bytes;
    c.var = "chunked" + std::to_string(bytes);
    return c;
  };
  add(chunked(lin(Lin::F32, 100, 77, 5, DType::F32), 4096));
  add(chunked(lin(Lin::Q4W, 96, 77, 5, DType::F32), 4096));
  add(chunked(lin(Lin::A8W4, 96, 77, 5, DType::F32), 4096));
  add(chunked(lin(Lin::F32, 56, 60, 16, DType::F32), 4096));
  add(chunked(lin(Lin::A8W4, 256, 200, 16, DType::F32), 16384));
  // The float mat-vec eight values a lane at a time (Tuning::linear_vec8, K % 8 == 0): fewer words
  // than a subgroup's lanes (200), a row of two-word steps and a last word (1000, 2056), fp32 and
  // fp16 weights and activations, the batched step's rows, weights in row chunks.
  // (fp32 outputs: the bits differ from the default's one value at a time, so the path ran.)
  auto vec8 = [](LinCase c) {
    c.opt.tuning.linear_vec8 = true;
    c.var = "vec8";
    if (c.act == DType::F32 && c.K > 256) {
      c.rel = Rel::Differs;
      c.base_var = "one value a lane at a time";
    }
    return c;
  };
  for (int T : {1, 4, 15}) {
    add(vec8(lin(Lin::F16, 1000, 77, T, DType::F16)));
    add(vec8(lin(Lin::F32, 2056, 45, T, DType::F32)));
  }
  add(vec8(lin(Lin::F16, 200, 77, 1, DType::F32)));
  add(vec8(lin(Lin::F16, 2056, 33, 3, DType::F16)));
  add(chunked(vec8(lin(Lin::F16, 1000, 77, 2, DType::F16)), 16000));
  // The portable integer dot product: the int8-dot path's bits.
  for (int T : {1, 6}) {
    LinCase c = lin(Lin::A8W4, 160, 45, T, DType::F32);
    c.var = "portable_dot";
    c.opt.no_int_dot = true;
    c.rel = Rel::Same;
    c.base_var = "the int8 dot product path";
    add(c);
  }
  // linear_8da4w's tiled GEMM (linear_8da4w_mm*.comp) at each tile this device's rule can take,
  // bit-exact with the CPU: 32-, 64-, 128-token tiles (128 on the integer paths where K is staged
  // in chunks of 64 or more: the G = 32 shape falls back to the default), the portable integer path
  // at 128, 64 tokens x 128 rows (cooperative matrices: K in chunks of 64; elsewhere the rows fall
  // back to 64); and the rule (32 x 64 on cooperative matrices for these few rows). Sizes not
  // multiples of the tile, each K chunk it stages (groups of 32, 64, 128, 256), fp16 outputs.
  struct GemmShape {
    int64_t K, N;
    int T;
    int64_t G;
    DType act;
  };
  const GemmShape gemm[] = {{256, 77, 16, 32, DType::F32},  {256, 130, 65, 128, DType::F32},
                            {384, 64, 130, 64, DType::F32}, {128, 45, 17, 128, DType::F32},
                            {256, 70, 40, 128, DType::F16}, {512, 70, 20, 256, DType::F32}};
  for (const GemmShape& g : gemm) {
    add(lin(Lin::A8W4, g.K, g.N, g.T, g.act, g.G));  // the rule
    for (uint32_t tile : {32u, 64u, 128u}) {
      LinCase c = lin(Lin::A8W4, g.K, g.N, g.T, g.act, g.G);
      c.opt.tuning.gemm_tile = tile;
      c.var = "tile" + std::to_string(tile);
      add(c);
    }
    LinCase p = lin(Lin::A8W4, g.K, g.N, g.T, g.act, g.G);
    p.opt.tuning.gemm_tile = 128;
    p.opt.no_int_dot = p.opt.no_coopmat = true;
    p.var = "tile128_portable";
    add(p);
    LinCase w = lin(Lin::A8W4, g.K, g.N, g.T, g.act, g.G);
    w.opt.tuning.gemm_tile = 64;
    w.opt.tuning.gemm_rows = 128;
    w.var = "tile64x128";
    add(w);
  }
  // The decode mat-vec cut into 2 or 8 parts a row: 256-thread workgroups give the bits of
  // 64-thread ones. Rows not a multiple of a workgroup's, a lane's last blocks past the row,
  // groups of 64 and 128, fp16 output with the weights in row chunks.
  struct PartsShape {
    int64_t K, N, G;
    DType act;
    uint64_t max_binding;
  };
  for (const PartsShape& sh :
       {PartsShape{2304, 45, 64, DType::F32, 0}, PartsShape{1024, 200, 128, DType::F16, 16384}})
    for (uint32_t parts : {2u, 8u}) {
      LinCase c = lin(Lin::A8W4, sh.K, sh.N, 1, sh.act, sh.G);
      c.opt.max_binding_bytes = c.base.max_binding_bytes = sh.max_binding;
      c.opt.tuning.matvec_parts = c.base.tuning.matvec_parts = parts;
      c.opt.tuning.matvec_wg = 256;
      c.base.tuning.matvec_wg = 64;
      c.var = "parts" + std::to_string(parts) + "_wg256";
      c.rel = Rel::Same;
      c.base_var = "64-thread workgroups";
      add(c);
    }
  // The streamed decode mat-vecs (Tuning::mv 1) against the older decode kernels (mv 0): every
  // group size they take (one to eight blocks a group), widths whose groups do not fill the lanes,
  // rows that do not fill a row set, fp16 activations, weights in row chunks, each depth, batch
  // count and grid, and the 8da4w weight sums from the nibbles. linear_8da4w_mv has the bits of
  // matvec_decode; linear_q4w_mv sums in another order than linear_q4w.comp, so its fp32 outputs
  // differ in the last bits (it ran). The widest rows: 8,192 (8da4w), 7,680 (q4w: the widest of
  // 128-groups whose padded copy fits lavapipe's 32 KiB of shared memory).
  struct MvSetting {
    uint32_t depth, batches, groups;  // 0: the default
    bool wsum;
  };
  for (Lin kind : {Lin::A8W4, Lin::Q4W}) {
    const PartsShape shapes[] = {{256, 45, 128, DType::F32, 0},
                                 {1024, 301, 32, DType::F32, 0},
                                 {2304, 37, 64, DType::F16, 0},
                                 {768, 203, 256, DType::F32, 0},
                                 {384, 200, 128, DType::F16, 16384},
                                 {kind == Lin::A8W4 ? 8192 : 7680, 9, 128, DType::F32, 0}};
    for (const PartsShape& sh : shapes)
      for (const MvSetting& st :
           {MvSetting{0, 0, 0, false}, MvSetting{1, 1, 1, true}, MvSetting{3, 2, 3, false}}) {
        LinCase c = lin(kind, sh.K, sh.N, 1, sh.act, sh.G);
        c.opt.max_binding_bytes = c.base.max_binding_bytes = sh.max_binding;
        c.base.tuning.mv = 0;
        c.opt.tuning.mv = 1;
        c.opt.tuning.mv_depth = st.depth;
        c.opt.tuning.mv_batches = st.batches;
        c.opt.tuning.mv_groups = st.groups;
        c.opt.tuning.mv_wsum_nibbles = st.wsum;
        c.var = "mv_d" + std::to_string(st.depth) + "b" + std::to_string(st.batches) + "g" +
                std::to_string(st.groups) + (c.opt.tuning.mv_wsum_nibbles ? "_wsum" : "");
        c.base_var = "mv 0";
        c.rel = kind == Lin::A8W4 ? Rel::Same : sh.act == DType::F32 ? Rel::Differs : Rel::None;
        add(c);
      }
  }
  // In order of their options, so that a process makes each context once (shared_device).
  std::stable_sort(v.begin(), v.end(), [](const LinCase& a, const LinCase& b) {
    return std::make_pair(options_key(a.opt), options_key(a.base)) <
           std::make_pair(options_key(b.opt), options_key(b.base));
  });
  return v;
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsLinear, ::testing::ValuesIn(linear_cases()),
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace vkllm::test::table
