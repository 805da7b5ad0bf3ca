// Quantization quality: for every recipe on the tiny twin of every family, the KL divergence and
// top-1 agreement of the recipe's CPU-backend logits against the fp32 (non-quantized) artifact,
// over a fixed teacher-forced token sequence. Thresholds and the table: docs/quality.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "artifact/reader.h"
#include "artifact/writer.h"
#include "backend/executor.h"
#include "core/mapped_file.h"
#include "e2e/quality.h"
#include "export/exporter.h"
#include "hf/checkpoint.h"
#include "hf/synth.h"
#include "tiny_ckpt.h"

using namespace vkllm;
using namespace vkllm::testing;

namespace {

constexpr int kSeqLen = 32;

// Logits after each probe token on the CPU backend (src/e2e/quality.h).
std::vector<std::vector<float>> run_logits(const std::string& path,
                                           const std::vector<int32_t>& ids) {
  ArtifactReader r(path);
  auto ex = make_cpu_executor(r.program(), r);
  return teacher_forced_logits(*ex, ids, r.desc().vocab);
}

// The tiny twins of `vkllm synth` (real vocabularies, head_dim and config keys), without their
// tokenizer (a small one that loads: only ids are used here).
std::string make_twin(const std::string& dir, const std::string& preset) {
  SynthOptions so;
  so.preset = preset;
  so.out_dir = dir;
  so.no_tokenizer = true;
  so.threads = 1;
  synth_write(so);
  write_text(dir + "/tokenizer.json", testutil::tiny_tokenizer_json());
  return dir;
}

// Swaps the two nibbles of every Q4 byte: the wrong packing order, a bug the gate must catch.
std::string break_packing(const std::string& in, const std::string& out) {
  ArtifactReader r(in);
  ArtifactContent c;
  c.desc = r.desc();
  c.recipe = r.recipe();
  c.program = r.program();
  for (const std::string& n : r.file_names()) c.files.push_back({n, std::string(r.file(n))});
  std::vector<std::vector<uint8_t>> w(c.program.tensors.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const TensorDecl& t = c.program.tensors[i];
    if (t.kind != TensorKind::Weight) continue;
    auto s = r.weight(r.program(), static_cast<int32_t>(i));
    w[i].assign(s.begin(), s.end());
    if (t.dtype == DType::Q4)
      for (auto& b : w[i]) b = static_cast<uint8_t>((b >> 4) | (b << 4));
  }
  write_artifact(out, c, w);
  return out;
}

// Every recipe on each twin against its fp32 artifact (one table row a recipe), the recipe's
// quality gate, and, for quantized-8da4w, the negative control.
void every_recipe_passes_the_gate(const std::vector<std::string>& twins) {
  TempDir dir("quality");
  std::printf(
      "| twin | recipe | mean KL (nats) | max KL | top-1 agreement |\n|---|---|---|---|---|\n");
  for (const std::string& twin : twins) {
    const std::string ck = make_twin(dir.path + "/" + twin, twin);
    const ModelDesc d = HfCheckpoint(ck).desc();
    const auto ids = quality_probe_ids(d.vocab, kSeqLen);
    RecipeOptions o;
    o.max_context = kSeqLen;
    o.recipe = "non-quantized";
    export_checkpoint(ck, dir.path + "/ref.vkllm", o);
    const auto ref = run_logits(dir.path + "/ref.vkllm", ids);
    for (const auto& recipe : recipe_names()) {
      if (recipe == "non-quantized") continue;
      o.recipe = recipe;
      export_checkpoint(ck, dir.path + "/q.vkllm", o);
      const QualityStats q = compare_logits(ref, run_logits(dir.path + "/q.vkllm", ids));
      std::printf("| %s | %s | %.5f | %.5f | %.3f |\n", twin.c_str(), recipe.c_str(), q.kl_mean,
                  q.kl_max, q.top1);
      std::fflush(stdout);
      const QualityGate g = quality_gate_for(recipe);
      EXPECT_LE(q.kl_mean, g.kl_mean_max) << twin << " " << recipe;
      EXPECT_GE(q.top1, g.top1_min) << twin << " " << recipe;
      if (recipe == "quantized-8da4w") {
        // Negative control: a packing bug must fail the gate by a wide margin.
        const QualityStats b = compare_logits(
            ref, run_logits(break_packing(dir.path + "/q.vkllm", dir.path + "/b.vkllm"), ids));
        std::printf("| %s | (control: nibbles swapped) | %.5f | %.5f | %.3f |\n", twin.c_str(),
                    b.kl_mean, b.kl_max, b.top1);
        EXPECT_FALSE(g.passes(b)) << twin;
        // ... by a wide margin on both measures (measured: KL ~24 nats, top-1 0).
        EXPECT_GT(b.kl_mean, 3 * g.kl_mean_max) << twin;
        EXPECT_LT(b.top1, g.top1_min) << twin;
      }
    }
  }
}

}  // namespace

// The three seed architectures.
TEST(Quality, EveryRecipeOnTheTinyTwins) {
  every_recipe_passes_the_gate({"tiny-qwen3", "tiny-llama3.2", "tiny-phi4mini"});
}

// The families added since (docs/ir.md): Qwen2.5's biases, Gemma 3's windows and GeGLU, Mistral's
// untied head, SmolLM3's layers without rotary embedding.
TEST(Quality, EveryRecipeOnTheNewFamilyTwins) {
  every_recipe_passes_the_gate({"tiny-qwen2.5", "tiny-gemma3", "tiny-mistral", "tiny-smollm3"});
}

// docs/quality.md's gate table is the code's (quality_gate_for): one row per recipe.
TEST(Quality, DocGateTableMatchesTheCode) {
  const std::string doc = read_text_file(std::string(VKLLM_SOURCE_DIR) + "/docs/quality.md");
  const size_t at = doc.find("### Gates");
  ASSERT_NE(at, std::string::npos);
  std::map<std::string, std::pair<double, double>> rows;
  const std::regex re(R"(^\| ([a-z0-9-]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|)");
  std::istringstream in(doc.substr(at));
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) rows[m[1]] = {std::stod(m[2]), std::stod(m[3])};
  }
  ASSERT_EQ(rows.size(), recipe_names().size());
  for (const auto& r : recipe_names()) {
    ASSERT_TRUE(rows.count(r)) << r;
    EXPECT_EQ(rows[r].first, quality_gate_for(r).kl_mean_max) << r;
    EXPECT_EQ(rows[r].second, quality_gate_for(r).top1_min) << r;
  }
}
