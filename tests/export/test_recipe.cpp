// Recipes as passes over the lowered program, the streaming exporter, tied-embedding storage and
// full-shape size plans.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "artifact/reader.h"
#include "core/error.h"
#include "export/exporter.h"
#include "export/recipe.h"
#include "hf/checkpoint.h"
#include "runtime/reference.h"
#include "tiny_ckpt.h"

using namespace vkllm;
using namespace vkllm::testing;

namespace {

std::map<std::string, int> families(const Program& p) {
  std::map<std::string, int> f;
  for (auto& o : p.ops) f[o.family]++;
  return f;
}

LoweredModel lower_tiny(const TinySpec& s) {
  return lower_model(parse_hf_config(tiny_config(s), nlohmann::json(), "config.json"), 64);
}

// Weights of shape [V, D] (the embedding table in any storage).
int count_tables(const Program& p, int64_t V, int64_t D) {
  int n = 0;
  for (auto& t : p.tensors)
    if (t.kind == TensorKind::Weight && t.shape == std::vector<int64_t>{V, D}) ++n;
  return n;
}

const Op& find_op(const Program& p, const std::string& family_prefix, bool last = false) {
  const Op* found = nullptr;
  for (auto& o : p.ops)
    if (o.family.rfind(family_prefix, 0) == 0) {
      found = &o;
      if (!last) break;
    }
  if (!found) throw std::runtime_error("no op " + family_prefix);
  return *found;
}

}  // namespace

TEST(Recipe, NamesAndTraits) {
  EXPECT_EQ(recipe_names().size(), 7u);
  for (auto& n : recipe_names()) EXPECT_NO_THROW(recipe_traits(n));
  EXPECT_TRUE(recipe_traits("quantized-8da4w-fp16-embedding").fp16);
  EXPECT_TRUE(recipe_traits("quantized-8da4w-fp16-embedding").emb_q4);
  EXPECT_TRUE(recipe_traits("quantized-int4-weight-only").q4w);
  EXPECT_FALSE(recipe_traits("fp16").quantized());
  try {
    recipe_traits("quantized-8da4w-bogus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: non-quantized"), std::string::npos);
  }
  RecipeOptions o;
  o.embedding_bits = 8;
  EXPECT_THROW(plan_export(lower_tiny({}), o), Error);
}

TEST(Recipe, FamiliesDtypesAndTiedStorage) {
  TinySpec s;  // tied llama, D = 64, V = 160
  const LoweredModel m = lower_tiny(s);
  for (const auto& name : recipe_names()) {
    SCOPED_TRACE(name);
    RecipeOptions o;
    o.recipe = name;
    const ExportPlan plan = plan_export(m, o);
    const Program& p = plan.program;
    const RecipeTraits t = recipe_traits(name);
    auto fam = families(p);
    EXPECT_EQ(fam["attention"], s.layers);
    EXPECT_EQ(fam.count("linear"), t.quantized() ? 0u : 1u);
    EXPECT_EQ(fam["linear_8da4w"], t.act8 ? 7 * s.layers + 1 : 0);
    EXPECT_EQ(fam["linear_q4w"], t.q4w ? 7 * s.layers + 1 : 0);
    EXPECT_EQ(fam["embedding_q4"], t.emb_q4 ? 1 : 0);
    // Tied table: one stored tensor unless the recipe quantizes the head but not the embedding.
    const bool two = t.quantized() && !t.emb_q4;
    EXPECT_EQ(count_tables(p, s.vocab, s.hidden), two ? 2 : 1);
    const Op& emb = find_op(p, "embedding");
    const Op& head = p.ops[p.ops.size() - 2];  // the logits projection precedes argmax
    ASSERT_EQ(head.outputs[0], p.logits);
    if (t.emb_q4) {
      EXPECT_EQ(emb.inputs[1], head.inputs[1]);  // the same Q4 table
      EXPECT_EQ(emb.inputs[2], head.inputs[2]);  // the same scales
      EXPECT_EQ(head.attrs["group"], 32);
      EXPECT_EQ(head.family, "linear_8da4w");
    } else if (!t.quantized()) {
      EXPECT_EQ(emb.inputs[1], head.inputs[1]);
    }
    // Storage types.
    for (auto& d : p.tensors) {
      if (d.kind == TensorKind::KVCache) {
        EXPECT_EQ(d.dtype, t.fp16 ? DType::F16 : DType::F32);
      }
      if (d.kind == TensorKind::Activation && d.name != "logits" && d.name != "next_token") {
        EXPECT_EQ(d.dtype, t.fp16 ? DType::F16 : DType::F32) << d.name;
      }
    }
    EXPECT_EQ(p.tensors[p.logits].dtype, DType::F32);
    if (!t.emb_q4) {
      EXPECT_EQ(p.tensors[emb.inputs[1]].dtype, t.fp16 ? DType::F16 : DType::F32);
    }
    // Every planned weight is written by exactly one job.
    std::vector<int> written(p.tensors.size(), 0);
    for (auto& j : plan.jobs)
      for (auto i : j.outputs()) written[i]++;
    for (size_t i = 0; i < p.tensors.size(); ++i)
      EXPECT_EQ(written[i], p.tensors[i].kind == TensorKind::Weight ? 1 : 0) << p.tensors[i].name;
    // hidden 64 < group 128: the linear groups shrink to the row width and are recorded.
    if (t.quantized()) {
      EXPECT_FALSE(plan.recipe["group_adjustments"].empty());
    }
  }
}

