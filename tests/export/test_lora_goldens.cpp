// The merged, non-quantized artifact on the CPU reference against Hugging Face peft's
// merge_and_unload() (fp32) on the tiny twins. Goldens: tests/goldens/lora/ (manifest.json, one
// adapter folder + <case>.json + <case>.logits.f32 per case), written on the GPU machine by
// tools/goldens/make_lora_goldens.py (docs/lora.md). This test is registered only when
// tests/goldens/lora/manifest.json exists (tests/export/CMakeLists.txt).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "artifact/reader.h"
#include "backend/executor.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "export/lora.h"
#include "hf/synth.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using nlohmann::json;

namespace {

std::string golden_dir() {
  return std::string(VKLLM_SOURCE_DIR) + "/tests/goldens/lora";
}

using testutil::nmse;

std::vector<json> cases() {
  const json m = json::parse(read_text_file(golden_dir() + "/manifest.json"));
  return m.at("cases").get<std::vector<json>>();
}

class LoraGoldenTest : public ::testing::TestWithParam<json> {};

}  // namespace

TEST(LoraGoldens, CoverEveryTwin) {
  std::set<std::string> twins;
  for (const json& c : cases()) twins.insert(c.at("twin").get<std::string>());
  EXPECT_EQ(twins, (std::set<std::string>{"tiny-qwen3", "tiny-llama3.2", "tiny-phi4mini"}));
}

TEST_P(LoraGoldenTest, MergedArtifactEqualsPeftMergeAndUnload) {
  const json& c = GetParam();
  const json g =
      json::parse(read_text_file(golden_dir() + "/" + c.at("golden").get<std::string>()));
  const std::string twin = g.at("twin");
  const std::string tmp = testutil::temp_dir("lora-golden");
  const std::string dir = tmp + "/" + twin;
  SynthOptions so;
  so.preset = twin;
  so.out_dir = dir;
  synth_write(so);
  // The twin and the adapter are the ones peft saw, byte for byte.
  for (auto& [file, sha] : g.at("files_sha256").items()) {
    if (file.find("tokenizer") != std::string::npos) continue;
    EXPECT_EQ(testutil::sha256_file_hex(dir + "/" + file), sha.get<std::string>()) << file;
  }
  const std::string adapter = golden_dir() + "/" + g.at("adapter_dir").get<std::string>();
  for (auto& [file, sha] : g.at("adapter_sha256").items())
    EXPECT_EQ(testutil::sha256_file_hex(adapter + "/" + file), sha.get<std::string>()) << file;

  LoraSource src;
  src.dir = adapter;
  src.prov.source = adapter;
  auto merge = open_lora_merge(src, dir, g.at("lora_scale").get<double>());
  EXPECT_EQ(merge->deltas().size(), g.at("lora_modules").size());
  RecipeOptions ro;
  ro.recipe = "non-quantized";
  ro.max_context = 128;
  export_checkpoint(dir, tmp + "/m.vkllm", ro, {}, int64_t(8) << 20, merge.get());
  ArtifactReader art(tmp + "/m.vkllm");
  auto ex = make_cpu_executor(art.program(), art);

  const auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  const auto cont = g.at("continuation_ids").get<std::vector<int32_t>>();
  const auto positions = g.at("logits_positions").get<std::vector<int>>();
  const int64_t V = g.at("vocab_size").get<int64_t>();
  MappedFile lf(golden_dir() + "/" + g.at("logits_file").get<std::string>());
  ASSERT_EQ(lf.size(), positions.size() * static_cast<size_t>(V) * 4);
  const float* golden = reinterpret_cast<const float*>(lf.data());

  std::vector<float> logits(static_cast<size_t>(V));
  const int P = static_cast<int>(prompt.size());
  std::vector<int32_t> got;
  int32_t next = ex->forward(prompt.data(), P, 0, logits.data());
  for (size_t step = 0; step < cont.size(); ++step) {
    const int pos = P - 1 + static_cast<int>(step);
    for (size_t k = 0; k < positions.size(); ++k)
      if (positions[k] == pos) {
        const double e = nmse(golden + k * V, logits.data(), static_cast<size_t>(V));
        std::printf("%s: logits NMSE vs peft at position %d: %.3e\n", twin.c_str(), pos, e);
        EXPECT_LE(e, 1e-6) << "position " << pos;
      }
    got.push_back(next);
    next =
        ex->forward(&cont[step], 1, P + static_cast<int>(step), logits.data());  // teacher forcing
  }
  EXPECT_EQ(got, cont);
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraGoldenTest, ::testing::ValuesIn(cases()), [](const auto& p) {
  std::string s = p.param.at("case").template get<std::string>();
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});
