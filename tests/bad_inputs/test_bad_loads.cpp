// The bad-input catalogue, inputs that parse but do not load (issue 19, docs/robustness.md):
// what `vkllm run` refuses to load, `vkllm export` refuses to write (nothing left at -o) and
// `vkllm verify` fails (exit 1, the reason on stderr and in --json), with the same message.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "artifact/reader.h"
#include "artifact/writer.h"
#include "catalogue_util.h"

namespace vkllm::catalogue {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kBadTokenizer = R"({"model": {"type": "BPE", "vocab": 5}})";
const char* kBadVocab = "model.vocab must be a non-empty object";

std::vector<std::string> run_cpu(const std::string& model) {
  return {"run", "-m", model, "-p", "Hi", "-n", "1", "--temperature", "0", "--backend", "cpu"};
}

// The tiny checkpoint with one file replaced: export refuses it with `message` (naming the
// output) and leaves nothing; `vkllm run -m <folder>` refuses it too (exit 3, naming the file).
void expect_folder_refused(const std::string& file, const std::string& text,
                           const std::string& message) {
  TempDir d, out;
  const std::string ck = tiny_checkpoint(d / "ck");
  write_file(ck + "/" + file, text);
  const RunResult e =
      run_vkllm({"export", ck, "--recipe", "quantized-8da4w", "-o", out / "m.vkllm", "-q"});
  EXPECT_EQ(check_refusal(e, 1, out / "m.vkllm: " + message), "");
  EXPECT_EQ(check_no_output(out.path, "m.vkllm"), "");
  EXPECT_EQ(check_refusal(run_vkllm(run_cpu(ck)), 3, ck + "/tokenizer.json: " + message), "");
}

// The issue's case: valid JSON, not a tokenizer.
TEST(BadInputs, ExportTokenizerThatDoesNotLoad) {
  expect_folder_refused("tokenizer.json", kBadTokenizer, kBadVocab);
}

TEST(BadInputs, ExportTokenizerConfigNamesNoToken) {
  expect_folder_refused("tokenizer_config.json", R"({"eos_token": "<nope>"})",
                        "tokenizer_config.json eos_token \"<nope>\" is not a token");
}

// The shared artifact rewritten with its embedded files edited (hashes right: a damaged export,
// not a damaged file), written without the writer's load check.
std::string with_files(const TempDir& d,
                       const std::function<void(std::vector<EmbeddedFile>&)>& edit) {
  ArtifactReader r(fixtures().artifact);
  ArtifactContent c;
  c.desc = r.desc();
  c.recipe = r.recipe();
  c.program = r.program();
  for (const std::string& n : r.file_names()) c.files.push_back({n, std::string(r.file(n))});
  edit(c.files);
  std::vector<std::vector<uint8_t>> w(c.program.tensors.size());
  for (size_t i = 0; i < w.size(); ++i)
    if (c.program.tensors[i].kind == TensorKind::Weight) {
      const auto s = r.weight(r.program(), static_cast<int32_t>(i));
      w[i].assign(s.begin(), s.end());
    }
  write_artifact(d / "m.vkllm", c, w, LoadCheck::None);
  return d / "m.vkllm";
}

// verify fails with the reason (text and --json); run refuses to load it with the same message.
void expect_artifact_refused(const std::string& a, const std::string& message) {
  EXPECT_EQ(check_refusal(run_vkllm({"verify", a}), 1,
                          a + ": the runtime refuses to load it: " + message),
            "");
  const RunResult j = run_vkllm({"verify", a, "--json"});
  EXPECT_EQ(j.exit_code, 1);
  const json rep = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(rep.is_object()) << j.out;
  EXPECT_FALSE(rep["ok"].get<bool>());
  EXPECT_FALSE(rep["loads"].get<bool>());
  EXPECT_EQ(rep["load_error"], message);
  EXPECT_EQ(rep["reasons"], json::array({"the runtime refuses to load it: " + message}));
  EXPECT_EQ(check_refusal(run_vkllm(run_cpu(a)), 3, a + ": " + message), "");
}

void set_file(std::vector<EmbeddedFile>& files, const std::string& name, const std::string& text) {
  for (auto& f : files)
    if (f.name == name) f.text = text;
}

TEST(BadInputs, VerifyTokenizerThatDoesNotLoad) {
  TempDir d;
  expect_artifact_refused(
      with_files(d, [](auto& f) { set_file(f, "tokenizer.json", kBadTokenizer); }), kBadVocab);
}

TEST(BadInputs, VerifyNoEmbeddedTokenizer) {
  TempDir d;
  expect_artifact_refused(with_files(d,
                                     [](auto& f) {
                                       std::erase_if(f, [](const EmbeddedFile& e) {
                                         return e.name == "tokenizer.json";
                                       });
                                     }),
                          "the artifact embeds no tokenizer");
}

TEST(BadInputs, VerifyEmbeddedConfigNotJson) {
  TempDir d;
  expect_artifact_refused(
      with_files(d, [](auto& f) { set_file(f, "generation_config.json", "{\"eos_token_id\": "); }),
      "the embedded generation_config.json is not valid JSON");
}

}  // namespace
}  // namespace vkllm::catalogue
