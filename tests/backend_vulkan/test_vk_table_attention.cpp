// The op table's attention and rope cases (op_table.h). attention: prefill (the tiled kernel's
// query blocks and key tiles, each of its shapes, the cooperative-matrix kernel where the device
// has fp16 cooperative matrices), decode (keys split over workgroups and merged), chunks after
// cached keys, grouped-query heads, fp16 activations and caches; the output within the attention
// bound of the CPU's and the written cache rows equal to the CPU's. rope: partial rotary, the
// attention factor, longrope's table switch, fp16.
#include <cmath>

#include "backend/vulkan/vk_ops_internal.h"
#include "op_table.h"

namespace vkllm::test::table {
namespace {

struct AttCase {
  int H, Hkv, hd, T, pos;
  DType act, cache;
  int max_ctx;
  AttVar var = AttVar::Default;
  std::string name() const {
    return case_name("attention_H" + std::to_string(H) + "_KV" + std::to_string(Hkv) + "_hd" +
                     std::to_string(hd) + "_" + dtype_name(act) + "_cache" + dtype_name(cache) +
                     "_T" + std::to_string(T) + "_pos" + std::to_string(pos) + "_ctx" +
                     std::to_string(max_ctx) + att_var_name(var));
  }
};
void PrintTo(const AttCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsAttention : public ::testing::TestWithParam<AttCase> {};

TEST_P(VulkanOpsAttention, MatchesTheCpu) {
  const AttCase& a = GetParam();
  const int H = a.H, Hkv = a.Hkv, hd = a.hd, T = a.T, pos = a.pos, max_ctx = a.max_ctx;
  if (variant_inert_here(a.var, hd, a.act, a.cache, H / Hkv)) return;
  std::mt19937 rng(static_cast<unsigned>(H * 7 + hd + T * 3 + pos));
  Case c;
  c.p.max_ctx = max_ctx;
  const int64_t W = int64_t(Hkv) * hd;
  auto q = rand_vec(rng, static_cast<size_t>(T * H * hd)),
       k = rand_vec(rng, static_cast<size_t>(T * W)), v = rand_vec(rng, static_cast<size_t>(T * W));
  auto kc = rand_vec(rng, static_cast<size_t>(max_ctx * W)),
       vc = rand_vec(rng, static_cast<size_t>(max_ctx * W));
  if (a.act == DType::F16) q = round_f16(q), k = round_f16(k), v = round_f16(v);
  if (a.cache == DType::F16) kc = round_f16(kc), vc = round_f16(vc);
  const int32_t tq = c.add("q", a.act, TK::Activation, {-1, H * hd}, enc(a.act, q));
  const int32_t tk = c.add("k", a.act, TK::Activation, {-1, W}, enc(a.act, k));
  const int32_t tv = c.add("v", a.act, TK::Activation, {-1, W}, enc(a.act, v));
  const int32_t tkc = c.add("kc", a.cache, TK::KVCache, {max_ctx, W}, enc(a.cache, kc));
  const int32_t tvc = c.add("vc", a.cache, TK::KVCache, {max_ctx, W}, enc(a.cache, vc));
  const int32_t ty = c.add("o", a.act, TK::Activation, {-1, H * hd});
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  c.op("attention", {tq, tk, tv, tkc, tvc}, ty,
       {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", hd}, {"scale", scale}});
  std::vector<float> want(q.size());
  cpu::attention(q.data(), k.data(), v.data(), T, pos, kc.data(), vc.data(), a.cache == DType::F16,
                 H, Hkv, hd, scale, want.data());
  if (a.act == DType::F16) want = round_f16(want);
  VulkanOptions o;
  o.tuning = att_tuning(a.var);
  OpRun r(c, T, o);
  if (T > 1) {
    const auto pa = vk::detail::prefill_attention(r.ctx(), hd, a.act == DType::F16,
                                                  a.cache == DType::F16, H / Hkv);
    std::printf(
        "prefill attention path: %s, %u rows a thread, %u keys a tile, %u query heads a "
        "workgroup\n",
        pa.coopmat ? "cooperative matrix"
        : pa.tiled ? "portable tiled"
                   : "untiled",
        pa.rq, pa.bk, pa.gq);
  }
  r.forward(T, pos);
  const double bound = bound_for(kAttn, a.act);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), bound), bound);
  EXPECT_EQ(r.read(tkc, max_ctx), kc);  // cache rows are copies (rounded like the CPU's)
  EXPECT_EQ(r.read(tvc, max_ctx), vc);
  // Query-key and weight-value products of every head over its pos + t + 1 keys.
  const double ops = 4.0 * H * hd * (double(T) * pos + double(T) * (T + 1) / 2);
  perf(r, c, T, pos, ops);
}

std::vector<AttCase> attention_cases() {
  const DType f32 = DType::F32, f16 = DType::F16;
  std::vector<AttCase> v = {
      {4, 2, 24, 9, 0, f32, f32, 40},        // prefill
      {4, 2, 24, 1, 20, f32, f32, 40},       // decode
      {6, 2, 40, 5, 11, f32, f32, 40},       // a chunk after cached keys
      {4, 1, 128, 3, 140, f32, f32, 150},    // many key tiles
      {4, 2, 64, 1, 700, f32, f32, 800},     // decode: 13 key splits of 64, 2 empty
      {2, 1, 128, 1, 4500, f16, f16, 4600},  // decode: 36 key splits of 128
      {4, 2, 24, 5, 11, f32, f16, 40},       // fp16 cache
      {4, 2, 24, 5, 11, f16, f16, 40},       // fp16 activations
  };
  // The tiled prefill kernel: several query blocks after cached keys, grouped-query heads, fp16;
  // at each of its shapes (two rows a thread and 64-key tiles at head dim 64, 32-key tiles at 128
  // where 32 KiB of shared memory is the limit, one row a thread at 256 where 48 KiB is) and with
  // each forced key tile and rows a thread.
  for (AttVar var : {AttVar::Default, AttVar::Bk32, AttVar::Rq1}) {
    v.push_back({8, 2, 64, 77, 30, f32, f32, 120, var});
    v.push_back({4, 1, 128, 40, 0, f32, f32, 48, var});
    v.push_back({2, 2, 256, 35, 5, f16, f16, 64, var});
  }
  // fp16 q and caches at the models' head dims (64: Llama-3.2-1B; 128: Qwen3, Phi-4-mini): the
  // cooperative-matrix kernel where the device has one (32-token query blocks, 32-key tiles, the
  // weights rounded to fp16; and a KV head's query heads in one workgroup), else the portable
  // tiled one. Blocks past the end, cached keys before the chunk, 4:1 and 2:1 grouped-query heads,
  // a chunk shorter than one block.
  for (AttVar var : {AttVar::Default, AttVar::Gqa, AttVar::Portable}) {
    v.push_back({32, 8, 64, 150, 30, f16, f16, 200, var});
    v.push_back({16, 8, 128, 100, 0, f16, f16, 128, var});
    v.push_back({4, 1, 128, 70, 200, f16, f16, 300, var});
    v.push_back({8, 2, 64, 20, 7, f16, f16, 40, var});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsAttention, ::testing::ValuesIn(attention_cases()),
                         [](const auto& p) { return p.param.name(); });

struct RopeCase {
  int T, pos;
  bool long_table;  // longrope's second table, used from original_max_pos = 12 on
  DType dt;
  std::string name() const {
    return case_name(std::string("rope_H3_hd16_R12_") + dtype_name(dt) + "_T" + std::to_string(T) +
                     "_pos" + std::to_string(pos) + (long_table ? "_longrope" : ""));
  }
};
void PrintTo(const RopeCase& c, std::ostream* os) {
  *os << c.name();
}

class VulkanOpsRope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(VulkanOpsRope, MatchesTheCpu) {
  const RopeCase& rc = GetParam();
  const int T = rc.T, pos = rc.pos, H = 3, hd = 16, R = 12;
  const DType dt = rc.dt;
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
  const int32_t tx = c.add("x", dt, TK::Activation, {-1, H * hd}, enc(dt, x));
  const int32_t tf = c.add("inv", DType::F32, TK::Weight, {R / 2}, bytes_f32(fs));
  const int32_t ty = c.add("y", dt, TK::Activation, {-1, H * hd});
  nlohmann::json attrs = {
      {"n_heads", H}, {"head_dim", hd}, {"rotary_dim", R}, {"attention_factor", a}};
  const int orig = 12;
  std::vector<int32_t> in = {tx, tf};
  if (rc.long_table) {
    in.push_back(c.add("inv_long", DType::F32, TK::Weight, {R / 2}, bytes_f32(fl)));
    attrs["original_max_pos"] = orig;
  }
  c.op("rope", in, ty, attrs);
  std::vector<float> want(x.size());
  const bool use_long = rc.long_table && pos + T > orig;
  cpu::rope(x.data(), T, H, hd, R, use_long ? fl.data() : fs.data(), pos, a, want.data());
  if (dt == DType::F16) want = round_f16(want);
  OpRun r(c, T);
  r.forward(T, pos);
  const double bound = bound_for(kElem, dt);
  EXPECT_LE(logged(nmse(r.read(ty, T), want), bound), bound);
  perf(r, c, T, pos);
}

INSTANTIATE_TEST_SUITE_P(Table, VulkanOpsRope,
                         ::testing::Values(RopeCase{5, 9, false, DType::F32},
                                           RopeCase{1, 50, false, DType::F32},
                                           RopeCase{5, 9, false, DType::F16},
                                           RopeCase{5, 3, true, DType::F32},   // 8 <= 12: short
                                           RopeCase{5, 9, true, DType::F32}),  // 14 > 12: long
                         [](const auto& p) { return p.param.name(); });

}  // namespace
}  // namespace vkllm::test::table
