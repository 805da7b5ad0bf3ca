// The Vulkan interpreter against the CPU interpreter on hand-built 2-layer toy transformers with
// random weights: identical greedy tokens and logits NMSE within the recipe's bound over prefill,
// decode and chunked prompts, for each weight / activation / cache / embedding storage combination.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "backend/cpu/kernels.h"
#include "backend/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "runtime/agreement.h"
#include "runtime/generate.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

using TK = TensorKind;

enum class Emb { F32, F16, Q4 };

struct ToyConfig {
  Lin lin = Lin::F32;
  Emb emb = Emb::F32;
  DType act = DType::F32, cache = DType::F32;
  bool qk_norm = false, partial_long_rope = false;
  int max_ctx = 48;
  int64_t ffn = 96;  // the FFN width: the down projection's K (1024: its decode rows in parts)
  const char* parts = nullptr;  // VKLLM_MATVEC_PARTS while the executors are made
};

class MemWeights : public WeightSource {
 public:
  std::map<int32_t, std::vector<uint8_t>> data;
  std::span<const uint8_t> weight(const Program&, int32_t t) const override {
    const auto& v = data.at(t);
    return {v.data(), v.size()};
  }
};

struct Toy {
  Program p;
  MemWeights w;
};

constexpr int64_t V = 97, D = 64, H = 4, Hkv = 2, HD = 16, G = 32;

