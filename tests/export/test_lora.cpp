// LoRA merge at export (docs/lora.md): peft's module selection rules, and the merged artifact on
// the CPU reference against the reference engine on a checkpoint merged by a dense fp64 loop
// (lora_fixture.h). The peft goldens are test_lora_goldens.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "artifact/reader.h"
#include "core/error.h"
#include "export/exporter.h"
#include "export/lora.h"
#include "hf/checkpoint.h"
#include "hf/synth.h"
#include "lora_fixture.h"
#include "runtime/reference.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"
#include "tiny_ckpt.h"

using namespace vkllm;
using namespace vkllm::testing;
using ojson = nlohmann::ordered_json;

namespace {

LoraConfig config(ojson extra) {
  ojson j = test_lora_config(8, 16, {"q_proj", "v_proj"});
  for (auto& [k, v] : extra.items()) j[k] = v;
  return parse_lora_config(j, "test");
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using testutil::nmse;

// Greedy decode of `steps` tokens after `prompt`; every step's logits.
std::vector<std::vector<float>> decode(Executor& ex, std::vector<int32_t> prompt, int steps, int V,
                                       std::vector<int32_t>* ids) {
  std::vector<std::vector<float>> out;
  std::vector<float> l(static_cast<size_t>(V));
  int32_t next = ex.forward(prompt.data(), static_cast<int>(prompt.size()), 0, l.data());
  out.push_back(l);
  int pos = static_cast<int>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    ids->push_back(next);
    next = ex.forward(&next, 1, pos++, l.data());
    out.push_back(l);
  }
  return out;
}

}  // namespace

// ---- peft's selection rules ------------------------------------------------------------------

