// vkllm e2e [--twins] [--cells LIST] [--out DIR]: the end-to-end matrix of e2e/cells.tsv
// (src/e2e/matrix.h; gates in e2e/README.md). vkllm e2e quality: one artifact's quality gate.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "artifact/reader.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "e2e/matrix.h"
#include "e2e/process.h"
#include "e2e/quality.h"

namespace vkllm::cli {

namespace fs = std::filesystem;

namespace {

struct E2eArgs {
  MatrixOptions m;
  std::string cells_file, out = "out/e2e";
};

struct QualityArgs {
  std::string artifact, reference;
  bool json = false;
};

// The nearest folder holding `marker`, among the ancestors of the current directory, then of the
// running binary (a build tree inside the source tree).
std::string find_root(const std::string& marker) {
  for (fs::path start : {fs::current_path(), fs::path(self_exe_path()).parent_path()})
    for (fs::path p = fs::absolute(start);; p = p.parent_path()) {
      if (fs::exists(p / marker)) return p.string();
      if (p == p.root_path()) break;
    }
  return {};
}

void run_e2e(E2eArgs& a) {
  MatrixOptions o = a.m;
  o.out_dir = a.out;
  if (a.cells_file.empty()) {
    const std::string root = find_root("e2e/cells.tsv");
    if (root.empty())
      fail("no e2e/cells.tsv above the current directory or the vkllm binary; give --cells-file");
    a.cells_file = root + "/e2e/cells.tsv";
  }
  o.cells_file = a.cells_file;
  o.repo_root = find_root("tests/hub/fake_hub.py");  // also the adapter cells' hub, in both modes
  if (o.twins) {
    if (o.repo_root.empty())
      fail(
          "twin mode needs the vkllm source tree (tests/hub/fake_hub.py, tests/goldens/); run it "
          "from there");
  }
  o.command = fmt::format("vkllm e2e{}{} --out {} -n {} --lora-strength {:g}",
                          o.twins ? " --twins" : "", o.cells.empty() ? "" : " --cells " + o.cells,
                          a.out, o.max_new_tokens, o.lora_strength);
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "e2e: %s\n", line.c_str());
    std::fflush(stderr);
  };
  const MatrixResult r = run_matrix(o);
  std::printf("%-4s %-5s %-8s %-30s %-31s %s\n", "cell", "result", "stage", "model", "recipe",
              "detail");
  for (const auto& c : r.cells)
    std::printf("%-4d %-6s %-8s %-30s %-31s %s\n", c.cell.id, c.pass ? "PASS" : "FAIL",
                c.stage.c_str(), c.cell.model.c_str(), c.cell.recipe.c_str(), c.reason.c_str());
  int passed = 0;
  for (const auto& c : r.cells) passed += c.pass;
  std::printf(
      "%d/%zu cells passed in %.1f s (%s mode)\nresults: %s/results.tsv\nreport:  "
      "%s/report.html\nlogs:    %s/logs/\n",
      passed, r.cells.size(), r.seconds, r.twins ? "twin" : "real", r.out_dir.c_str(),
      r.out_dir.c_str(), r.out_dir.c_str());
  std::fflush(stdout);
  if (!r.all_pass()) throw CLI::RuntimeError(1);
}

void run_quality(const QualityArgs& a) {
  const std::string recipe = ArtifactReader(a.artifact).recipe_name();
  const QualityStats q = measure_artifact_quality(a.artifact, a.reference);
  const QualityGate g = quality_gate_for(recipe);
  const bool pass = g.passes(q);
  if (a.json) {
    nlohmann::json j = {{"artifact", a.artifact},
                        {"reference", a.reference},
                        {"recipe", recipe},
                        {"kl_mean", q.kl_mean},
                        {"kl_max", q.kl_max},
                        {"top1", q.top1},
                        {"positions", q.positions},
                        {"pass", pass},
                        {"gate", {{"kl_mean_max", g.kl_mean_max}, {"top1_min", g.top1_min}}}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "%s (%s) vs %s over %d positions: mean KL %.5f nats (gate <= %g), max KL %.5f, top-1 %.3f "
        "(gate >= %g): %s\n",
        a.artifact.c_str(), recipe.c_str(), a.reference.c_str(), q.positions, q.kl_mean,
        g.kl_mean_max, q.kl_max, q.top1, g.top1_min, pass ? "PASS" : "FAIL");
  }
  if (!pass) {
    std::fprintf(stderr,
                 "vkllm e2e quality: %s: mean KL %.5f / top-1 %.3f outside the %s gate (KL <= %g, "
                 "top-1 >= %g)\n",
                 a.artifact.c_str(), q.kl_mean, q.top1, recipe.c_str(), g.kl_mean_max, g.top1_min);
    throw CLI::RuntimeError(1);
  }
}

}  // namespace

void add_e2e(CLI::App& app) {
  auto a = std::make_shared<E2eArgs>();
  auto* cmd = app.add_subcommand(
      "e2e", "End-to-end matrix of e2e/cells.tsv: pull, export, verify, run on Vulkan, gates");
  cmd->add_option("--cells", a->m.cells, "Cells to run, e.g. 1,3-5 (default: all)");
  cmd->add_flag(
      "--twins", a->m.twins,
      "Run each cell on its tiny twin served by the loopback test hub, gated on independent "
      "references (transformers goldens, CPU backend, quality gates)");
  cmd->add_option("-o,--out", a->out,
                  "Output folder: results.tsv, results.json, report.html, logs/")
      ->capture_default_str();
  cmd->add_option("--cells-file", a->cells_file,
                  "The cells table (default: e2e/cells.tsv of the source tree)");
  cmd->add_option("-n,--max-new-tokens", a->m.max_new_tokens, "Tokens each runner generates")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option(
      "--device", a->m.device,
      "Vulkan device for the runs (index or name; default: $VKLLM_DEVICE or the first GPU)");
  cmd->add_option("--goldens", a->m.goldens_dir,
                  "Twin mode: folder of the transformers goldens (default: tests/goldens)");
  cmd->add_option("--stage-timeout", a->m.stage_timeout_s,
                  "Seconds one stage may take before it is killed")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--lora-strength", a->m.lora_strength,
                  "Strength of the LoRA adapter the adapter cells generate (delta RMS relative to "
                  "1/sqrt(fan_in); 0 makes B zero, an adapter that changes nothing)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_flag("--keep-artifacts", a->m.keep_artifacts,
                "Keep each cell's artifact (default: deleted after the cell)");
  cmd->require_subcommand(0, 1);

  auto q = std::make_shared<QualityArgs>();
  auto* qc = cmd->add_subcommand("quality",
                                 "One artifact's quantization quality against the fp32 reference "
                                 "(CPU backend) and its recipe's gate");
  qc->add_option("artifact", q->artifact, "The .vkllm artifact")->required();
  qc->add_option("--reference", q->reference,
                 "The fp32 reference: the Hugging Face folder it was exported from, or a "
                 "non-quantized artifact")
      ->required();
  qc->add_flag("--json", q->json, "Print the measurement as JSON on stdout");
  qc->callback([q] { run_quality(*q); });

  cmd->callback([a, qc] {
    if (qc->parsed()) return;
    run_e2e(*a);
  });
}

}  // namespace vkllm::cli
