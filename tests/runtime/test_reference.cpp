// The CPU reference engine on small random checkpoints: properties that must hold whatever the
// weights (the transformers goldens test equality with Hugging Face: test_goldens.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/reference.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;

namespace {

using testutil::nmse;

class ReferenceTest : public ::testing::TestWithParam<Arch> {};

}  // namespace

TEST_P(ReferenceTest, PrefillEqualsTokenByTokenDecode) {
  std::string dir = testutil::write_tiny_checkpoint(testutil::temp_dir("ref"), GetParam());
  HfCheckpoint ckpt(dir);
  auto model = load_reference_model(ckpt, 64);
  const int V = ckpt.desc().vocab;
  std::vector<int32_t> ids = {5, 17, 299, 0, 42, 42, 7, 100, 3, 250};
  auto a = model->make_executor();
  std::vector<float> prefill(V), step(V);
  int32_t next_a = a->forward(ids.data(), static_cast<int>(ids.size()), 0, prefill.data());
  auto b = model->make_executor();
  int32_t next_b = -1;
  for (size_t i = 0; i < ids.size(); ++i)
    next_b = b->forward(&ids[i], 1, static_cast<int>(i), step.data());
  EXPECT_EQ(next_a, next_b);
  EXPECT_LT(nmse(prefill, step), 1e-10);
  // Split prefill: 4 tokens then 6.
  auto c = model->make_executor();
  c->forward(ids.data(), 4, 0, nullptr);
  std::vector<float> split(V);
  c->forward(ids.data() + 4, 6, 4, split.data());
  EXPECT_LT(nmse(prefill, split), 1e-10);
  // The returned token is the argmax of the logits.
  EXPECT_EQ(next_a, std::max_element(prefill.begin(), prefill.end()) - prefill.begin());
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
}

TEST_P(ReferenceTest, UntiedHeadIsUsed) {
  HfCheckpoint tied(
      testutil::write_tiny_checkpoint(testutil::temp_dir("tied"), GetParam(), true, 3));
  HfCheckpoint untied(
      testutil::write_tiny_checkpoint(testutil::temp_dir("untied"), GetParam(), false, 3));
  auto mt = load_reference_model(tied, 16), mu = load_reference_model(untied, 16);
  EXPECT_EQ(mu->lowered.program.tensors.size(), mt->lowered.program.tensors.size() + 1);
  std::vector<float> lt(300), lu(300);
  int32_t id = 9;
  mt->make_executor()->forward(&id, 1, 0, lt.data());
  mu->make_executor()->forward(&id, 1, 0, lu.data());
  EXPECT_GT(nmse(lt, lu), 1e-3);
}

TEST_P(ReferenceTest, ContextOverflowIsAClearError) {
  HfCheckpoint ckpt(testutil::write_tiny_checkpoint(testutil::temp_dir("ctx"), GetParam()));
  auto model = load_reference_model(ckpt, 8);
  auto ex = model->make_executor();
  std::vector<int32_t> ids(9, 4);
  try {
    ex->forward(ids.data(), 9, 0, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos);
  }
  std::vector<int32_t> prompt(8, 4);
  EXPECT_THROW(generate(*ex, model->lowered.program, prompt, 4, {}, {}, 0, nullptr, nullptr),
               Error);
  int32_t bad = 300;
  EXPECT_THROW(ex->forward(&bad, 1, 0, nullptr), Error);
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceTest,
                         ::testing::Values(Arch::Llama, Arch::Qwen3, Arch::Phi3),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

TEST(Reference, LongropeSwitchesTablesPastTheOriginalContext) {
  HfCheckpoint ckpt(testutil::write_tiny_checkpoint(testutil::temp_dir("long"), Arch::Phi3));
  auto model = load_reference_model(ckpt, 64);
  ASSERT_EQ(ckpt.desc().rope.original_max_pos, 32);
  // 40 tokens in one forward pass: the long table applies to all of them, so the logits differ
  // from a run whose first 32 positions used the short table.
  std::vector<int32_t> ids(40);
  for (int i = 0; i < 40; ++i) ids[i] = (i * 37) % 300;
  std::vector<float> one(300), two(300);
  model->make_executor()->forward(ids.data(), 40, 0, one.data());
  auto ex = model->make_executor();
  ex->forward(ids.data(), 30, 0, nullptr);
  ex->forward(ids.data() + 30, 10, 30, two.data());
  EXPECT_GT(nmse(one, two), 1e-8);
}

TEST(Generate, GreedyStopsAtEosAndSamplingIsSeeded) {
  HfCheckpoint ckpt(testutil::write_tiny_checkpoint(testutil::temp_dir("gen"), Arch::Llama));
  auto model = load_reference_model(ckpt, 64);
  std::vector<int32_t> prompt = {1, 20, 30};
  auto ex = model->make_executor();
  GenerateStats st;
  auto greedy = generate(*ex, model->lowered.program, prompt, 12, {}, {}, 0, nullptr, &st);
  ASSERT_EQ(greedy.size(), 12u);
  EXPECT_EQ(st.prompt_tokens, 3);
  // Stop at the first greedy token that differs from the first one, declared eos.
  size_t k = 1;
  while (k < greedy.size() && greedy[k] == greedy[0]) ++k;
  const int32_t eos = k < greedy.size() ? greedy[k] : greedy[0];
  if (k == greedy.size()) k = 0;
  auto stopped = generate(*ex, model->lowered.program, prompt, 12, {}, {eos}, 0, nullptr, &st);
  EXPECT_TRUE(st.stopped_by_eos);
  EXPECT_EQ(stopped, std::vector<int32_t>(greedy.begin(), greedy.begin() + static_cast<long>(k)));
  // Callback stop after 2 tokens.
  int n = 0;
  auto cb = generate(
      *ex, model->lowered.program, prompt, 12, {}, {}, 0, [&](int32_t) { return ++n < 2; }, &st);
  EXPECT_EQ(cb.size(), 2u);
  EXPECT_TRUE(st.stopped_by_callback);
  // Seeded sampling: reproducible, seed-dependent; top_p -> 0 collapses to greedy.
  SamplingParams sp{20.0f, 1.0f, 42};
  auto s1 = generate(*ex, model->lowered.program, prompt, 12, sp, {}, 0, nullptr, nullptr);
  auto s2 = generate(*ex, model->lowered.program, prompt, 12, sp, {}, 0, nullptr, nullptr);
  sp.seed = 43;
  auto s3 = generate(*ex, model->lowered.program, prompt, 12, sp, {}, 0, nullptr, nullptr);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, s3);
  auto g = generate(*ex, model->lowered.program, prompt, 12, SamplingParams{1.0f, 1e-6f, 7}, {}, 0,
                    nullptr, nullptr);
  EXPECT_EQ(g, greedy);
}
