// e2e/cells.tsv against docs/design.md section 1 (typed in here from the design, not read from our
// code) plus the adapter cell, e2e/cells-families.tsv against the checkpoints' chat templates, the
// parser on bad input, the cell selection and the answer gate's word match.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "e2e/cells.h"
#include "e2e/matrix.h"
#include "template/template.h"

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

std::string cells_path() {
  return std::string(VKLLM_SOURCE_DIR) + "/e2e/cells.tsv";
}

std::string write_cells(const std::string& body) {
  static int n = 0;
  const fs::path dir = fs::temp_directory_path() /
                       ("vkllm-cells-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::create_directories(dir / "prompts");
  std::ofstream(dir / "prompts" / "p.txt") << "hi";
  std::ofstream(dir / "cells.tsv") << body;
  return (dir / "cells.tsv").string();
}

const std::string kHeader =
    "cell\tmodel\trevision\trecipe\tprompt_file\texpected\tmax_size\ttwin\tlora\n";
const std::string kGood =
    "1\tQwen/Qwen3-0.6B\tc1899de289a04d12100db370d81485cdf75e47ca\tquantized-8da4w\tprompts/"
    "p.txt\tParis\t-\ttiny-qwen3\t-\n";

std::string error_of(const std::string& body) {
  try {
    read_cells(write_cells(body));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Cells, TheCommittedTableIsDesignSection2) {
  const auto cells = read_cells(cells_path());
  struct Want {
    int id;
    const char *model, *recipe, *prompt, *max_size;
  };
  const Want want[] = {
      {1, "Qwen/Qwen3-0.6B", "quantized-8da4w-fp16-embedding", "qwen3", "-"},
      {2, "unsloth/Llama-3.2-1B-Instruct", "quantized-8da4w", "llama3.2", "-"},
      {3, "unsloth/Llama-3.2-1B-Instruct", "quantized-8da4w-fp16", "llama3.2", "-"},
      {4, "unsloth/Llama-3.2-1B-Instruct", "quantized-8da4w-embedding", "llama3.2", "770MiB"},
      {5, "unsloth/Llama-3.2-1B-Instruct", "quantized-8da4w-fp16-embedding", "llama3.2", "770MiB"},
      {6, "unsloth/Llama-3.2-1B-Instruct", "quantized-int4-weight-only", "llama3.2", "-"},
      {7, "microsoft/Phi-4-mini-instruct", "quantized-8da4w-embedding", "phi4mini", "-"},
  };
  // Seven design cells, then the adapter cell: cell 4 with a LoRA adapter (docs/lora.md).
  ASSERT_EQ(cells.size(), 8u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(cells[i].id, want[i].id);
    EXPECT_EQ(cells[i].model, want[i].model);
    EXPECT_EQ(cells[i].recipe, want[i].recipe);
    EXPECT_EQ(cells[i].prompt_file, std::string("prompts/") + want[i].prompt + ".txt");
    EXPECT_EQ(cells[i].max_size, want[i].max_size);
    EXPECT_EQ(cells[i].expected, "Paris");
    EXPECT_EQ(cells[i].revision.size(), 40u);
    EXPECT_EQ(cells[i].lora, "");
  }
  EXPECT_EQ(cells[3].max_size_bytes, 770ull << 20);
  const Cell& a = cells[7];
  EXPECT_EQ(a.id, 8);
  EXPECT_EQ(a.lora, "vkllm-e2e/Llama-3.2-1B-Instruct-lora");
  for (auto same : {&Cell::model, &Cell::revision, &Cell::recipe, &Cell::prompt_file,
                    &Cell::expected, &Cell::max_size, &Cell::twin})
    EXPECT_EQ(a.*same, cells[3].*same);
  // The chat formats of docs/design.md section 1, byte for byte.
  const std::string q = "What is the capital of France?";
  EXPECT_EQ(read_text_file(cells[0].prompt_path),
            "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(read_text_file(cells[1].prompt_path),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + q +
                "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(read_text_file(cells[6].prompt_path), "<|user|>" + q + "<|end|><|assistant|>");
}

// e2e/cells-families.tsv: a cell for each family added since the design, under the real model id
// at a pinned commit of its Hugging Face repository, each prompt what the checkpoint's own chat
// template (tests/template/templates, rendered by src/template as transformers renders it)
// writes for one user turn with the generation prompt.
TEST(Cells, TheFamilyCellsAreTheCheckpointsChatTemplates) {
  const auto cells = read_cells(std::string(VKLLM_SOURCE_DIR) + "/e2e/cells-families.tsv");
  struct Want {
    int id;
    const char *model, *revision, *recipe, *twin, *prompt, *jinja;
  };
  const Want want[] = {
      {9, "Qwen/Qwen2.5-0.5B-Instruct", "7ae557604adf67be50417f59c2c2f167def9a775",
       "quantized-8da4w", "tiny-qwen2.5", "qwen2.5", "qwen2.5-instruct"},
      {10, "google/gemma-3-1b-it", "dcc83ea841ab6100d6b47a070329e1ba4cf78752",
       "quantized-8da4w-fp16-embedding", "tiny-gemma3", "gemma3", "gemma3"},
      {11, "HuggingFaceTB/SmolLM3-3B", "a07cc9a04f16550a088caea529712d1d335b0ac1",
       "quantized-8da4w-embedding", "tiny-smollm3", "smollm3", "smollm3"},
  };
  ASSERT_EQ(cells.size(), 3u);
  // SmolLM3's template writes the date it renders on (strftime_now): the prompt's, 7 December 2026.
  std::tm day{};
  day.tm_year = 2026 - 1900;
  day.tm_mon = 11;
  day.tm_mday = 7;
  day.tm_hour = 12;
  tmpl::Limits limits;
  limits.now = timegm(&day);
  for (size_t i = 0; i < 3; ++i) {
    const Cell& c = cells[i];
    SCOPED_TRACE(c.model);
    EXPECT_EQ(c.id, want[i].id);
    EXPECT_EQ(c.model, want[i].model);
    EXPECT_EQ(c.revision, want[i].revision);
    EXPECT_EQ(c.recipe, want[i].recipe);
    EXPECT_EQ(c.twin, want[i].twin);
    EXPECT_EQ(c.prompt_file, std::string("prompts/") + want[i].prompt + ".txt");
    EXPECT_EQ(c.expected, "Paris");
    EXPECT_EQ(c.max_size, "-");
    EXPECT_EQ(c.lora, "");
    const auto t = tmpl::Template::parse(read_text_file(
        std::string(VKLLM_SOURCE_DIR) + "/tests/template/templates/" + want[i].jinja + ".jinja"));
    nlohmann::ordered_json ctx = {
        {"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
        {"add_generation_prompt", true},
        {"bos_token", "<bos>"}};
    // SmolLM3 without reasoning (its template's enable_thinking=false, "/no_think"), so the answer
    // comes within the run stage's 50 tokens instead of after a think block.
    if (c.twin == "tiny-smollm3") ctx["enable_thinking"] = false;
    EXPECT_EQ(read_text_file(c.prompt_path), t.render(ctx, limits));
  }
  EXPECT_EQ(
      read_text_file(cells[0].prompt_path)
          .rfind("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                 "assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?",
                 0),
      0u);
  EXPECT_NE(read_text_file(cells[2].prompt_path).find("Today Date: 07 December 2026\n"),
            std::string::npos);
}

TEST(Cells, BadTablesFailWithFileLineAndReason) {
  EXPECT_EQ(read_cells(write_cells(kHeader + kGood)).size(), 1u);
  struct Case {
    std::string body, needle;
  };
  const std::string rev = "c1899de289a04d12100db370d81485cdf75e47ca";
  const Case cases[] = {
      {"", "no header"},
      {"cell\tmodel\n" + kGood, "header"},
      {kHeader, "no cells"},
      {kHeader + "1\tQwen/Qwen3-0.6B\n", ":2: 2 tab-separated fields, expected 9"},
      {kHeader + kGood + kGood, ":3: cell number 1 is repeated"},
      {kHeader + "x" + kGood.substr(1), "not a cell number"},
      {kHeader + "1\tQwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-qwen3\t-\n",
       "not a Hugging Face model id"},
      {kHeader +
           "1\tQwen/Qwen3-0.6B\tmain\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-qwen3\t-\n",
       "not a pinned 40-hex"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev + "\tint3\tprompts/p.txt\tParis\t-\ttiny-qwen3\t-\n",
       "unknown recipe 'int3'"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\t../p.txt\tParis\t-\ttiny-qwen3\t-\n",
       "relative path inside"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\t/etc/passwd\tParis\t-\ttiny-qwen3\t-\n",
       "relative path inside"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/none.txt\tParis\t-\ttiny-qwen3\t-\n",
       "does not exist"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tthe city\t-\ttiny-qwen3\t-\n",
       "must be one word"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t7 elephants\ttiny-qwen3\t-\n",
       "max_size"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-phi4mini\t-\n",
       "mirrors microsoft/Phi-4-mini-instruct"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\tqwen3-0.6b\t-\n",
       "not a tiny twin"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-qwen3\tmy-adapter\n",
       ":2: lora: "},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-qwen3\tme/ad@v1\n",
       "give the id alone"},
      {kHeader + "1\tQwen/Qwen3-0.6B\t" + rev +
           "\tquantized-8da4w\tprompts/p.txt\tParis\t-\ttiny-qwen3\tQwen/Qwen3-0.6B\n",
       "must differ from the model's"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.body);
    EXPECT_NE(e.find(c.needle), std::string::npos) << "error: " << e << "\nwanted: " << c.needle;
    EXPECT_NE(e.find("cells.tsv"), std::string::npos) << e;
  }
}

TEST(Cells, Selection) {
  const auto cells = read_cells(cells_path());
  auto ids = [](const std::vector<Cell>& v) {
    std::vector<int> o;
    for (auto& c : v) o.push_back(c.id);
    return o;
  };
  EXPECT_EQ(ids(select_cells(cells, "")), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ids(select_cells(cells, "all")), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ids(select_cells(cells, "7,1,3-4")), (std::vector<int>{1, 3, 4, 7}));
  EXPECT_THROW(select_cells(cells, "9"), Error);
  EXPECT_THROW(select_cells(cells, "3-1"), Error);
  EXPECT_THROW(select_cells(cells, "a"), Error);
  EXPECT_THROW(select_cells(cells, "1,,2"), Error);
}

TEST(Cells, AnswerGateIsLiteralCaseInsensitiveWholeWord) {
  EXPECT_TRUE(contains_word("The capital of France is Paris.", "Paris"));
  EXPECT_TRUE(contains_word("PARIS", "Paris"));
  EXPECT_TRUE(contains_word("paris", "Paris"));
  EXPECT_TRUE(contains_word("(Paris)", "Paris"));
  EXPECT_TRUE(contains_word("Paris's museums", "Paris"));
  EXPECT_TRUE(contains_word("**Paris**\n", "Paris"));
  EXPECT_FALSE(contains_word("Parisian", "Paris"));
  EXPECT_FALSE(contains_word("Comparison", "Paris"));
  EXPECT_FALSE(contains_word("Paris_", "Paris"));
  EXPECT_FALSE(contains_word("Parisé", "Paris"));
  EXPECT_FALSE(contains_word("P aris", "Paris"));
  EXPECT_FALSE(contains_word("", "Paris"));
}

// The golden stage's pin check (src/e2e/matrix.h): the pulled twin must hold model.safetensors
// with the golden's sha256; a snapshot without the file fails as one with another hash does.
TEST(GoldenPin, TheSnapshotMustHoldThePinnedFile) {
  const nlohmann::json golden = {{"files_sha256", {{"model.safetensors", "abc"}}}};
  const nlohmann::json good = nlohmann::json::array(
      {{{"name", "config.json"}, {"etag", "x"}}, {{"name", "model.safetensors"}, {"etag", "abc"}}});
  EXPECT_EQ(vkllm::golden_pin_mismatch(golden, good), "");
  const nlohmann::json other =
      nlohmann::json::array({{{"name", "model.safetensors"}, {"etag", "abd"}}});
  EXPECT_NE(vkllm::golden_pin_mismatch(golden, other).find("(sha256 abd) is not the one"),
            std::string::npos);
  const nlohmann::json missing = nlohmann::json::array({{{"name", "config.json"}, {"etag", "x"}}});
  EXPECT_EQ(vkllm::golden_pin_mismatch(golden, missing),
            "the pulled snapshot has no model.safetensors, whose sha256 the golden pins");
  EXPECT_EQ(vkllm::golden_pin_mismatch(golden, nlohmann::json::array()),
            "the pulled snapshot has no model.safetensors, whose sha256 the golden pins");
  EXPECT_EQ(vkllm::golden_pin_mismatch(nlohmann::json::object(), good),
            "the golden pins no sha256 of model.safetensors");
  EXPECT_EQ(vkllm::golden_pin_mismatch({{"files_sha256", "abc"}}, good),
            "the golden pins no sha256 of model.safetensors");
  EXPECT_EQ(vkllm::golden_pin_mismatch(golden, nlohmann::json::array({42, {{"name", 7}}})),
            "the pulled snapshot has no model.safetensors, whose sha256 the golden pins");
}
