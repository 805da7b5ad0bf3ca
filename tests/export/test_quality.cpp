// Quantization quality: for every recipe on small checkpoints of the three architectures, the KL
// divergence and top-1 agreement of the recipe's CPU-backend logits against the fp32
// (non-quantized) artifact, over a fixed teacher-forced token sequence. Thresholds and the table:
// docs/quality.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "artifact/reader.h"
#include "export/exporter.h"
#include "runtime/executor.h"
#include "tiny_ckpt.h"

using namespace vkllm;
using namespace vkllm::testing;

namespace {

constexpr int kSeqLen = 48;

std::vector<int32_t> fixed_tokens(int vocab) {
  std::vector<int32_t> ids;
  uint32_t x = 12345;
  for (int i = 0; i < kSeqLen; ++i) {
    x = x * 1103515245u + 12345u;
    ids.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab)));
  }
  return ids;
}

// Logits after each token, decoding one token per forward.
std::vector<std::vector<float>> run_logits(const std::string& path, const std::vector<int32_t>& ids) {
  ArtifactReader r(path);
  auto ex = make_cpu_executor(r.program(), r);
  std::vector<std::vector<float>> out;
  for (int pos = 0; pos < static_cast<int>(ids.size()); ++pos) {
    std::vector<float> l(static_cast<size_t>(r.desc().vocab));
    ex->forward(&ids[pos], 1, pos, l.data());
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<double> log_softmax(const std::vector<float>& l) {
  double mx = -1e300;
  for (float v : l) mx = std::max(mx, double(v));
  double s = 0;
  for (float v : l) s += std::exp(double(v) - mx);
  std::vector<double> o(l.size());
  for (size_t i = 0; i < l.size(); ++i) o[i] = double(l[i]) - mx - std::log(s);
  return o;
}

struct Quality {
  double kl = 0, kl_max = 0, top1 = 0;
};

Quality compare(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& q) {
  Quality r;
  for (size_t t = 0; t < ref.size(); ++t) {
    auto a = log_softmax(ref[t]), b = log_softmax(q[t]);
    double kl = 0;
    for (size_t i = 0; i < a.size(); ++i) kl += std::exp(a[i]) * (a[i] - b[i]);
    r.kl += kl;
    r.kl_max = std::max(r.kl_max, kl);
    auto am = std::max_element(ref[t].begin(), ref[t].end()) - ref[t].begin();
    auto bm = std::max_element(q[t].begin(), q[t].end()) - q[t].begin();
    r.top1 += am == bm;
  }
  r.kl /= double(ref.size());
  r.top1 /= double(ref.size());
  return r;
}

// Gates (docs/quality.md explains how they were set from the measured values).
struct Gate {
  double kl_mean, top1_min;
};
Gate gate_for(const std::string& recipe) {
  if (recipe == "fp16") return {1e-4, 0.97};
  if (recipe == "quantized-int4-weight-only") return {0.05, 0.85};
  return {0.08, 0.80};  // 8da4w variants
}

}  // namespace

TEST(Quality, EveryRecipeOnSmallCheckpoints) {
  TempDir dir("quality");
  std::map<std::string, TinySpec> models;
  for (const std::string arch : {"llama", "qwen3", "phi3"}) {
    TinySpec s;
    s.arch = arch;
    s.tied = arch != "phi3";
    s.hidden = 128;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 32;
    s.inter = 256;
    s.vocab = 256;
    s.layers = 2;
    s.seed = 100 + static_cast<uint32_t>(models.size());
    // Logit spread of a trained model (std ~3 nats): embedding / head std 3/sqrt(D), and block
    // outputs large enough that the residual is not just the current token's embedding (which
    // would make a tied model predict its input with a huge margin).
    s.emb_std = 3.0f / std::sqrt(128.0f);
    s.head_std = 3.0f / std::sqrt(128.0f);
    s.out_gain = 4.0f;
    models["own-" + arch] = s;
  }
  std::printf("| model | recipe | mean KL (nats) | max KL | top-1 agreement |\n|---|---|---|---|---|\n");
  for (auto& [name, spec] : models) {
    const std::string ck = make_checkpoint(dir.path + "/" + name, spec);
    const auto ids = fixed_tokens(spec.vocab);
    RecipeOptions o;
    o.max_context = kSeqLen;
    o.recipe = "non-quantized";
    export_checkpoint(ck, dir.path + "/ref.vkllm", o);
    const auto ref = run_logits(dir.path + "/ref.vkllm", ids);
    for (const auto& recipe : recipe_names()) {
      if (recipe == "non-quantized") continue;
      o.recipe = recipe;
      export_checkpoint(ck, dir.path + "/q.vkllm", o);
      const Quality q = compare(ref, run_logits(dir.path + "/q.vkllm", ids));
      std::printf("| %s | %s | %.5f | %.5f | %.3f |\n", name.c_str(), recipe.c_str(), q.kl, q.kl_max, q.top1);
      const Gate g = gate_for(recipe);
      EXPECT_LE(q.kl, g.kl_mean) << name << " " << recipe;
      EXPECT_GE(q.top1, g.top1_min) << name << " " << recipe;
    }
  }
}