Toy build_toy(const ToyConfig& cfg, unsigned seed) {
  Toy toy;
  Program& p = toy.p;
  p.max_ctx = cfg.max_ctx;
  std::mt19937 rng(seed);
  auto weight = [&](const std::string& name, DType dt, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes) {
    TensorDecl t{"w." + name, dt, TK::Weight, shape, 0, dtype_nbytes(dt, shape)};
    const int32_t i = p.add_tensor(t);
    toy.w.data[i] = std::move(bytes);
    return i;
  };
  auto fweight = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    size_t n = 1;
    for (auto s : shape) n *= static_cast<size_t>(s);
    return weight(name, DType::F32, shape, bytes_f32(rand_vec(rng, n, lo, hi)));
  };
  auto act = [&](const std::string& name, int64_t width, DType dt) {
    return p.add_tensor({name, dt, TK::Activation, {-1, width}, 0, 0});
  };
  auto op = [&](const std::string& f, std::vector<int32_t> in, int32_t out,
                nlohmann::json attrs = nlohmann::json::object()) {
    p.ops.push_back(Op{f, std::move(in), {out}, std::move(attrs), BackendKind::Vulkan});
    return out;
  };
  auto q4_pack = [&](int64_t N, int64_t K, float scale, const std::string& name) {
    std::uniform_int_distribution<int> d(0, 15);
    std::vector<uint8_t> q(static_cast<size_t>(N * K / 2));
    for (auto& b : q) b = static_cast<uint8_t>(d(rng) | (d(rng) << 4));
    auto s = rand_vec(rng, static_cast<size_t>(N * K / G), 0.5f * scale, 1.5f * scale);
    std::vector<int32_t> ws(static_cast<size_t>(N * K / G), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ws[n * (K / G) + k / G] += cpu::q4_get(q.data(), K, n, k);
    int32_t tq = weight(name + ".q", DType::Q4, {N, K}, q);
    int32_t ts = weight(name + ".s", DType::F32, {N, K / G}, bytes_f32(s));
    int32_t tw = weight(name + ".wsum", DType::I32, {N, K / G}, bytes_of(ws));
    return std::array<int32_t, 3>{tq, ts, tw};
  };
  auto linear = [&](int32_t x, int64_t N, int64_t K, int32_t out, const std::string& name,
                    float gain = 1.0f) {
    const float a = gain / std::sqrt(static_cast<float>(K));
    if (cfg.lin == Lin::F32 || cfg.lin == Lin::F16) {
      auto wv = rand_vec(rng, static_cast<size_t>(N * K), -1.7f * a, 1.7f * a);
      int32_t tw = cfg.lin == Lin::F16 ? weight(name, DType::F16, {N, K}, bytes_f16(wv))
                                       : weight(name, DType::F32, {N, K}, bytes_f32(wv));
      return op("linear", {x, tw}, out);
    }
    auto q = q4_pack(N, K, a / 4.0f, name);
    if (cfg.lin == Lin::Q4W) return op("linear_q4w", {x, q[0], q[1]}, out, {{"group", G}});
    return op("linear_8da4w", {x, q[0], q[1], q[2]}, out, {{"group", G}});
  };
  const DType A = cfg.act;
  p.input_ids = p.add_tensor({"ids", DType::I32, TK::Input, {-1}, 0, 0});
  int32_t x = act("x.embed", D, A);
  if (cfg.emb == Emb::Q4) {
    auto q = q4_pack(V, D, 0.15f, "embed");
    op("embedding_q4", {p.input_ids, q[0], q[1]}, x, {{"group", G}});
  } else {
    auto e = rand_vec(rng, static_cast<size_t>(V * D));
    int32_t te = cfg.emb == Emb::F16 ? weight("embed", DType::F16, {V, D}, bytes_f16(e))
                                     : weight("embed", DType::F32, {V, D}, bytes_f32(e));
    op("embedding", {p.input_ids, te}, x);
  }
  const int R = cfg.partial_long_rope ? 12 : static_cast<int>(HD);
  std::vector<float> fs(static_cast<size_t>(R / 2)), fl(fs.size());
  for (int i = 0; i < R / 2; ++i) {
    fs[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(R));
    fl[i] = fs[i] * 0.25f;
  }
  int32_t inv = weight("rope.inv_freq", DType::F32, {R / 2}, bytes_f32(fs));
  nlohmann::json rope_attrs = {
      {"head_dim", HD}, {"rotary_dim", R}, {"attention_factor", cfg.partial_long_rope ? 1.1 : 1.0}};
  std::vector<int32_t> rope_tabs = {inv};
  if (cfg.partial_long_rope) {
    rope_tabs.push_back(weight("rope.inv_freq_long", DType::F32, {R / 2}, bytes_f32(fl)));
    rope_attrs["original_max_pos"] = 12;
  }
  for (int l = 0; l < 2; ++l) {
    const std::string lp = "l" + std::to_string(l) + ".";
    int32_t h = op("rms_norm", {x, fweight(lp + "attn_norm", {D}, 0.8f, 1.2f)},
                   act(lp + "attn_norm", D, A), {{"eps", 1e-5}, {"group", D}});
    int32_t q = linear(h, H * HD, D, act(lp + "q", H * HD, A), lp + "wq", 2.0f);
    int32_t k = linear(h, Hkv * HD, D, act(lp + "k", Hkv * HD, A), lp + "wk", 2.0f);
    int32_t v = linear(h, Hkv * HD, D, act(lp + "v", Hkv * HD, A), lp + "wv");
    if (cfg.qk_norm) {
      q = op("rms_norm", {q, fweight(lp + "q_norm", {HD}, 0.8f, 1.2f)},
             act(lp + "q_normed", H * HD, A), {{"eps", 1e-6}, {"group", HD}});
      k = op("rms_norm", {k, fweight(lp + "k_norm", {HD}, 0.8f, 1.2f)},
             act(lp + "k_normed", Hkv * HD, A), {{"eps", 1e-6}, {"group", HD}});
    }
    auto ra = rope_attrs;
    ra["n_heads"] = H;
    std::vector<int32_t> rin = {q};
    rin.insert(rin.end(), rope_tabs.begin(), rope_tabs.end());
    q = op("rope", rin, act(lp + "q_rot", H * HD, A), ra);
    ra["n_heads"] = Hkv;
    rin[0] = k;
    k = op("rope", rin, act(lp + "k_rot", Hkv * HD, A), ra);
    int32_t kc =
        p.add_tensor({lp + "k_cache", cfg.cache, TK::KVCache, {p.max_ctx, Hkv * HD}, 0, 0});
    int32_t vc =
        p.add_tensor({lp + "v_cache", cfg.cache, TK::KVCache, {p.max_ctx, Hkv * HD}, 0, 0});
    int32_t a = op("attention", {q, k, v, kc, vc}, act(lp + "attn", H * HD, A),
                   {{"n_heads", H},
                    {"n_kv_heads", Hkv},
                    {"head_dim", HD},
                    {"scale", 1.0 / std::sqrt(double(HD))}});
    int32_t o = linear(a, D, H * HD, act(lp + "attn_out", D, A), lp + "wo");
    x = op("add", {x, o}, act(lp + "x.attn", D, A));
    h = op("rms_norm", {x, fweight(lp + "ffn_norm", {D}, 0.8f, 1.2f)}, act(lp + "ffn_norm", D, A),
           {{"eps", 1e-5}, {"group", D}});
    const int64_t F = cfg.ffn;
    int32_t g = linear(h, F, D, act(lp + "gate", F, A), lp + "wg");
    int32_t u = linear(h, F, D, act(lp + "up", F, A), lp + "wu");
    int32_t s = op("swiglu", {g, u}, act(lp + "swiglu", F, A));
    int32_t dn = linear(s, D, F, act(lp + "ffn_out", D, A), lp + "wd");
    x = op("add", {x, dn}, act(lp + "x.ffn", D, A));
  }
  int32_t last = op("last_row", {x}, p.add_tensor({"x.last", A, TK::Activation, {1, D}, 0, 0}));
  int32_t n =
      op("rms_norm", {last, fweight("final_norm", {D}, 0.8f, 1.2f)},
         p.add_tensor({"x.final", A, TK::Activation, {1, D}, 0, 0}), {{"eps", 1e-5}, {"group", D}});
  p.logits = linear(n, V, D, p.add_tensor({"logits", DType::F32, TK::Activation, {1, V}, 0, 0}),
                    "lm_head", 4.0f);
  p.next_token =
      op("argmax", {p.logits}, p.add_tensor({"next", DType::I32, TK::Activation, {1, 1}, 0, 0}));
  p.validate();
  return toy;
}

// The logits NMSE bound of the recipe a toy configuration stands for (the agreement table's, one
// source of truth): the 8da4w programs flip int8 codes wherever a device rounds a norm or an exp
// differently from the CPU (measured up to ~2e-3 on the H200, 0 on lavapipe).
double toy_nmse_bound(const ToyConfig& cfg) {
  const bool f16 = cfg.act == DType::F16 || cfg.lin == Lin::F16;
  const char* recipe = cfg.lin == Lin::A8W4  ? (f16 ? "quantized-8da4w-fp16" : "quantized-8da4w")
                       : cfg.lin == Lin::Q4W ? "quantized-int4-weight-only"
                       : f16                 ? "fp16"
                                             : "non-quantized";
  return agreement_bounds(recipe).max_nmse;
}

void compare(const ToyConfig& cfg, int max_tokens, unsigned seed) {
  Toy toy = build_toy(cfg, seed);
  const double bound = toy_nmse_bound(cfg);
  const uint64_t msgs = vk::validation_message_count();
  VulkanOptions opt = validated();
  opt.max_tokens = max_tokens;
  auto cpu = make_cpu_executor(toy.p, toy.w);
  auto gpu = make_vulkan_executor(toy.p, toy.w, opt);
  EXPECT_STREQ(gpu->name(), "vulkan");
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<float> lc(V), lg(V);
  int pos = 0;
  double worst = 0;
  // prefill 7, decode 3 (feeding the greedy token back), a chunk of 5, decode 1, prefill 11
  for (int T : {7, 1, 1, 1, 5, 1, 11}) {
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (auto& i : ids) i = tok(rng);
    const int32_t c = cpu->forward(ids.data(), T, pos, lc.data());
    const int32_t g = gpu->forward(ids.data(), T, pos, lg.data());
    auto sorted = lc;
    std::sort(sorted.rbegin(), sorted.rend());
    EXPECT_EQ(g, c) << "T=" << T << " pos=" << pos << " (cpu top-2 margin " << sorted[0] - sorted[1]
                    << ")";
    const double e = nmse(lg, lc);
    worst = std::max(worst, e);
    EXPECT_LE(e, bound) << "T=" << T << " pos=" << pos;
    EXPECT_EQ(gpu->forward(ids.data(), T, pos, nullptr), c) << "argmax without logits readback";
    pos += T;
  }
  std::printf("worst logits NMSE vs CPU: %.3g\n", worst);
  gpu.reset();
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

TEST(VulkanExecutor, FloatProgram) {
  compare({}, 512, 1);
}
TEST(VulkanExecutor, ChunkedPrefill) {
  compare({}, 4, 2);
}
TEST(VulkanExecutor, Int4WeightOnly) {
  compare({Lin::Q4W, Emb::F32}, 512, 3);
}
TEST(VulkanExecutor, Int8DynInt4Weights) {
  compare({Lin::A8W4, Emb::Q4}, 512, 4);
}
TEST(VulkanExecutor, Fp16Program) {
  ToyConfig c{Lin::A8W4, Emb::F16, DType::F16, DType::F16};
  compare(c, 512, 5);
}
TEST(VulkanExecutor, Fp16WeightsQkNormPartialLongRope) {
  ToyConfig c{Lin::F16, Emb::Q4, DType::F16, DType::F32, true, true};
  compare(c, 6, 6);
}

// The decode step's fused runs (vk_fused.cpp) against the unfused program on the same device: the
// int8 rows the fused prologues derive are the unfused ops' codes and the mat-vecs sum in the same
// order, so every logit is bit-identical; and fusion must have fused (fewer kernels per step).
// One table of cases: each storage combination the fused kernel specializes on.
struct FusionCase {
  const char* name;
  ToyConfig cfg;
};
class VulkanFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(VulkanFusion, DecodeStepEqualsTheUnfusedProgram) {
  Toy toy = build_toy(GetParam().cfg, 11);
  const uint64_t msgs = vk::validation_message_count();
  // mode 0: nothing fused; 1: the default runs (attention); 2: every pattern (the tail runs take
  // the norms and SwiGLU); 3: every pattern but the tail runs (the mat-vec runs take them).
  auto run = [&](int mode, std::string* profile) {
    if (GetParam().cfg.parts) setenv("VKLLM_MATVEC_PARTS", GetParam().cfg.parts, 1);
    if (mode == 0) setenv("VKLLM_NO_FUSION", "1", 1);
    if (mode >= 2) setenv("VKLLM_FUSE", "all", 1);
    if (mode == 3) setenv("VKLLM_NO_FUSE", "tail", 1);
    VulkanOptions o = validated();
    o.profile = profile != nullptr;
    auto gpu = make_vulkan_executor(toy.p, toy.w, o);
    unsetenv("VKLLM_NO_FUSION");
    unsetenv("VKLLM_FUSE");
    unsetenv("VKLLM_NO_FUSE");
    unsetenv("VKLLM_MATVEC_PARTS");
    std::vector<float> all, l(V);
    // A prompt that ends past two of the decode attention's 64-key splits, so the fused
    // attention merges three splits.
    std::vector<int32_t> ids(134);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % V);
    const int n = GetParam().cfg.max_ctx > 160 ? static_cast<int>(ids.size()) : 5;
    int32_t t = gpu->forward(ids.data(), n, 0, l.data());
    all.insert(all.end(), l.begin(), l.end());
    for (int pos = n; pos < n + 12; ++pos) {
      t = gpu->forward(&t, 1, pos, l.data());
      all.insert(all.end(), l.begin(), l.end());
      all.push_back(static_cast<float>(t));
    }
    if (profile) ::testing::internal::CaptureStderr();
    gpu.reset();
    if (profile) *profile = ::testing::internal::GetCapturedStderr();
    return all;
  };
  auto kernels = [](const std::string& s) {
    const auto at = s.find("decode: ");
    return at == std::string::npos ? -1 : std::stoi(s.substr(at + 8));
  };
  std::string pu;
  const std::vector<float> unfused = run(0, &pu);
  for (int mode : {1, 2, 3}) {
    std::string pf;
    const std::vector<float> fused = run(mode, &pf);
    ASSERT_EQ(fused.size(), unfused.size());
    size_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += fused[i] != unfused[i];
    EXPECT_EQ(differ, 0u) << "mode " << mode << ": of " << fused.size() << " logits and tokens";
    EXPECT_GT(kernels(pf), 0) << pf;
    EXPECT_LT(kernels(pf), kernels(pu)) << "mode " << mode << "\n" << pf << pu;
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VulkanFusion,
    ::testing::Values(
        FusionCase{"f32", {Lin::A8W4, Emb::Q4}},
        FusionCase{"f32_splits", {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 200}},
        FusionCase{"f16_qknorm_splits",
                   {Lin::A8W4, Emb::F16, DType::F16, DType::F16, true, true, 200}},
        FusionCase{"f16", {Lin::A8W4, Emb::F16, DType::F16, DType::F16}},
        FusionCase{"f16_qknorm", {Lin::A8W4, Emb::Q4, DType::F16, DType::F32, true, true}},
        // A down projection of K = 1024: its decode rows summed in parts (decode_split's rule).
        FusionCase{"f32_parts",
                   {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 48, 1024, "auto"}}),
    [](const auto& p) { return std::string(p.param.name); });

// Greedy decode steps per submit (decode_greedy: the token stays on the device) give exactly the
// tokens of one step per submit, on the Vulkan and the CPU backends, whatever the batch; and an
// eos at any position of a batch ends generation there with the KV position right after it.
TEST(VulkanExecutor, SeveralDecodeStepsPerSubmitEqualOneStepPerSubmit) {
  Toy toy = build_toy({Lin::A8W4, Emb::Q4}, 12);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  auto gen = [&](const char* batch, const std::vector<int>& eos, GenerateStats* st) {
    if (batch) setenv("VKLLM_DECODE_BATCH", batch, 1);
    auto gpu = make_vulkan_executor(toy.p, toy.w, validated());
    unsetenv("VKLLM_DECODE_BATCH");
    return generate(*gpu, toy.p, prompt, 37, SamplingParams{}, eos, 0, nullptr, st);
  };
  auto cpu = make_cpu_executor(toy.p, toy.w);
  const auto ref = generate(*cpu, toy.p, prompt, 37, SamplingParams{}, {}, 0, nullptr, nullptr);
  ASSERT_EQ(ref.size(), 37u);
  EXPECT_EQ(gen("1", {}, nullptr), ref);
  EXPECT_EQ(gen("16", {}, nullptr), ref);
  EXPECT_EQ(gen("4", {}, nullptr), ref);
  // An eos at each position of the first two batches of 4 (the first generated token included).
  for (size_t j = 0; j < 9; ++j) {
    const int eos = ref[j];
    const size_t first = static_cast<size_t>(std::find(ref.begin(), ref.end(), eos) - ref.begin());
    GenerateStats st;
    const auto out = gen("4", {eos}, &st);
    EXPECT_EQ(out, std::vector<int32_t>(ref.begin(), ref.begin() + first)) << "eos at " << j;
    EXPECT_TRUE(st.stopped_by_eos);
    EXPECT_EQ(st.end_pos, static_cast<int>(prompt.size() + first)) << "eos at " << j;
  }
}

TEST(VulkanExecutor, ContextOverflowIsAnError) {
  Toy toy = build_toy({}, 7);
  auto gpu = make_vulkan_executor(toy.p, toy.w, validated());
  std::vector<int32_t> ids(4, 1);
  EXPECT_THROW(gpu->forward(ids.data(), 4, toy.p.max_ctx - 2, nullptr), Error);
  ids[2] = static_cast<int32_t>(V);
  EXPECT_THROW(gpu->forward(ids.data(), 4, 0, nullptr), Error);
}

TEST(VulkanExecutor, RejectsOpsAssignedToCpu) {
  Toy toy = build_toy({}, 8);
  toy.p.ops[3].backend = BackendKind::Cpu;
  EXPECT_THROW(make_vulkan_executor(toy.p, toy.w, validated()), Error);
}

}  // namespace
}  // namespace vkllm::test

