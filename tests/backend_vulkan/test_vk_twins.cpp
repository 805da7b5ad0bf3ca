// The Llama-architecture twins of `vkllm synth` (tiny-mistral: untied head, Mistral's config;
// tiny-smollm3: every 4th layer without rotary embedding, so the Vulkan planner sees attentions
// with and without ropes before them; tiny-qwen2.5: bias_add ops between the q/k/v projections and
// the ropes; tiny-gemma3: sliding-window and global layers), each under every recipe, through
// export and both backends: the artifact's program on Vulkan gives the CPU reference's greedy
// tokens over a chunked prefill and a decode, logits NMSE within the recipe's agreement bound
// (runtime/agreement.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>

#include "artifact/reader.h"
#include "backend/executor.h"
#include "backend/vulkan/vulkan_executor.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "export/recipe.h"
#include "hf/synth.h"
#include "runtime/agreement.h"
#include "testutil/tiny_checkpoint.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

struct TwinCase {
  const char* preset;
  const char* recipe;
};
// (Printed in the test's name, as CTest lists it, instead of the struct's bytes.)
void PrintTo(const TwinCase& c, std::ostream* os) {
  *os << c.preset << " " << c.recipe;
}

class VulkanTwins : public ::testing::TestWithParam<TwinCase> {};

// The twin without its fixture tokenizer: a small one that loads (only ids are used here). The
// twins of a process are removed at its exit.
struct TwinRoot {
  std::string path = testutil::temp_dir("vktwin");
  ~TwinRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
std::string twin_dir(const std::string& preset) {
  static const TwinRoot root;
  static std::map<std::string, std::string> made;
  if (made.count(preset)) return made[preset];
  const std::string dir = root.path + "/" + preset;
  SynthOptions so;
  so.preset = preset;
  so.out_dir = dir;
  so.no_tokenizer = true;
  synth_write(so);
  write_text_file(dir + "/tokenizer.json", testutil::tiny_tokenizer_json());
  return made[preset] = dir;
}

TEST_P(VulkanTwins, ExportedProgramAgreesWithCpu) {
  const TwinCase tc = GetParam();
  const std::string dir = twin_dir(tc.preset);
  RecipeOptions o;
  o.recipe = tc.recipe;
  o.max_context = 64;
  const std::string path = dir + "-" + tc.recipe + ".vkllm";
  export_checkpoint(dir, path, o);
  ArtifactReader r(path);
  const int vocab = r.desc().vocab;
  const double bound = agreement_bounds(tc.recipe).max_nmse;
  const uint64_t msgs = vk::validation_message_count();
  // The default plan, then, for one recipe a twin, decode chains on a grid of two workgroups (a
  // GPU's default decode; lavapipe runs them only when asked): every layer's attention a stage
  // where the chain holds it, so chains end where layers' attention differs (SmolLM3's).
  const bool chains_too = std::string(tc.recipe) == "quantized-8da4w";
  for (const bool chains : {false, true}) {
    if (chains && !chains_too) continue;
    VulkanOptions opt = validated();
    opt.max_tokens = 8;  // the 11-token prompt runs as two chunks
    if (chains) {
      opt.tuning.chain_groups = 2;
      opt.tuning.chain_att_until = 1 << 20;
    }
    const char* plan = chains ? "chains" : "default";
    auto gpu = make_vulkan_executor(r.program(), r, opt);
    auto cpu = make_cpu_executor(r.program(), r);
    std::vector<int32_t> prompt = {5, 17, 299, 0, 42, 42, 7, 100, 3, 250, 11};
    std::vector<float> lc(static_cast<size_t>(vocab)), lg(lc.size());
    int32_t c = cpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lc.data());
    int32_t g = gpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lg.data());
    ASSERT_EQ(g, c) << plan;
    double worst = nmse(lg, lc);
    EXPECT_LE(worst, bound) << plan;
    int pos = static_cast<int>(prompt.size());
    for (int i = 0; i < 8; ++i, ++pos) {
      c = cpu->forward(&c, 1, pos, lc.data());
      g = gpu->forward(&g, 1, pos, lg.data());
      ASSERT_EQ(g, c) << plan << " step " << i;
      EXPECT_LE(nmse(lg, lc), bound) << plan << " step " << i;
      worst = std::max(worst, nmse(lg, lc));
    }
    std::printf("[nmse] %s %s %s %.3g (bound %.3g)\n", tc.preset, tc.recipe, plan, worst, bound);
    gpu.reset();
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
  std::filesystem::remove(path);
}

// Every recipe (export/recipe.h) on one twin.
std::vector<TwinCase> every_recipe(const char* preset) {
  std::vector<TwinCase> v;
  for (const std::string& r : recipe_names()) v.push_back({preset, r.c_str()});
  return v;
}

std::string case_name(const ::testing::TestParamInfo<TwinCase>& p) {
  std::string s = std::string(p.param.preset) + "_" + p.param.recipe;
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// Mistral v0.2: an untied head, a 32000-row SentencePiece vocabulary, head_dim 128.
INSTANTIATE_TEST_SUITE_P(Mistral, VulkanTwins, ::testing::ValuesIn(every_recipe("tiny-mistral")),
                         case_name);

// SmolLM3: layer 3 without rotary embedding (no_rope_layers), the others with it.
INSTANTIATE_TEST_SUITE_P(SmolLM3, VulkanTwins, ::testing::ValuesIn(every_recipe("tiny-smollm3")),
                         case_name);

// Qwen2.5: fp32 q/k/v biases after the projections, whatever the recipe stores the weights as.
INSTANTIATE_TEST_SUITE_P(Qwen25, VulkanTwins, ::testing::ValuesIn(every_recipe("tiny-qwen2.5")),
                         case_name);

// Gemma 3: sliding-window layers (window 8: the 11-token prompt's second chunk and the decode
// steps are past it), GeGLU, the embedding scale, head_dim 256.
INSTANTIATE_TEST_SUITE_P(Gemma3, VulkanTwins, ::testing::ValuesIn(every_recipe("tiny-gemma3")),
                         case_name);

}  // namespace
}  // namespace vkllm::test