TEST(Recipe, UntiedHeadIsItsOwnLinear) {
  TinySpec s;
  s.tied = false;
  RecipeOptions o;
  o.recipe = "quantized-8da4w-embedding";
  o.group_size = 32;
  const ExportPlan plan = plan_export(lower_tiny(s), o);
  const Program& p = plan.program;
  EXPECT_EQ(count_tables(p, s.vocab, s.hidden), 2);  // embedding q4 + lm_head q4
  const Op& head = p.ops[p.ops.size() - 2];
  EXPECT_EQ(p.tensors[head.inputs[1]].name, "lm_head.weight.q4");
  EXPECT_TRUE(plan.recipe["group_adjustments"].empty());
}

TEST(Recipe, GroupThatDoesNotDivideIsReduced) {
  EXPECT_EQ(effective_group(128, 2048), 128);
  EXPECT_EQ(effective_group(128, 64), 64);
  EXPECT_EQ(effective_group(128, 96), 32);
  EXPECT_EQ(effective_group(32, 3072), 32);
  EXPECT_THROW(effective_group(0, 64), Error);
}

// Full-shape plans from the public configs (no weights needed): the sizes the design requires.
TEST(Recipe, FullShapeLlamaEmbeddingRecipesFit770MiB) {
  TempDir dir("llama-plan");
  nlohmann::json c = nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
    "rope_theta": 500000.0, "hidden_act": "silu",
    "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  write_text(dir.path + "/config.json", c.dump());
  const uint64_t limit = 770ull << 20;
  std::map<std::string, uint64_t> size;
  for (const auto& r : recipe_names()) {
    RecipeOptions o;
    o.recipe = r;
    size[r] = plan_checkpoint(dir.path, o).file_size;
  }
  EXPECT_LT(size["quantized-8da4w-embedding"], limit);
  EXPECT_LT(size["quantized-8da4w-fp16-embedding"], limit);
  // Int4 linears: 0.5 byte + 8/128 bytes (scales, sums) per weight; the 1.236 G parameters of
  // which 0.973 G are linears (ignoring the embedding) give a floor of ~550 MB.
  EXPECT_GT(size["quantized-8da4w-embedding"], 680ull << 20);
  // fp32: 4 bytes per parameter, the tied table once.
  EXPECT_NEAR(static_cast<double>(size["non-quantized"]), 1.2358e9 * 4, 0.01e9 * 4);
  EXPECT_NEAR(static_cast<double>(size["fp16"]), 1.2358e9 * 2, 0.01e9 * 2);
}

