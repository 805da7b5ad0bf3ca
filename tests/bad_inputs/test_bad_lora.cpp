// The bad-input catalogue, `vkllm export --lora` (docs/lora.md): adapters that cannot be merged,
// or do not fit the base, are refused with one line and nothing at -o.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "catalogue_util.h"
#include "export/lora_fixture.h"

namespace vkllm::catalogue {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// An adapter on q_proj and v_proj of both layers of the small Llama checkpoint (hidden 64, q 64,
// kv 32 rows), with `edit` applied to its config and `in` as the adapter's input width.
std::string adapter(const TempDir& d, const std::function<void(ojson&)>& edit = {},
                    int64_t in = 64) {
  ojson cfg = testing::test_lora_config(4, 8, {"q_proj", "v_proj"});
  if (edit) edit(cfg);
  std::vector<testing::TestLoraModule> mods;
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"q_proj", "v_proj"}) {
      testing::TestLoraModule m;
      m.module = "model.layers." + std::to_string(l) + ".self_attn." + n;
      m.out = std::string(n) == "q_proj" ? 64 : 32;
      m.in = in;
      m.r = 4;
      mods.push_back(m);
    }
  testing::write_test_adapter(d / "adapter", cfg, mods, 5);
  return d / "adapter";
}

void expect_lora_refused(const TempDir& d, const std::string& lora, const std::string& message,
                         std::vector<std::string> extra = {}) {
  TempDir out;
  std::vector<std::string> args = {"export",   tiny_checkpoint(d / "ck"), "--lora", lora,
                                   "--recipe", "quantized-8da4w",         "-o",     out / "m.vkllm",
                                   "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  const RunResult r = run_vkllm(args);
  EXPECT_EQ(check_refusal(r, 1, message), "");
  EXPECT_EQ(check_no_output(out.path, "m.vkllm"), "");
}

}  // namespace

TEST(BadLora, PeftTypeOtherThanLora) {
  TempDir d;
  expect_lora_refused(d, adapter(d, [](ojson& c) { c["peft_type"] = "IA3"; }),
                      "peft_type IA3 is not LORA");
}

TEST(BadLora, Dora) {
  TempDir d;
  expect_lora_refused(d, adapter(d, [](ojson& c) { c["use_dora"] = true; }), "use_dora: DoRA");
}

TEST(BadLora, ModulesToSave) {
  TempDir d;
  expect_lora_refused(
      d, adapter(d, [](ojson& c) { c["modules_to_save"] = ojson::array({"lm_head"}); }),
      "modules_to_save [\"lm_head\"]");
}

TEST(BadLora, TrainedBiases) {
  TempDir d;
  expect_lora_refused(d, adapter(d, [](ojson& c) { c["bias"] = "lora_only"; }),
                      "bias \"lora_only\"");
}

TEST(BadLora, TargetModuleTheBaseLacks) {
  TempDir d;
  expect_lora_refused(d,
                      adapter(d,
                              [](ojson& c) {
                                c["target_modules"] = {"q_proj", "v_proj", "c_attn"};
                              }),
                      "target module 'c_attn' is not a module of the base");
}

TEST(BadLora, ShapesOfAnotherModel) {
  TempDir d;
  expect_lora_refused(d, adapter(d, {}, 128), "so expected lora_A [4, 64] and lora_B [64, 4]");
}

TEST(BadLora, PickleAdapter) {
  TempDir d;
  const std::string a = adapter(d);
  fs::rename(a + "/adapter_model.safetensors", a + "/adapter_model.bin");
  expect_lora_refused(d, a, "only a pickle adapter (adapter_model.bin) is present");
}

TEST(BadLora, TruncatedAdapterWeights) {
  TempDir d;
  const std::string a = adapter(d);
  const std::string b = read_file(a + "/adapter_model.safetensors");
  write_file(a + "/adapter_model.safetensors", b.substr(0, b.size() - 10));
  expect_lora_refused(d, a, "adapter_model.safetensors");
}

TEST(BadLora, ConfigNotJson) {
  TempDir d;
  const std::string a = adapter(d);
  write_file(a + "/adapter_config.json", "{\"peft_type\": \"LORA\",");
  expect_lora_refused(d, a, "adapter_config.json: not valid JSON");
}

TEST(BadLora, NotAFolder) {
  TempDir d;
  expect_lora_refused(d, d / "missing", "not a directory (expected a LoRA adapter folder");
}

TEST(BadLora, ScaleNotFinite) {
  TempDir d;
  expect_lora_refused(d, adapter(d), "--lora-scale must be a finite number",
                      {"--lora-scale", "inf"});
}

TEST(BadLora, NoBaseAndTheAdapterNamesNone) {
  TempDir d, out;
  const std::string a = adapter(d, [](ojson& c) { c.erase("base_model_name_or_path"); });
  const RunResult r = run_vkllm(
      {"export", "--lora", a, "--recipe", "quantized-8da4w", "-o", out / "m.vkllm", "-q"});
  EXPECT_EQ(check_refusal(r, 1, "no base_model_name_or_path, so the base must be given"), "");
  EXPECT_EQ(check_no_output(out.path, "m.vkllm"), "");
}

}  // namespace vkllm::catalogue