TEST(LoraConfig, TargetNamesMatchExactlyOrAsLastComponents) {
  const LoraConfig c = config({});
  EXPECT_TRUE(lora_targets(c, "model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(lora_targets(c, "model.layers.3.self_attn.v_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.xq_proj"));  // a suffix, not a component
  const LoraConfig dotted = config({{"target_modules", {"self_attn.q_proj"}}});
  EXPECT_TRUE(lora_targets(dotted, "model.layers.1.self_attn.q_proj"));
}

TEST(LoraConfig, RegexMatchesTheWholeName) {
  const LoraConfig c = config({{"target_modules", R"(.*\.layers\.[01]\.self_attn\.(q|k)_proj)"}});
  EXPECT_TRUE(lora_targets(c, "model.layers.1.self_attn.k_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.2.self_attn.k_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.1.self_attn.k_proj.extra"));  // fullmatch
  EXPECT_NE(error_of([] { lora_targets(config({{"target_modules", "(unclosed"}}), "x"); }), "");
}

// Unsloth writes target_modules as one regex of this shape (Python re syntax: \b, (?:...),
// lazy .*?, [\d]{1,}); PCRE2 reads it the same way.
TEST(LoraConfig, UnslothStyleRegex) {
  const LoraConfig c = config(
      {{"target_modules",
        R"((?:.*?(?:vision|image).*?(?:attn|mlp).*?(?:q_proj|v_proj).*?)|(?:\bmodel\.layers\.[\d]{1,}\.(?:self_attn|mlp)\.(?:(?:q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj))))"}});
  EXPECT_TRUE(lora_targets(c, "model.layers.12.self_attn.k_proj"));
  EXPECT_TRUE(lora_targets(c, "model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.mlp"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.qkv_proj"));
  EXPECT_FALSE(lora_targets(c, "lm_head"));
}

TEST(LoraConfig, LayersToTransformFilterNamesOnly) {
  const LoraConfig c = config({{"layers_to_transform", {1, 3}}});
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(lora_targets(c, "model.layers.1.self_attn.q_proj"));
  EXPECT_TRUE(lora_targets(c, "model.layers.3.self_attn.v_proj"));
  const LoraConfig one = config({{"layers_to_transform", 2}, {"layers_pattern", "layers"}});
  EXPECT_TRUE(lora_targets(one, "model.layers.2.self_attn.q_proj"));
  EXPECT_FALSE(lora_targets(one, "model.layers.12.self_attn.q_proj"));
  const LoraConfig other = config({{"layers_to_transform", 2}, {"layers_pattern", "blocks"}});
  EXPECT_FALSE(lora_targets(other, "model.layers.2.self_attn.q_proj"));
  // A full module name is taken as is, layers_to_transform or not (peft's exact-name branch).
  const LoraConfig exact = config(
      {{"target_modules", {"model.layers.0.self_attn.q_proj"}}, {"layers_to_transform", {1}}});
  EXPECT_TRUE(lora_targets(exact, "model.layers.0.self_attn.q_proj"));
}

TEST(LoraConfig, ExcludeModulesWin) {
  const LoraConfig c = config({{"exclude_modules", {"layers.1.self_attn.q_proj"}}});
  EXPECT_TRUE(lora_targets(c, "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.1.self_attn.q_proj"));
  const LoraConfig re = config({{"exclude_modules", R"(.*layers\.0\..*)"}});
  EXPECT_FALSE(lora_targets(re, "model.layers.0.self_attn.v_proj"));
}

TEST(LoraConfig, RankAndAlphaPatternsFirstMatchInFileOrder) {
  // File order, not alphabetical: "q_proj" is listed before "layers.0.self_attn.q_proj".
  const LoraConfig c =
      config({{"rank_pattern", ojson{{"q_proj", 4}, {"layers.0.self_attn.q_proj", 12}}},
              {"alpha_pattern", ojson{{"model.layers.1.self_attn.v_proj", 3.5}}}});
  bool from = false;
  EXPECT_EQ(lora_module_rank(c, "model.layers.0.self_attn.q_proj", &from), 4);
  EXPECT_TRUE(from);
  EXPECT_EQ(lora_module_rank(c, "model.layers.0.self_attn.v_proj", &from), 8);
  EXPECT_FALSE(from);
  EXPECT_EQ(lora_module_rank(c, "model.layers.0.self_attn.xq_proj"), 8);  // (.*\.)? prefix
  EXPECT_EQ(lora_module_alpha(c, "model.layers.1.self_attn.v_proj"), 3.5);
  EXPECT_EQ(lora_module_alpha(c, "model.layers.0.self_attn.v_proj"), 16.0);
}

TEST(LoraConfig, RefusesWhatCannotBeMerged) {
  EXPECT_NE(error_of([] {
              config({{"peft_type", "IA3"}});
            }).find("peft_type IA3 is not LORA"),
            std::string::npos);
  EXPECT_NE(error_of([] { config({{"use_dora", true}}); }).find("use_dora"), std::string::npos);
  EXPECT_NE(error_of([] {
              config({{"modules_to_save", {"lm_head"}}});
            }).find("modules_to_save"),
            std::string::npos);
  EXPECT_NE(error_of([] { config({{"bias", "all"}}); }).find("bias \"all\""), std::string::npos);
  EXPECT_NE(error_of([] { config({{"r", 0}}); }).find("r = 0 is out of range"), std::string::npos);
  EXPECT_NE(error_of([] {
              config({{"r", 1e300}});
            }).find("r must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { config({{"rank_pattern", ojson{{"q_proj", -1}}}}); }), "");
  EXPECT_NE(error_of([] { config({{"use_qalora", true}}); }).find("use_qalora"), std::string::npos);
  EXPECT_NE(error_of([] {
              config({{"alora_invocation_tokens", {1, 2}}});
            }).find("activated LoRA"),
            std::string::npos);
  // What peft writes for a plain adapter is accepted.
  EXPECT_EQ(error_of([] { config({{"modules_to_save", ojson::array()}}); }), "");
  EXPECT_EQ(error_of([] {
              config({{"use_qalora", false},
                      {"arrow_config", nullptr},
                      {"lora_bias", false},
                      {"target_parameters", nullptr},
                      {"loftq_config", ojson::object()}});
            }),
            "");
}

// ---- the merge against a dense fp64 merge ----------------------------------------------------

namespace {

struct Case {
  std::string name, arch;
  bool rslora = false, rank_pattern = false, split_fused = false, bf16 = false;
  double scale = 1.0;
};

// The modules of a TinySpec model the case's adapter changes, with their shapes and scalings.
std::vector<TestLoraModule> modules_for(const Case& c, const TinySpec& s, ojson* cfg) {
  const int64_t D = s.hidden, q = int64_t(s.heads) * s.head_dim,
                kv = int64_t(s.kv_heads) * s.head_dim, F = s.inter;
  const int r = 8;
  const double alpha = 12;
  std::vector<std::string> names;
  if (c.arch == "phi3" && !c.split_fused)
    names = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  else
    names = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  *cfg = test_lora_config(r, alpha, names);
  (*cfg)["use_rslora"] = c.rslora;
  if (c.rank_pattern)
    (*cfg)["rank_pattern"] = ojson{{"layers.1.self_attn.o_proj", 4}, {"down_proj", 16}};
  if (c.rank_pattern) (*cfg)["alpha_pattern"] = ojson{{"down_proj", 5.0}};
  std::vector<TestLoraModule> mods;
  for (int l = 0; l < s.layers; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    for (const auto& n : names) {
      TestLoraModule m;
      const bool mlp =
          n == "gate_proj" || n == "up_proj" || n == "down_proj" || n == "gate_up_proj";
      const std::string sub = mlp ? "mlp." : "self_attn.";
      m.module = L + sub + n;
      m.hf_tensor = L + sub + n + ".weight";
      m.in = D;
      if (n == "q_proj") m.out = q;
      if (n == "k_proj" || n == "v_proj") m.out = kv;
      if (n == "qkv_proj") m.out = q + 2 * kv;
      if (n == "o_proj") {
        m.out = D;
        m.in = q;
      }
      if (n == "gate_proj" || n == "up_proj") m.out = F;
      if (n == "gate_up_proj") m.out = 2 * F;
      if (n == "down_proj") {
        m.out = D;
        m.in = F;
      }
      if (c.arch == "phi3" && c.split_fused) {
        if (n == "q_proj" || n == "k_proj" || n == "v_proj")
          m.hf_tensor = L + "self_attn.qkv_proj.weight";
        if (n == "k_proj") m.row_begin = q;
        if (n == "v_proj") m.row_begin = q + kv;
        if (n == "gate_proj" || n == "up_proj") m.hf_tensor = L + "mlp.gate_up_proj.weight";
        if (n == "up_proj") m.row_begin = F;
      }
      m.r = r;
      double a = alpha;
      if (c.rank_pattern && m.module == "model.layers.1.self_attn.o_proj") m.r = 4;
      if (c.rank_pattern && n == "down_proj") {
        m.r = 16;
        a = 5.0;
      }
      m.scaling = c.scale * a / (c.rslora ? std::sqrt(double(m.r)) : double(m.r));
      mods.push_back(m);
    }
  }
  return mods;
}

class LoraMergeTest : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(LoraMergeTest, ExportedMergeEqualsDenseFp64Merge) {
  const Case& c = GetParam();
  TempDir tmp("lora");
  TinySpec s;
  s.arch = c.arch;
  s.tied = c.arch != "qwen3";
  s.seed = 7;
  const std::string base = make_checkpoint(tmp.path + "/base", s);
  ojson cfg;
  std::vector<TestLoraModule> mods = modules_for(c, s, &cfg);
  write_test_adapter(tmp.path + "/adapter", cfg, mods, 11, c.bf16 ? StDType::BF16 : StDType::F32);
  write_dense_merge(base, tmp.path + "/merged", mods);

  HfCheckpoint bck(base);
  LoraMerge merge(tmp.path + "/adapter", bck.desc(), c.scale, {"adapter", "", "", ""});
  ASSERT_EQ(merge.deltas().size(), mods.size());
  RecipeOptions ro;
  ro.recipe = "non-quantized";
  ro.max_context = 64;
  // Small chunks: row ranges that start and end inside a fused tensor's parts.
  export_checkpoint(base, tmp.path + "/m.vkllm", ro, {}, 7 * s.hidden, &merge);
  ArtifactReader art(tmp.path + "/m.vkllm");
  auto ex = make_cpu_executor(art.program(), art);

  HfCheckpoint mck(tmp.path + "/merged");
  auto ref_model = load_reference_model(mck, 64);
  auto ref = ref_model->make_executor();
  auto plain_model = load_reference_model(bck, 64);
  auto plain = plain_model->make_executor();

  const std::vector<int32_t> prompt = {3, 17, 99, 5, 140, 62};
  std::vector<int32_t> got_ids, ref_ids, plain_ids;
  const auto got = decode(*ex, prompt, 10, s.vocab, &got_ids);
  const auto want = decode(*ref, prompt, 10, s.vocab, &ref_ids);
  const auto base_logits = decode(*plain, prompt, 10, s.vocab, &plain_ids);
  EXPECT_EQ(got_ids, ref_ids);
  double worst = 0, effect = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, nmse(want[i], got[i]));
    effect = std::max(effect, nmse(base_logits[i], want[i]));
  }
  std::printf("%s: worst logits NMSE vs the dense merge %.3e; the adapter moves them by %.3e\n",
              c.name.c_str(), worst, effect);
  EXPECT_LE(worst, 1e-10);
  EXPECT_GE(effect, 1e-3);  // the adapter does change the model (the test can fail)

  // The artifact records the adapter.
  const auto& meta = art.metadata()["producer"]["lora"];
  EXPECT_EQ(meta["scale"].get<double>(), c.scale);
  EXPECT_EQ(meta["modules"].get<size_t>(), mods.size());
#ifdef VKLLM_WITH_CURL
  EXPECT_EQ(meta["sha256"]["adapter_model.safetensors"].get<std::string>(),
            testutil::sha256_file_hex(tmp.path + "/adapter/adapter_model.safetensors"));
  EXPECT_EQ(meta["sha256"]["adapter_config.json"].get<std::string>(),
            testutil::sha256_file_hex(tmp.path + "/adapter/adapter_config.json"));
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Archs, LoraMergeTest,
    ::testing::Values(Case{"llama", "llama"},
                      Case{"qwen3_rslora_bf16", "qwen3", true, false, false, true},
                      Case{"llama_rank_pattern_scale", "llama", false, true, false, false, 0.6},
                      Case{"phi3_fused", "phi3", false, true},
                      Case{"phi3_separate_qkv_gate_up", "phi3", false, false, true}),
    [](const auto& p) { return p.param.name; });

// ---- refusals of an adapter that does not fit the base ---------------------------------------

namespace {

struct Fit {
  TempDir tmp{"lorafit"};
  TinySpec s;
  std::string base;
  Fit() { base = make_checkpoint(tmp.path + "/base", s); }
  std::string refusal(ojson cfg, std::vector<TestLoraModule> mods) {
    write_test_adapter(tmp.path + "/a", cfg, mods, 3);
    HfCheckpoint ck(base);
    return error_of([&] { LoraMerge m(tmp.path + "/a", ck.desc(), 1.0, {}); });
  }
  TestLoraModule q(int layer, int r = 8, int64_t in = 64) {
    TestLoraModule m;
    m.module = "model.layers." + std::to_string(layer) + ".self_attn.q_proj";
    m.out = 64;
    m.in = in;
    m.r = r;
    return m;
  }
};

}  // namespace

TEST(LoraFit, RefusesAnAdapterForAnotherModel) {
  Fit f;
  const ojson cfg = test_lora_config(8, 16, {"q_proj"});
  EXPECT_NE(f.refusal(cfg, {f.q(0), f.q(1, 8, 96)}).find("lora_A [8, 96]"), std::string::npos);
  EXPECT_NE(f.refusal(cfg, {f.q(0), f.q(1), f.q(5)}).find("which the base"), std::string::npos);
  EXPECT_NE(f.refusal(test_lora_config(8, 16, {"q_proj", "c_attn"}), {f.q(0), f.q(1)})
                .find("target module 'c_attn' is not a module of the base"),
            std::string::npos);
  EXPECT_NE(f.refusal(cfg, {f.q(0)}).find("has no base_model.model.model.layers.1"),
            std::string::npos);
  EXPECT_NE(f.refusal(cfg, {f.q(0, 4), f.q(1)}).find("its rank is 8"), std::string::npos);
  ojson lt = cfg;
  lt["layers_to_transform"] = {0};
  EXPECT_NE(f.refusal(lt, {f.q(0), f.q(1)}).find("do not select"), std::string::npos);
  EXPECT_NE(f.refusal(test_lora_config(8, 16, {"embed_tokens"}), {}).find("not supported"),
            std::string::npos);
  EXPECT_NE(f.refusal(test_lora_config(8, 16, ".*mlp"), {}).find("not a Linear layer"),
            std::string::npos);
  EXPECT_EQ(f.refusal(lt, {f.q(0)}), "");
}

TEST(LoraFit, FanInFanOutIsIgnoredOnLinearLayersAsPeftDoes) {
  Fit f;
  ojson cfg = test_lora_config(8, 16, {"q_proj"});
  std::vector<TestLoraModule> mods = {f.q(0), f.q(1)};
  write_test_adapter(f.tmp.path + "/a", cfg, mods, 3);
  cfg["fan_in_fan_out"] = true;
  write_test_adapter(f.tmp.path + "/b", cfg, mods, 3);
  HfCheckpoint ck(f.base);
  LoraMerge a(f.tmp.path + "/a", ck.desc(), 1.0, {}), b(f.tmp.path + "/b", ck.desc(), 1.0, {});
  std::vector<float> ra(64 * 64, 0.5f), rb = ra;
  a.add_rows("model.layers.0.self_attn.q_proj.weight", 0, 64, 64, ra.data());
  b.add_rows("model.layers.0.self_attn.q_proj.weight", 0, 64, 64, rb.data());
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, std::vector<float>(64 * 64, 0.5f));
}

// The twin adapter of `vkllm synth` (the e2e cell's) fits its twin and changes it.
TEST(LoraSynth, TwinAdapterFitsItsTwin) {
  TempDir tmp("lorasynth");
  for (const char* preset : {"tiny-qwen3", "tiny-phi4mini"}) {
    SynthLoraOptions o;
    o.preset = preset;
    o.out_dir = tmp.path + "/" + preset;
    o.rank_pattern = {{"down_proj", 4}};
    synth_lora_write(o);
    const SynthPreset& p = find_synth_preset(preset);
    const ModelDesc d =
        parse_hf_config(synth_config_json(p), synth_generation_config_json(p), preset);
    LoraMerge m(o.out_dir, d, 1.0, {});
    EXPECT_EQ(m.deltas().size(), size_t(p.layers) * (d.fused_qkv ? 4 : 7)) << preset;
    for (const auto& delta : m.deltas()) {
      if (delta.module.find("down_proj") != std::string::npos) {
        EXPECT_EQ(delta.r, 4);
      }
    }
    // Same options, same bytes.
    o.out_dir += "-again";
    synth_lora_write(o);
    EXPECT_EQ(testutil::sha256_file_hex(o.out_dir + "/adapter_model.safetensors"),
              testutil::sha256_file_hex(tmp.path + "/" + preset + "/adapter_model.safetensors"));
  }
}

// The e2e adapter cell's generator: an adapter shaped by a checkpoint folder's config.json (a
// twin's here, a real model's in real mode) is the preset's adapter, byte for byte; strength 0
// gives B = 0 (an adapter that changes nothing) with A still random; bad requests fail clearly.
TEST(LoraSynth, AdapterForACheckpointFolderIsThePresetsAdapter) {
  TempDir tmp("lorasynthfor");
  const SynthPreset& p = find_synth_preset("tiny-llama3.2");
  const std::string base = tmp.path + "/base";
  std::filesystem::create_directories(base);
  std::ofstream(base + "/config.json") << synth_config_json(p).dump(2);
  SynthLoraOptions by_preset;
  by_preset.preset = p.name;
  by_preset.out_dir = tmp.path + "/by-preset";
  by_preset.strength = 0.05;
  synth_lora_write(by_preset);
  SynthLoraOptions by_folder = by_preset;
  by_folder.preset.clear();
  by_folder.base_dir = base;
  by_folder.out_dir = tmp.path + "/by-folder";
  synth_lora_write(by_folder);
  EXPECT_EQ(testutil::sha256_file_hex(by_folder.out_dir + "/adapter_model.safetensors"),
            testutil::sha256_file_hex(by_preset.out_dir + "/adapter_model.safetensors"));
  const nlohmann::json cfg = read_json_file(by_folder.out_dir + "/adapter_config.json");
  EXPECT_EQ(cfg["base_model_name_or_path"], base);
  const ModelDesc d = parse_hf_config(synth_config_json(p), nlohmann::json(), "tiny-llama3.2");
  EXPECT_EQ(LoraMerge(by_folder.out_dir, d, 1.0, {}).deltas().size(), size_t(p.layers) * 7);

  by_folder.strength = 0;
  by_folder.out_dir = tmp.path + "/zero";
  synth_lora_write(by_folder);
  const SafetensorsFile st(by_folder.out_dir + "/adapter_model.safetensors");
  size_t b_tensors = 0, a_nonzero = 0;
  for (const auto& [name, t] : st.tensors()) {
    for (float v : t.to_f32()) {
      if (name.find(".lora_B.") != std::string::npos) {
        EXPECT_EQ(v, 0.0f) << name;
      } else {
        a_nonzero += v != 0.0f;
      }
    }
    b_tensors += name.find(".lora_B.") != std::string::npos;
  }
  EXPECT_EQ(b_tensors, size_t(p.layers) * 7);
  EXPECT_GT(a_nonzero, 0u);

  by_folder.base_dir = tmp.path + "/nowhere";
  EXPECT_NE(error_of([&] { synth_lora_write(by_folder); }).find("missing config.json"),
            std::string::npos);
  by_folder.preset = p.name;
  EXPECT_NE(error_of([&] { synth_lora_write(by_folder); }).find("exactly one of a preset"),
            std::string::npos);
}