TEST(Export, NonQuantizedArtifactMatchesReferenceEngineExactly) {
  for (const std::string arch : {"llama", "qwen3", "phi3"}) {
    SCOPED_TRACE(arch);
    TempDir dir("exp-" + arch);
    TinySpec s;
    s.arch = arch;
    s.tied = arch != "phi3";
    make_checkpoint(dir.path + "/ckpt", s);
    RecipeOptions o;
    o.recipe = "non-quantized";
    o.max_context = 64;
    const std::string out = dir.path + "/m.vkllm";
    ExportResult r = export_checkpoint(dir.path + "/ckpt", out, o);
    EXPECT_EQ(r.file_size, std::filesystem::file_size(out));
    ArtifactReader ar(out);
    EXPECT_EQ(ar.program().max_ctx, 64);
    EXPECT_TRUE(ar.has_file("tokenizer.json"));
    EXPECT_TRUE(ar.has_file("config.json"));
    HfCheckpoint ck(dir.path + "/ckpt");
    auto ref = load_reference_model(ck, 64);
    auto e1 = make_cpu_executor(ar.program(), ar);
    auto e2 = ref->make_executor();
    std::vector<float> l1(s.vocab), l2(s.vocab);
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 5};
    e1->forward(prompt.data(), 5, 0, l1.data());
    e2->forward(prompt.data(), 5, 0, l2.data());
    EXPECT_EQ(l1, l2);
    // A decode step past the longrope original length (32) also matches.
    for (int pos = 5; pos < 40; ++pos) {
      int32_t id = pos % s.vocab;
      e1->forward(&id, 1, pos, l1.data());
      e2->forward(&id, 1, pos, l2.data());
    }
    EXPECT_EQ(l1, l2);
  }
}

TEST(Export, ChunkedStreamingGivesTheSameBytes) {
  TempDir dir("chunks");
  TinySpec s;
  make_checkpoint(dir.path + "/ckpt", s);
  for (const std::string recipe : {"quantized-8da4w-embedding", "fp16"}) {
    RecipeOptions o;
    o.recipe = recipe;
    o.max_context = 32;
    export_checkpoint(dir.path + "/ckpt", dir.path + "/a.vkllm", o);
    export_checkpoint(dir.path + "/ckpt", dir.path + "/b.vkllm", o, {}, 100);  // 100-element chunks
    ArtifactReader a(dir.path + "/a.vkllm"), b(dir.path + "/b.vkllm");
    ASSERT_EQ(a.program().tensors.size(), b.program().tensors.size());
    for (size_t i = 0; i < a.program().tensors.size(); ++i) {
      if (a.program().tensors[i].kind != TensorKind::Weight) continue;
      auto x = a.weight(a.program(), static_cast<int32_t>(i)),
           y = b.weight(b.program(), static_cast<int32_t>(i));
      ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()))
          << a.program().tensors[i].name;
    }
  }
}

TEST(Export, InterruptedOrFailedExportLeavesNothing) {
  TempDir dir("interrupt");
  TinySpec s;
  make_checkpoint(dir.path + "/ckpt", s);
  RecipeOptions o;
  o.recipe = "quantized-8da4w";
  const std::string out = dir.path + "/out/m.vkllm";
  std::filesystem::create_directories(dir.path + "/out");
  int calls = 0;
  EXPECT_THROW(export_checkpoint(dir.path + "/ckpt", out, o,
                                 [&](const ExportProgress& p) {
                                   if (++calls == 5) throw Error("interrupted at " + p.tensor);
                                 }),
               Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path + "/out"));
  // A checkpoint missing a tensor fails before writing anything.
  std::filesystem::remove(dir.path + "/ckpt/model.safetensors");
  TinySpec bad = s;
  bad.tied = false;
  TempDir d2("missing");
  make_checkpoint(d2.path, bad);
  nlohmann::json cfg = tiny_config(s);  // says tied, but is fine; now claim an extra layer
  cfg["num_hidden_layers"] = s.layers + 1;
  write_text(d2.path + "/config.json", cfg.dump());
  try {
    export_checkpoint(d2.path, out, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path + "/out"));
  // No tokenizer.json: refused (the artifact must be self-contained).
  std::filesystem::remove(d2.path + "/tokenizer.json");
  cfg["num_hidden_layers"] = s.layers;
  write_text(d2.path + "/config.json", cfg.dump());
  EXPECT_THROW(export_checkpoint(d2.path, out, o), Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path + "/out"));
}
