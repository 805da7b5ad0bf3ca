// The CPU reference engine against Hugging Face transformers (fp32) on the tiny twins of every
// family. Goldens: tests/goldens/<twin>.json + .logits.f32, written on the GPU machine by
// tools/goldens/make_goldens.py (see docs/synth.md). The twin is regenerated here with
// `vkllm synth` and must be byte-identical to the one the goldens were computed from.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "hf/synth.h"
#include "runtime/reference.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"
#include "tokenizer/tokenizer.h"

using namespace vkllm;
using nlohmann::json;

namespace {

std::string golden_dir() {
  return std::string(VKLLM_SOURCE_DIR) + "/tests/goldens";
}

using testutil::nmse;

class GoldenTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GoldenTest, CpuReferenceEqualsTransformers) {
  const std::string twin = GetParam();
  const json g = json::parse(read_text_file(golden_dir() + "/" + twin + ".json"));
  const std::string dir = testutil::temp_dir("golden") + "/" + twin;
  SynthOptions so;
  so.preset = twin;
  so.out_dir = dir;
  synth_write(so);
  // The twin is the one transformers saw, byte for byte.
  ASSERT_TRUE(g.contains("files_sha256"));
  for (auto& [file, sha] : g["files_sha256"].items()) {
    if (file.find("tokenizer") != std::string::npos)
      continue;  // fixtures are checked by the tokenizer suite
    EXPECT_EQ(testutil::sha256_file_hex(dir + "/" + file), sha.get<std::string>()) << file;
  }
  HfCheckpoint ckpt(dir);
  // Our tokenizer renders the same prompt ids as the reference tokenizer.
  Tokenizer tok = Tokenizer::from_files(ckpt.tokenizer_json_path(), ckpt.tokenizer_config_path());
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok.encode(g["prompt_text"].get<std::string>(), g["add_special_tokens"].get<bool>()),
            prompt);

  const auto cont = g["continuation_ids"].get<std::vector<int32_t>>();
  const auto positions = g["logits_positions"].get<std::vector<int>>();
  const int64_t V = g["vocab_size"].get<int64_t>();
  MappedFile lf(golden_dir() + "/" + g["logits_file"].get<std::string>());
  ASSERT_EQ(lf.size(), positions.size() * static_cast<size_t>(V) * 4);
  const float* golden_logits = reinterpret_cast<const float*>(lf.data());

  auto model = load_reference_model(ckpt, 256);
  auto ex = model->make_executor();
  std::vector<float> logits(static_cast<size_t>(V));
  const int P = static_cast<int>(prompt.size());
  std::vector<int32_t> got;
  int32_t next = ex->forward(prompt.data(), P, 0, logits.data());
  for (size_t step = 0; step < cont.size(); ++step) {
    const int pos_of_logits = P - 1 + static_cast<int>(step);
    for (size_t k = 0; k < positions.size(); ++k)
      if (positions[k] == pos_of_logits) {
        double e = nmse(golden_logits + k * V, logits.data(), static_cast<size_t>(V));
        std::printf("%s: logits NMSE at position %d: %.3e\n", twin.c_str(), pos_of_logits, e);
        EXPECT_LE(e, 1e-6) << "position " << pos_of_logits;
      }
    got.push_back(next);
    // Teacher forcing with the golden id keeps later positions comparable even after a mismatch.
    next = ex->forward(&cont[step], 1, P + static_cast<int>(step), logits.data());
  }
  EXPECT_EQ(got, cont);
}

INSTANTIATE_TEST_SUITE_P(Twins, GoldenTest,
                         ::testing::Values("tiny-qwen3", "tiny-llama3.2", "tiny-phi4mini",
                                           "tiny-qwen2.5", "tiny-mistral", "tiny-smollm3",
                                           "tiny-gemma3"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });
