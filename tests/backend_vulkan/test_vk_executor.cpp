// The Vulkan interpreter against the CPU interpreter on hand-built 2-layer toy transformers with
// random weights: identical greedy tokens and logits NMSE within the recipe's bound over prefill,
// decode and chunked prompts, for each weight / activation / cache / embedding storage combination.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "backend/vulkan/vk_verdict.h"
#include "backend/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "runtime/agreement.h"
#include "runtime/generate.h"
#include "selftest/toy_model.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

using toy::build_toy;
using toy::Emb;
using toy::Toy;
using toy::ToyConfig;
constexpr int64_t V = toy::kVocab;

// The logits NMSE bound of the recipe a toy configuration stands for (the agreement table's, one
// source of truth): the 8da4w programs flip int8 codes wherever a device rounds a norm or an exp
// differently from the CPU (measured up to ~2e-3 on the H200, 0 on lavapipe).
double toy_nmse_bound(const ToyConfig& cfg) {
  return agreement_bounds(toy::toy_recipe(cfg)).max_nmse;
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
// order (a q4w chain stage as linear_q4w_mv does), so every logit is bit-identical; and fusion
// must have fused (fewer kernels per step). The prompt's logits compare the prefill's runs (the
// ropes in the prefill attention's q loads and KV store) the same way, in every fused mode.
// One table of cases: each storage combination the fused kernel specializes on.
struct FusionCase {
  const char* name;
  ToyConfig cfg;
  int chunk = 0;  // the prompt's tokens a forward (VulkanOptions::max_tokens; 0: the default)
};
class VulkanFusion : public ::testing::TestWithParam<FusionCase> {};

TEST_P(VulkanFusion, DecodeStepEqualsTheUnfusedProgram) {
  Toy toy = build_toy(GetParam().cfg, 11);
  const uint64_t msgs = vk::validation_message_count();
  // mode 0: nothing fused; 1: the default runs without decode chains (attention); 2: every
  // pattern but the chains (the tail runs take the norms and SwiGLU); 3: those but the tail runs
  // (the mat-vec runs take them) (modes 1-3 turn the chains off: a GPU's default has them); 4: the
  // mat-vec runs as the stages of decode chains (linear_8da4w_chain.comp), a grid of two 256-thread
  // workgroups (the decode attention as a stage of the chains where their shared memory holds it);
  // 5: the same with three of the default 512 threads; 6: the same with four and the other unit
  // width than
  // the recipe's default (one block a lane a unit for q4w chains, two otherwise: chain_ub), rows
  // dealt within workgroups (chain_deal off), the other grid sync than the recipe's default (split
  // in two for q4w chains, whole otherwise: chain_split_sync) and the attention in its own
  // dispatch between chains (chain_att 0); 7: mode 5 on two workgroups with the executor's two
  // decode plans changing
  // halfway through the decode steps (the attention stages below the position chain_att_until,
  // the attention in its own dispatch from there). Modes 1 and 5 take the streamed decode
  // mat-vecs at every width (mv 1: the H200's lm_heads take them), so the lm_head with the final
  // norm in its prologue (the head run) runs. The modes are Tuning fields (vk_tuning.h).
  //
  // The prompt's tokens: one that ends past two of the decode attention's 64-key splits, so the
  // fused attention merges three splits (where the context holds it).
  constexpr int kLongPrompt = 134;
  const int n = GetParam().cfg.max_ctx > 160 ? kLongPrompt : 5;
  auto run = [&](int mode, std::string* profile) {
    VulkanOptions o = validated();
    Tuning& tn = o.tuning;
    if (GetParam().cfg.parts) tn.matvec_parts = 0;  // the rule that splits rows in parts
    if (GetParam().chunk) o.max_tokens = GetParam().chunk;
    if (mode == 0) o.no_fusion = true;
    if (mode >= 1 && mode <= 3) tn.chain = false;
    if (mode >= 2) tn.fuse_all = true;
    if (mode >= 3) tn.no_fuse = {"tail"};
    if (mode >= 4) tn.chain_groups = mode == 7 ? 2 : mode - 2;
    if (mode == 1 || mode == 5) tn.mv = 1;
    if (mode == 4) tn.chain_wg = 256;
    const bool q4w = GetParam().cfg.lin == Lin::Q4W;
    if (mode == 6) {
      tn.chain_ub = q4w ? 1 : 2;
      tn.chain_deal = false;
      tn.chain_split_sync = q4w ? 1 : 0;
      tn.chain_att = 0;
    }
    // (The default plan rule would take the attention stages at no position on grids this small.)
    if (mode >= 4) tn.chain_att_until = mode == 7 ? n + 6 : 1 << 20;
    o.profile = profile != nullptr;
    auto gpu = make_vulkan_executor(toy.p, toy.w, o);
    std::vector<float> all, l(V);
    std::vector<int32_t> ids(kLongPrompt);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % V);
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
  // The activation buffers of the plans (the profile's "(N steps, M activation buffers)").
  auto buffers = [](const std::string& s) {
    const auto at = s.find(" activation buffers");
    if (at == std::string::npos) return -1;
    const auto from = s.rfind(", ", at);
    return std::stoi(s.substr(from + 2, at - from - 2));
  };
  std::map<int, int> per_mode, bufs_per_mode;  // kernels a decode step, activation buffers
  std::string profile7;
  for (int mode : {1, 2, 3, 4, 5, 6, 7}) {
    if (mode >= 4 && GetParam().cfg.parts) continue;  // chains sum a row in one part
    std::string pf;
    const std::vector<float> fused = run(mode, &pf);
    per_mode[mode] = kernels(pf);
    if (mode == 7) profile7 = pf;
    bufs_per_mode[mode] = buffers(pf);
    ASSERT_EQ(fused.size(), unfused.size());
    size_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += fused[i] != unfused[i];
    EXPECT_EQ(differ, 0u) << "mode " << mode << ": of " << fused.size() << " logits and tokens";
    EXPECT_GT(kernels(pf), 0) << pf;
    EXPECT_LT(kernels(pf), kernels(pu)) << "mode " << mode << "\n" << pf << pu;
    // Every attention op fused, the windowed layer's too: no decode step runs one alone, and
    // the runs of mode 1 take both layers' (in their own dispatches; their prefill runs where
    // the unwindowed one has one).
    EXPECT_EQ(profile_steps(pf, "decode", "attention"), 0) << "mode " << mode << "\n" << pf;
    // The chains take the biases: no bias_add of its own in a decode step.
    if (mode >= 4 && GetParam().cfg.qkv_bias) {
      EXPECT_EQ(profile_steps(pf, "decode", "bias_add"), 0) << "mode " << mode << "\n" << pf;
      EXPECT_NE(pf.find("x3+bias"), std::string::npos) << "mode " << mode << "\n" << pf;
    }
    // The chains take Gemma 3's norms around the residual adds and its GeGLU: after layer 0's
    // attention, a decode step runs no norm, add or GeGLU of its own but the last layer's
    // post-norm and add (before the head run) and the per-head q/k norms of unchained attention.
    if (mode >= 4 && GetParam().cfg.gemma) {
      const std::string lin = GetParam().cfg.lin == Lin::Q4W ? "linear_q4w" : "linear_8da4w";
      EXPECT_EQ(profile_steps(pf, "decode", "geglu"), 0) << "mode " << mode << "\n" << pf;
      EXPECT_EQ(profile_steps(pf, "decode", "add"), 1) << "mode " << mode << "\n" << pf;
      for (const std::string& stage :
           {"rms_norm+add+rms_norm+" + lin + " x2+geglu", "rms_norm+add+rms_norm+" + lin + " x3"})
        EXPECT_NE(pf.find(stage), std::string::npos) << "mode " << mode << "\n" << pf;
    }
    const std::string att =
        GetParam().cfg.qk_norm ? "rms_norm x2+rope x2+attention" : "rope x2+attention";
    if (mode == 1) {
      EXPECT_EQ(profile_steps(pf, "decode", att), 2) << pf;
      const int prefill = profile_steps(pf, "prefill", att + ", prefill");
      EXPECT_TRUE(prefill == 0 || prefill == 2) << pf;
    }
    if ((mode == 1 || mode == 5) && !GetParam().cfg.parts) {
      EXPECT_NE(pf.find(GetParam().cfg.lin == Lin::Q4W ? "last_row+rms_norm+linear_q4w"
                                                       : "last_row+rms_norm+linear_8da4w"),
                std::string::npos)
          << "mode " << mode << ": no head run\n"
          << pf;
    }
  }
  // The attention stages fold the attention dispatches into the chains, whose stages reuse
  // activation buffers as their own dispatches would.
  if (per_mode.count(6)) {
    EXPECT_LT(per_mode[5], per_mode[6]);
    EXPECT_GT(bufs_per_mode[5], 0);
    EXPECT_LE(bufs_per_mode[5], bufs_per_mode[6]);
    // Mode 7 ran both decode plans, the second at long positions.
    EXPECT_NE(profile7.find("decode at long positions"), std::string::npos) << profile7;
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VulkanFusion,
    ::testing::Values(
        FusionCase{"f32", {Lin::A8W4, Emb::Q4}},
        // int4 weight-only: chains of q4w stages (the float row, linear_q4w_mv's sums); Qwen2's
        // q/k/v biases, which the chains' q/k/v stages add as they store the rows.
        FusionCase{"q4w_bias",
                   {Lin::Q4W, Emb::F32, DType::F32, DType::F32, false, false, 48, 96, nullptr, 64,
                    16, true}},
        // Gemma 3's norms and GeGLU as q4w stages.
        FusionCase{"q4w_f16_gemma_qknorm",
                   {Lin::Q4W, Emb::F16, DType::F16, DType::F16, true, true, 48, 96, nullptr, 64, 16,
                    false, 0, true}},
        FusionCase{"f32_splits", {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 200}},
        FusionCase{"f16_qknorm_splits",
                   {Lin::A8W4, Emb::F16, DType::F16, DType::F16, true, true, 200}},
        FusionCase{"f16_bias",
                   {Lin::A8W4, Emb::F16, DType::F16, DType::F16, false, false, 48, 96, nullptr, 64,
                    16, true}},
        FusionCase{"f16_qknorm", {Lin::A8W4, Emb::Q4, DType::F16, DType::F32, true, true}},
        // Head dim 32: the cooperative-matrix prefill attention (with the norms and ropes of its
        // prefill run) where the device has fp16 cooperative matrices.
        FusionCase{
            "f16_qknorm_hd32",
            {Lin::A8W4, Emb::F16, DType::F16, DType::F16, true, false, 48, 96, nullptr, 64, 32}},
        // A down projection of K = 1024: its decode rows summed in parts (decode_split's rule).
        FusionCase{"f32_parts",
                   {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 48, 1024, "auto"}},
        // A down projection wider than a chain stage takes (K = 8,224, Qwen2.5-1.5B's is 8,960):
        // the chain ends before gate/up, whose SwiGLU then quantizes for the down projection.
        FusionCase{"f16_wide_down",
                   {Lin::A8W4, Emb::Q4, DType::F16, DType::F16, false, false, 48, 8224}},
        // A residual of 1,280: the norms' sums of squares take rms_norm's four-at-a-time loop and
        // its rest, in an order that a prologue of other than 256 threads must keep.
        FusionCase{
            "f32_wide",
            {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 48, 96, nullptr, 1280}},
        // Gemma 3: its norms around the residual adds, GeGLU, and its sliding-window layers (layer
        // 0 sees 8 keys, layer 1 every key): the prompt in chunks of 3 (positions 0-2, 3-4), then
        // decode steps from below the window (5-6) through it (7) to past it (8-16).
        FusionCase{"f32_gemma_window",
                   {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 48, 96, nullptr, 64,
                    16, false, 8, true},
                   3},
        // A window of 70 keys in 64-key decode splits: the prompt in chunks of 50 (below the
        // window, across its edge, past it), then decode steps at 134-145, whose split 0 lies
        // wholly below the window and split 1 partly; Gemma 3's norms and GeGLU in fp16.
        FusionCase{"f16_gemma_qknorm_window_splits",
                   {Lin::A8W4, Emb::F16, DType::F16, DType::F16, true, true, 200, 96, nullptr, 64,
                    16, false, 70, true},
                   50}),
    [](const auto& p) { return std::string(p.param.name); });

// Greedy decode steps per submit (decode_greedy: the token stays on the device) give exactly the
// tokens of one step per submit, on the Vulkan and the CPU backends, whatever the batch; and an
// eos at any position of a batch ends generation there with the KV position right after it.
TEST(VulkanExecutor, SeveralDecodeStepsPerSubmitEqualOneStepPerSubmit) {
  Toy toy = build_toy({Lin::A8W4, Emb::Q4}, 12);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  auto gen = [&](const char* batch, const std::vector<int>& eos, GenerateStats* st) {
    VulkanOptions o = validated();
    if (batch) o.tuning.decode_batch = static_cast<uint32_t>(std::atoi(batch));
    auto gpu = make_vulkan_executor(toy.p, toy.w, o);
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

// last_logits gives, after a forward that read none back, the logits that forward would have
// read back (a prefill, a decode step, a batch of greedy steps); a constrained greedy generation,
// which reads them only where the constraint refuses the argmax, picks the tokens that reading
// them every step picks (the CPU backend, logits every step, as the reference).
TEST(VulkanExecutor, LastLogitsAreTheLastForwardsLogits) {
  Toy toy = build_toy({Lin::A8W4, Emb::Q4}, 13);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  VulkanOptions o = validated();
  o.tuning.decode_batch = 4;
  // b waits for its submits by polling their fences (a CPU device's rule is to sleep, as a does).
  VulkanOptions polling = o;
  polling.tuning.fence_spin = 1;
  auto a = make_vulkan_executor(toy.p, toy.w, o), b = make_vulkan_executor(toy.p, toy.w, polling);
  std::vector<float> la(toy::kVocab), lb(toy::kVocab, 0.0f);
  const int32_t ta = a->forward(prompt.data(), 5, 0, la.data());
  EXPECT_EQ(b->forward(prompt.data(), 5, 0, nullptr), ta);
  b->last_logits(lb.data());
  EXPECT_EQ(la, lb);
  EXPECT_EQ(b->forward(&ta, 1, 5, nullptr), a->forward(&ta, 1, 5, la.data()));
  b->last_logits(lb.data());
  EXPECT_EQ(la, lb);
  int32_t steps[4];
  b->decode_greedy(ta, 5, 4, steps);
  a->decode_greedy(ta, 5, 3, steps);
  a->forward(&steps[2], 1, 8, la.data());
  b->last_logits(lb.data());
  EXPECT_EQ(la, lb);

  // A vocabulary of JSON's bytes, the last token eos.
  auto index = byte_token_index("{}[]\":,. 0123456789-+eEtrufalsn");
  const int32_t eos = static_cast<int32_t>(toy::kVocab - 1);
  auto constrained = [&](Executor& ex, bool every_step) {
    grammar::Matcher m(grammar::any_json_object(), index);
    Sampler sampler{SamplingParams{}};
    return generate(ex, toy.p, prompt, 30, sampler, every_step, {eos}, 0, nullptr, nullptr, &m);
  };
  auto cpu = make_cpu_executor(toy.p, toy.w);
  const auto ref = constrained(*cpu, true);
  ASSERT_GE(ref.size(), 2u);
  EXPECT_EQ(constrained(*b, false), ref);
  EXPECT_EQ(constrained(*cpu, false), ref);
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

namespace vkllm::test {
namespace {

// The verdict `vkllm selftest` caches for a device (vk_verdict.h): a path found wrong is not used
// by the next Context on that device (with one note on stderr) unless the user's own switch says
// otherwise; subgroups found wrong refuse the device with one clear line.
TEST(VulkanVerdict, APathFoundWrongIsNotUsedAndTheUsersSwitchWins) {
  char tmpl[] = "/tmp/vkllm-verdict-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  setenv("XDG_CACHE_HOME", tmpl, 1);
  VulkanOptions raw = validated();
  raw.selftest_verdict = false;
  const vk::DeviceInfo info = vk::Context(raw).info();
  vk::Verdict v;
  v.int_dot_wrong = true;
  const std::string path = vk::write_verdict(info, v, "{}");
  EXPECT_EQ(path, vk::verdict_path(info));
  ASSERT_TRUE(vk::read_verdict(info).has_value());
  EXPECT_TRUE(vk::read_verdict(info)->int_dot_wrong);
  ::testing::internal::CaptureStderr();
  {
    vk::Context c(validated());
    EXPECT_FALSE(c.use_int_dot());
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("vkllm selftest") != std::string::npos, info.int_dot) << err;
  {
    VulkanOptions o = validated();
    o.tuning.chose_int_dot = true;  // VKLLM_NO_INT_DOT=0: the user's choice beats the verdict
    EXPECT_EQ(vk::Context(o).use_int_dot(), info.int_dot);
  }

  v = {};
  v.subgroups_wrong = true;
  vk::write_verdict(info, v, "{}");
  try {
    vk::Context c(validated());
    ADD_FAILURE() << "expected the device to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("subgroups"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  {
    VulkanOptions o = validated();
    o.tuning.ignore_selftest = true;
    EXPECT_NO_THROW(vk::Context c(o));
  }
  unsetenv("XDG_CACHE_HOME");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace vkllm::test
