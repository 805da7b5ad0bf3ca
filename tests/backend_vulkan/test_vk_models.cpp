// The Vulkan interpreter on the programs the exporter's lowering emits for the three
// architectures (small random Hugging Face checkpoints): the same greedy tokens as the CPU
// reference over a prompt and a greedy continuation, logits NMSE within the fp32 programs' bound
// (testutil::kModelExactNmse, set from measurement: docs/gates.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "backend/vulkan/vulkan_executor.h"
#include "runtime/reference.h"
#include "testutil/op_tolerance.h"
#include "testutil/tiny_checkpoint.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

class VulkanModels : public ::testing::TestWithParam<Arch> {};

TEST_P(VulkanModels, GreedyTokensMatchCpu) {
  HfCheckpoint ckpt(testutil::write_tiny_checkpoint(testutil::temp_dir("vk"), GetParam(), true, 5));
  auto model = load_reference_model(ckpt, 64);
  const uint64_t msgs = vk::validation_message_count();
  VulkanOptions opt = validated();
  opt.max_tokens = 8;  // the 11-token prompt runs as two chunks
  auto gpu = make_vulkan_executor(model->lowered.program, model->weights, opt);
  auto cpu = model->make_executor();
  const int vocab = ckpt.desc().vocab;
  std::vector<int32_t> prompt = {5, 17, 299, 0, 42, 42, 7, 100, 3, 250, 11};
  std::vector<float> lc(vocab), lg(vocab);
  int32_t tc = cpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lc.data());
  int32_t tg = gpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lg.data());
  ASSERT_EQ(tg, tc);
  EXPECT_LE(nmse(lg, lc), testutil::kModelExactNmse);
  double worst = nmse(lg, lc);
  int pos = static_cast<int>(prompt.size());
  for (int i = 0; i < 12; ++i, ++pos) {
    tc = cpu->forward(&tc, 1, pos, lc.data());
    tg = gpu->forward(&tg, 1, pos, lg.data());
    ASSERT_EQ(tg, tc) << "step " << i;
    EXPECT_LE(nmse(lg, lc), testutil::kModelExactNmse) << "step " << i;
    worst = std::max(worst, nmse(lg, lc));
  }
  std::printf("[nmse] model %.3g %.3g\n", worst, testutil::kModelExactNmse);
  gpu.reset();
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// VKLLM_PROFILE's tables (printed when the executor ends), one per plan: rows of steps by kind
// and shape whose counts add up to the plan's steps (fewer than the ops: prefill fuses the ropes
// into the attention, decode more) and whose times add up to the total; the header gives kernels
// and barriers.
TEST(VulkanProfile, RowsAddUpToTheForwardPerPlan) {
  HfCheckpoint ckpt(
      testutil::write_tiny_checkpoint(testutil::temp_dir("vkp"), Arch::Llama, true, 5));
  auto model = load_reference_model(ckpt, 64);
  VulkanOptions opt = validated();
  opt.profile = true;
  auto gpu = make_vulkan_executor(model->lowered.program, model->weights, opt);
  std::vector<float> logits(static_cast<size_t>(ckpt.desc().vocab));
  std::vector<int32_t> prompt = {5, 17, 299, 0};
  int32_t t = gpu->forward(prompt.data(), 4, 0, logits.data());
  for (int pos = 4; pos < 7; ++pos) t = gpu->forward(&t, 1, pos, logits.data());
  ::testing::internal::CaptureStderr();
  gpu.reset();
  const std::string out = ::testing::internal::GetCapturedStderr();
  std::istringstream in(out);
  std::string line, plan;
  std::map<std::string, size_t> steps, counted, kernels;
  std::map<std::string, double> sum, total;
  std::smatch m;
  const std::regex head(
      R"(^vkllm: vulkan profile, (\w+): (\d+) kernels per \w+ step, (\d+) barriers \((\d+) steps.*$)"),
      row(R"(^  (.+?) +(\d+) +([0-9.]+) +([0-9.]+) +(\d+)$)"),  // ... ms, us each, GB/s
      tot(R"(^  total +(\d+) +([0-9.]+) +\((\d+) forwards\)$)");
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, head)) {
      plan = m[1];
      kernels[plan] = std::stoul(m[2]);
      steps[plan] = std::stoul(m[4]);
    } else if (std::regex_match(line, m, tot)) {
      EXPECT_EQ(std::stoul(m[1]), steps[plan]) << line;
      total[plan] = std::stod(m[2]);
      EXPECT_EQ(std::stoi(m[3]), plan == "prefill" ? 1 : 3) << line;
    } else if (std::regex_match(line, m, row)) {
      counted[plan] += std::stoul(m[2]);
      sum[plan] += std::stod(m[3]);
      // ms printed to 4 decimals (0.05 us), us per step to 2
      EXPECT_NEAR(std::stod(m[4]), std::stod(m[3]) * 1e3 / std::stod(m[2]), 0.06) << line;
    }
  }
  const size_t ops = model->lowered.program.ops.size();
  EXPECT_EQ(steps["prefill"], ops - 2 * 2) << out;  // two layers' rope x2+attention runs
  EXPECT_NE(out.find("rope x2+attention, prefill"), std::string::npos) << out;
  EXPECT_EQ(counted["prefill"], steps["prefill"]) << out;
  EXPECT_EQ(counted["decode"], steps["decode"]) << out;
  EXPECT_GT(steps["decode"], 0u) << out;
  EXPECT_LE(steps["decode"], ops) << out;
  EXPECT_GT(kernels["decode"], 0u) << out;
  for (const char* p : {"prefill", "decode"}) {
    ASSERT_GT(total[p], 0) << out;
    EXPECT_NEAR(sum[p], total[p], 0.002 + 0.01 * total[p]) << p << "\n" << out;
  }
}

