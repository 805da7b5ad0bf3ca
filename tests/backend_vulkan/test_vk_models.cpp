// The Vulkan interpreter on the programs the exporter's lowering emits for the three
// architectures (small random Hugging Face checkpoints): the same greedy tokens as the CPU
// reference over a prompt and a greedy continuation, logits NMSE <= 5e-4.
#include <gtest/gtest.h>

#include "backend/vulkan/vulkan_executor.h"
#include "runtime/reference.h"
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
  const int V = ckpt.desc().vocab;
  std::vector<int32_t> prompt = {5, 17, 299, 0, 42, 42, 7, 100, 3, 250, 11};
  std::vector<float> lc(V), lg(V);
  int32_t tc = cpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lc.data());
  int32_t tg = gpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lg.data());
  ASSERT_EQ(tg, tc);
  EXPECT_LE(nmse(lg, lc), 5e-4);
  int pos = static_cast<int>(prompt.size());
  for (int i = 0; i < 12; ++i, ++pos) {
    tc = cpu->forward(&tc, 1, pos, lc.data());
    tg = gpu->forward(&tg, 1, pos, lg.data());
    ASSERT_EQ(tg, tc) << "step " << i;
    EXPECT_LE(nmse(lg, lc), 5e-4) << "step " << i;
  }
  gpu.reset();
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

INSTANTIATE_TEST_SUITE_P(Arch, VulkanModels,
                         ::testing::Values(Arch::Llama, Arch::Qwen3, Arch::Phi3),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

}  // namespace
}  // namespace vkllm::test
