// The end-to-end matrix (`vkllm e2e`): for each cell of e2e/cells.tsv, in sequence, the stages
// pull -> export -> verify -> run (Vulkan, greedy) and their gates, each stage a child process of
// this same binary with its own stdout/stderr logs; the artifact is deleted after each cell.
//
// Real mode gates on the answer (docs/design.md section 1). Twin mode (--twins) serves each cell's
// tiny twin under the cell's model id and pinned revision from the loopback test hub, and gates on
// independent references: the fp32 twin's greedy ids == the transformers golden (on the CPU and,
// as a non-quantized artifact, on Vulkan), Vulkan's greedy decoding of the cell's artifact judged
// by the CPU reference's logits (`verify --agree`, docs/gates.md), and the recipe's quality gate
// against the fp32 twin.
// An adapter cell (a `lora` id in the table) first generates a LoRA adapter for the pulled base and
// publishes it on a loopback hub of its own (stage lora, both modes); its exports pull it with
// `--lora <id>`, verify must print it, and in twin mode its golden and quality reference are the
// merged fp32 model.
// Gates per stage: e2e/README.md.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/cells.h"

namespace vkllm {

struct MatrixOptions {
  std::string cells_file;  // e2e/cells.tsv
  std::string cells;       // selection: "1,3-5"; empty: all
  std::string out_dir;     // results.tsv, results.json, report.html, logs/
  bool twins = false;
  // tests/hub/fake_hub.py and tests/goldens/ live here: needed by twin mode and, in both modes,
  // by the adapter cells' hub.
  std::string repo_root;
  std::string goldens_dir;  // twin mode: default <repo_root>/tests/goldens
  std::string exe;          // the vkllm binary the stages run (default: this process's)
  std::string device;       // passed to `run --device`
  std::string command;      // the command line, recorded in the results
  int max_new_tokens = 50;
  int golden_tokens = 32;  // twin mode: ids compared with the transformers golden
  // The adapter cells' generated LoRA: delta RMS relative to 1/sqrt(fan_in) (`vkllm synth
  // --lora-strength`); 0 makes B zero, an adapter that changes nothing (the golden stage fails).
  double lora_strength = 0.05;
  double stage_timeout_s = 3600;  // per child process
  bool keep_artifacts = false;
  // Progress lines (stderr by the CLI); may be empty.
  std::function<void(const std::string&)> progress;
};

// The stages in the order they run; seconds are reported per stage in results.tsv.
const std::vector<std::string>& stage_names();

struct StageResult {
  std::string name;
  bool ran = false, ok = false;
  double seconds = 0;
  std::string status;             // "exit 0", "killed by signal 11 (...)", "timed out after ..."
  std::string note;               // what the stage measured or why it failed
  std::vector<std::string> logs;  // paths relative to out_dir
};

struct CellResult {
  Cell cell;
  std::string stage;  // the last stage reached
  bool pass = false;
  std::string reason;  // the failure (stage: why) or, on success, what the gates measured
  uint64_t artifact_bytes = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, peak_host_mb = 0, peak_gpu_mb = 0;
  std::string device;
  std::string answer;  // the runner's stdout (truncated), the text the answer gate reads
  std::vector<StageResult> stages;
  double seconds = 0;
  nlohmann::json to_json() const;
};

struct MatrixResult {
  bool twins = false;
  int max_new_tokens = 0;
  std::string started_at;  // UTC, ISO 8601
  std::string command, host, out_dir, cells_file;
  double seconds = 0;
  std::vector<CellResult> cells;
  bool all_pass() const;
  nlohmann::json to_json() const;
};

// The golden stage's check that the pulled twin is the one the golden was made from: "" when the
// pulled files (`vkllm pull --json`'s "files") hold model.safetensors with the sha256 the golden
// pins (files_sha256), else why not (no pin, no such file, another hash).
std::string golden_pin_mismatch(const nlohmann::json& golden, const nlohmann::json& pulled_files);

// Runs the selected cells and writes results.tsv, results.json, report.html and logs/ under
// out_dir. Cell failures are recorded, not thrown; a bad cells file, an unusable out_dir or a
// twin hub that cannot start throws Error.
MatrixResult run_matrix(const MatrixOptions& o);

// results.tsv: one header line and one line per cell (tabs and newlines in text become spaces).
void write_results_tsv(const MatrixResult& r, const std::string& path);
std::vector<std::string> results_columns();

// report.html: one self-contained page (inline CSS and JS, the data embedded as JSON).
void write_report_html(const MatrixResult& r, const std::string& path);
std::string report_html(const MatrixResult& r);

}  // namespace vkllm
