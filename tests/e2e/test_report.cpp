// report.html in a real browser (Debian's chromium, headless): the page's script must render one
// row per cell from the embedded data, with hostile text shown as text; and results.tsv's shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "browser.h"
#include "core/mapped_file.h"
#include "e2e/matrix.h"

using namespace vkllm;
using namespace vkllm::test;
namespace fs = std::filesystem;

namespace {

MatrixResult sample_result() {
  MatrixResult r;
  r.twins = true;
  r.max_new_tokens = 50;
  r.started_at = "2025-01-01T00:00:00Z";
  r.command = "vkllm e2e --twins";
  r.host = "test-host";
  r.seconds = 123.4;
  for (const Cell& c : read_cells(std::string(VKLLM_SOURCE_DIR) + "/e2e/cells.tsv")) {
    CellResult cr;
    cr.cell = c;
    cr.pass = c.id != 5;
    cr.stage = cr.pass ? "quality" : "cpu";
    cr.reason = cr.pass ? "golden 32/32; Vulkan = CPU (50 tokens)"
                        : "cpu: Vulkan tokens differ from the CPU backend's at step 3: 1 vs 2";
    cr.artifact_bytes = 30000000 + static_cast<uint64_t>(c.id);
    cr.prefill_tok_s = 100.5;
    cr.decode_tok_s = 12.25;
    cr.peak_host_mb = 300;
    cr.peak_gpu_mb = 120;
    cr.device = "llvmpipe (test)";
    cr.answer = c.id == 3 ? "</script><b>bold</b> & \"quoted\" \xc3\xa9" : "some text";
    for (const auto& n : stage_names()) {
      StageResult s{n};
      s.ran = cr.pass || n != "quality";
      s.ok = s.ran && (cr.pass || n != "cpu");
      s.seconds = 1.5;
      s.status = "exit 0";
      s.note = n + " note";
      s.logs = {"logs/cell" + std::to_string(c.id) + "/" + n + ".stdout"};
      cr.stages.push_back(s);
    }
    r.cells.push_back(cr);
  }
  return r;
}

std::string out_dir() {
  const fs::path d = fs::temp_directory_path() / ("vkllm-report-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

}  // namespace

TEST(Report, EightRowsRenderInChromium) {
  const MatrixResult r = sample_result();
  const std::string dir = out_dir();
  write_report_html(r, dir + "/report.html");
  const std::string html = read_text_file(dir + "/report.html");
  // Self-contained: no URL to fetch, no external script, style or image.
  EXPECT_EQ(count_of(html, "://"), 0u);
  EXPECT_EQ(count_of(html, " src="), 0u);
  // Before scripts run there are no rows: only the browser's rendering creates them.
  EXPECT_EQ(count_of(html, "class=\"cell-row"), 0u);

  const std::string dom = chromium_dom(dir + "/report.html");
  ASSERT_FALSE(dom.empty());
  EXPECT_EQ(count_of(dom, "<tr class=\"cell-row "), 8u) << dom.substr(0, 2000);
  EXPECT_EQ(count_of(dom, "<tr class=\"cell-row pass\""), 7u);
  EXPECT_EQ(count_of(dom, "<tr class=\"cell-row fail\""), 1u);
  for (int i = 1; i <= 8; ++i)
    EXPECT_EQ(count_of(dom, "data-cell=\"" + std::to_string(i) + "\""), 1u) << i;
  EXPECT_NE(dom.find("7 / 8 passed"), std::string::npos);
  // The adapter cell's row names its adapter, and only that row.
  EXPECT_EQ(count_of(dom, "+ LoRA vkllm-e2e/Llama-3.2-1B-Instruct-lora"), 1u);
  EXPECT_NE(dom.find("unsloth/Llama-3.2-1B-Instruct"), std::string::npos);
  EXPECT_NE(dom.find("quantized-8da4w-fp16-embedding"), std::string::npos);
  EXPECT_NE(dom.find("Vulkan tokens differ from the CPU backend"), std::string::npos);
  EXPECT_NE(dom.find("28.6 MiB"), std::string::npos);  // 30,000,001 bytes
  // The hostile answer is text in the page, never markup.
  EXPECT_NE(dom.find("&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; \"quoted\" \xc3\xa9"),
            std::string::npos);
  EXPECT_EQ(dom.find("<b>bold</b>"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Report, ResultsTsvHasOneLinePerCellAndAllColumns) {
  MatrixResult r = sample_result();
  r.cells[0].reason = "tab\there and\nnewline";
  const std::string dir = out_dir();
  write_results_tsv(r, dir + "/results.tsv");
  std::istringstream in(read_text_file(dir + "/results.tsv"));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, '\t');) f.push_back(x);
    rows.push_back(f);
  }
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[0], results_columns());
  for (const char* c :
       {"cell", "model", "recipe", "stage", "result", "reason", "artifact_bytes", "prefill_tok_s",
        "decode_tok_s", "peak_host_mb", "peak_gpu_mb", "pull_s", "export_s", "verify_s", "run_s"})
    EXPECT_NE(std::find(rows[0].begin(), rows[0].end(), c), rows[0].end()) << c;
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(rows[i].size(), rows[0].size()) << i;
  EXPECT_EQ(rows[1][5], "PASS");
  EXPECT_EQ(rows[1][6], "tab here and newline");
  EXPECT_EQ(rows[5][5], "FAIL");
  EXPECT_EQ(rows[5][4], "cpu");
  EXPECT_EQ(rows[7][1], "microsoft/Phi-4-mini-instruct");
  const size_t lora_col = std::find(rows[0].begin(), rows[0].end(), "lora") - rows[0].begin();
  ASSERT_LT(lora_col, rows[0].size());
  EXPECT_EQ(rows[7][lora_col], "-");
  EXPECT_EQ(rows[8][lora_col], "vkllm-e2e/Llama-3.2-1B-Instruct-lora");
  fs::remove_all(dir);
}