namespace vkllm::test {
namespace {

TEST(VulkanExecutor, NoFp16SwitchGivesAClearError) {
  Toy toy = build_toy({Lin::F32, Emb::F32, DType::F16, DType::F32}, 9);
  VulkanOptions o = validated();
  o.no_fp16 = true;
  try {
    make_vulkan_executor(toy.p, toy.w, o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("16-bit storage"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
  }
}

TEST(VulkanExecutor, ProfileWithTimestamps) {
  Toy toy = build_toy({}, 10);
  VulkanOptions o = validated();
  o.profile = true;
  auto gpu = make_vulkan_executor(toy.p, toy.w, o);
  auto cpu = make_cpu_executor(toy.p, toy.w);
  std::vector<int32_t> ids = {1, 2, 3};
  EXPECT_EQ(gpu->forward(ids.data(), 3, 0, nullptr), cpu->forward(ids.data(), 3, 0, nullptr));
}

TEST(VulkanCli, DevicesJson) {
  // (VKLLM_EXE in the environment: the binary where the build tree is not, as on the GPU machine.)
  const char* exe = std::getenv("VKLLM_EXE");
  FILE* f =
      popen((std::string(exe ? exe : VKLLM_EXE) + " devices --json 2>/dev/null").c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(f), 0) << out;
  auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j.is_array());
  ASSERT_FALSE(j.empty()) << "no Vulkan device found";
  const auto devs = vk::list_devices();
  ASSERT_EQ(j.size(), devs.size());
  EXPECT_EQ(j[0]["name"], devs[0].name);
  EXPECT_EQ(j[0]["subgroup_size"], devs[0].subgroup_size);
  EXPECT_EQ(j[0]["int8_dot_product"], devs[0].int_dot);
  EXPECT_GT(j[0]["max_storage_buffer_range"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace vkllm::test