#ifdef VKLLM_MEASURE
// The test-only switch VKLLM_TEST_CORRUPT_OP (Tuning::corrupt_op, the e2e gates' broken kernel;
// measurement builds only) reaches ops fused into the next one too: every add of the program, the
// three fused into norms included, is zeroed in the one recorded forward, and the logits change.
TEST(VulkanCorruptSwitch, ReachesAddsFusedIntoTheNextNorm) {
  HfCheckpoint ckpt(
      testutil::write_tiny_checkpoint(testutil::temp_dir("vkc"), Arch::Llama, true, 5));
  auto model = load_reference_model(ckpt, 64);
  size_t adds = 0;
  for (const Op& op : model->lowered.program.ops) adds += op.family == "add";
  ASSERT_EQ(adds, 4u);  // two layers, two residual adds each
  std::vector<int32_t> prompt = {5, 17, 299, 0};
  std::string said;
  auto logits = [&](bool corrupt) {
    VulkanOptions o = validated();
    if (corrupt) o.tuning.corrupt_op = "add";
    auto gpu = make_vulkan_executor(model->lowered.program, model->weights, o);
    std::vector<float> out(static_cast<size_t>(ckpt.desc().vocab));
    gpu->forward(prompt.data(), 4, 0, out.data());
    ::testing::internal::CaptureStderr();
    gpu.reset();
    said += ::testing::internal::GetCapturedStderr();
    return out;
  };
  const std::vector<float> good = logits(false), bad = logits(true);
  EXPECT_GT(nmse(bad, good), 1e-2);
  EXPECT_NE(said.find("VKLLM_TEST_CORRUPT_OP=add zeroed 4 op outputs"), std::string::npos) << said;
}
#endif

INSTANTIATE_TEST_SUITE_P(Arch, VulkanModels,
                         ::testing::Values(Arch::Llama, Arch::Qwen3, Arch::Phi3),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

}  // namespace
}  // namespace vkllm::test
