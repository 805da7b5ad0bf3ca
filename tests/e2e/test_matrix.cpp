// `vkllm e2e` as CI runs it: the eight twin cells (the seven of the design and the adapter cell)
// and the three family cells (e2e/cells-families.tsv) on the Vulkan device of the machine (lavapipe
// in CI) with the Khronos validation layer, and the proofs that its gates can fail. Outputs stay in
// the build tree (tests/e2e/out-*) for inspection.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "browser.h"
#include "core/mapped_file.h"
#include "e2e/cells.h"
#include "e2e/process.h"
#include "e2e/twin_hub.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct E2eRun {
  int code = -1;
  std::string out, err, dir;
  json results;  // results.json
};

E2eRun run_e2e(const std::string& name, const std::vector<std::string>& args,
               std::map<std::string, std::optional<std::string>> env = {}) {
  E2eRun r;
  r.dir = std::string(VKLLM_BINARY_DIR) + "/tests/e2e/out-" + name;
  std::error_code ec;
  fs::remove_all(r.dir, ec);
  fs::create_directories(r.dir);
  ChildSpec c;
  c.argv = {VKLLM_EXE, "e2e", "--out", r.dir};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  env.emplace("VKLLM_VALIDATION", "1");
  c.env = env;
  c.stdout_path = r.dir + ".stdout";
  c.stderr_path = r.dir + ".stderr";
  c.timeout_s = 3000;
  const ChildResult res = run_child(c);
  r.code = res.exit_code;
  r.out = read_text_file(c.stdout_path);
  r.err = read_text_file(c.stderr_path);
  if (fs::exists(r.dir + "/results.json"))
    r.results = json::parse(read_text_file(r.dir + "/results.json"));
  std::printf("%s\n", r.out.c_str());  // the summary table in the test log
  return r;
}

const json& cell(const E2eRun& r, int id) {
  for (const auto& c : r.results["cells"])
    if (c["cell"] == id) return c;
  static const json none;
  ADD_FAILURE() << "cell " << id << " missing from results.json";
  return none;
}

const json& stage(const json& c, const std::string& name) {
  for (const auto& s : c["stages"])
    if (s["name"] == name) return s;
  static const json none;
  ADD_FAILURE() << "stage " << name << " missing";
  return none;
}

std::vector<std::string> tsv_lines(const std::string& path) {
  std::vector<std::string> v;
  std::istringstream in(read_text_file(path));
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// A twin-mode cell that passed: every stage ran (the lora stage only in an adapter cell) and
// passed with its logs written; the gates really ran (golden ids on the CPU and on Vulkan, verify
// --agree, quality); the artifact, the GPU memory and the answer were recorded; the runner's
// stdout is the answer and its stats line went to stderr.
void expect_twin_cell_passed(const E2eRun& r, const json& c) {
  EXPECT_TRUE(c["pass"].get<bool>()) << c["reason"];
  EXPECT_EQ(c["stage"], "quality");
  const bool adapter = !c["lora"].get<std::string>().empty();
  for (const auto& s : c["stages"]) {
    if (s["name"] == "lora" && !adapter) {  // only an adapter cell has one
      EXPECT_FALSE(s["ran"].get<bool>());
      continue;
    }
    EXPECT_TRUE(s["ran"].get<bool>()) << s["name"];
    EXPECT_TRUE(s["ok"].get<bool>()) << s["name"] << ": " << s["note"];
    for (const auto& log : s["logs"])
      EXPECT_TRUE(fs::exists(r.dir + "/" + log.get<std::string>())) << log;
  }
  // The gates really ran: golden ids on the CPU and on Vulkan, verify --agree, quality.
  EXPECT_NE(stage(c, "golden")["note"].get<std::string>().find(
                "= transformers golden (32/32 ids) on the CPU (folder) and on Vulkan"),
            std::string::npos)
      << stage(c, "golden")["note"];
  // verify --agree ran: Vulkan's tokens and logits within the recipe's bounds (docs/gates.md).
  EXPECT_EQ(stage(c, "cpu")["note"].get<std::string>().rfind(
                "Vulkan vs CPU logits, CPU teacher-forced on Vulkan's tokens: ", 0),
            0u)
      << stage(c, "cpu")["note"];
  EXPECT_NE(stage(c, "quality")["note"].get<std::string>().find("KL "), std::string::npos);
  EXPECT_GT(c["artifact_bytes"].get<uint64_t>(), 1000000u);
  EXPECT_GT(c["peak_gpu_mb"].get<double>(), 0.0);
  EXPECT_FALSE(c["answer"].get<std::string>().empty());
  // Runner stdout and stderr are separate files; the stats line is only on stderr.
  const std::string base = r.dir + "/logs/cell" + std::to_string(c["cell"].get<int>()) + "/run";
  EXPECT_EQ(read_text_file(base + ".stdout").find("vkllm-stats"), std::string::npos);
  EXPECT_NE(read_text_file(base + ".stderr").find("vkllm-stats {"), std::string::npos);
  EXPECT_EQ(read_text_file(base + ".stdout"), c["answer"].get<std::string>());
}

// The pulls went through the hub at each cell's pinned commit; a model's files are downloaded by
// its first cell and found in the cache by the next ones.
void expect_pulls_at_the_pinned_revisions(const E2eRun& r) {
  const std::string hub_log = read_text_file(r.dir + "/logs/setup/hub-requests.jsonl");
  std::set<std::string> seen;
  for (const auto& c : r.results["cells"]) {
    const std::string model = c["model"], rev = c["revision"];
    EXPECT_NE(hub_log.find("/api/models/" + model + "/revision/" + rev), std::string::npos)
        << model;
    EXPECT_NE(hub_log.find("/" + model + "/resolve/" + rev + "/model.safetensors"),
              std::string::npos)
        << model;
    const std::string note = stage(c, "pull")["note"];
    EXPECT_EQ(note.find(", 0 downloaded") == std::string::npos, seen.insert(model).second) << note;
  }
}

}  // namespace

TEST(E2eTwins, AllEightCellsPassOnTheVulkanDevice) {
  const E2eRun r = run_e2e("twins", {"--twins"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.results["cells"].size(), 8u);
  std::set<std::string> twins_checked;
  for (const auto& c : r.results["cells"]) {
    SCOPED_TRACE("cell " + std::to_string(c["cell"].get<int>()));
    expect_twin_cell_passed(r, c);
    EXPECT_EQ(!c["lora"].get<std::string>().empty(), c["cell"] == 8);  // the adapter cell
    twins_checked.insert(c["twin"].get<std::string>());
  }
  EXPECT_EQ(twins_checked.size(), 3u);
  // The artifacts are deleted after each cell.
  EXPECT_TRUE(fs::is_empty(r.dir + "/artifacts"));
  expect_pulls_at_the_pinned_revisions(r);
  // The adapter cell: generated for the pulled twin, published by its own hub, pulled by both of
  // its exports (the merged fp32 golden and the recipe), printed by verify, its golden the merged
  // model (which parts from the base's), its quality measured against the merged model.
  const json& c8 = cell(r, 8);
  const std::string lora = "vkllm-e2e/Llama-3.2-1B-Instruct-lora";
  EXPECT_EQ(c8["lora"], lora);
  EXPECT_EQ(c8["model"], cell(r, 4)["model"]);
  EXPECT_EQ(c8["recipe"], cell(r, 4)["recipe"]);
  EXPECT_NE(stage(c8, "lora")["note"].get<std::string>().find("published as " + lora),
            std::string::npos)
      << stage(c8, "lora")["note"];
  const std::string g8 = stage(c8, "golden")["note"];
  // The base was checked by cell 2, the first cell of the model.
  EXPECT_NE(g8.find("(checked in cell 2); merged fp32 ("), std::string::npos) << g8;
  EXPECT_NE(g8.find("LoRA modules) on the CPU = this cell's golden, parting from the base's at "
                    "step "),
            std::string::npos)
      << g8;
  EXPECT_NE(stage(c8, "export")["note"].get<std::string>().find(" LoRA modules merged"),
            std::string::npos);
  EXPECT_NE(stage(c8, "verify")["note"].get<std::string>().find("; lora " + lora + " @ main ("),
            std::string::npos)
      << stage(c8, "verify")["note"];
  EXPECT_NE(stage(c8, "quality")["note"].get<std::string>().find("(vs the merged fp32 model)"),
            std::string::npos);
  const std::string lora_log = read_text_file(r.dir + "/logs/cell8/lora-hub-requests.jsonl");
  // Both exports resolved it through the hub; the first downloaded it, the second found the
  // files in the cache.
  EXPECT_EQ(count_of(lora_log, "\"/api/models/" + lora + "/revision/main\""), 2u) << lora_log;
  EXPECT_EQ(count_of(lora_log, "/adapter_model.safetensors\""), 1u) << lora_log;
  EXPECT_EQ(count_of(lora_log, "/_blobs/"), 1u) << lora_log;
  // The merged model's greedy ids are not the base's, nor are the cell's (same recipe as cell 4).
  const json merged = json::parse(read_text_file(r.dir + "/logs/cell8/golden-lora.ids.json"));
  const json base = json::parse(read_text_file(r.dir + "/logs/cell2/golden.ids.json"));
  EXPECT_EQ(merged["prompt_ids"], base["prompt_ids"]);
  EXPECT_NE(merged["generated_ids"], base["generated_ids"]);
  EXPECT_NE(c8["answer"], cell(r, 4)["answer"]);
  // results.tsv: header + 8 PASS lines.
  const auto lines = tsv_lines(r.dir + "/results.tsv");
  ASSERT_EQ(lines.size(), 9u);
  for (size_t i = 1; i < lines.size(); ++i)
    EXPECT_NE(lines[i].find("\tPASS\t"), std::string::npos) << lines[i];
  EXPECT_NE(lines[8].find("\t" + lora + "\t"), std::string::npos) << lines[8];
  // The report renders the eight passing rows in a real browser, the adapter on its row.
  const std::string dom = chromium_dom(r.dir + "/report.html");
  EXPECT_EQ(count_of(dom, "<tr class=\"cell-row pass\""), 8u);
  EXPECT_NE(dom.find("8 / 8 passed"), std::string::npos);
  EXPECT_EQ(count_of(dom, "+ LoRA " + lora), 1u);
  // Progress went to stderr while it ran.
  EXPECT_NE(r.err.find("e2e: [8/8] cell 8: PASS"), std::string::npos) << r.err;
}

// e2e/cells-families.tsv in twin mode: the families added since the design (Qwen2.5, Gemma 3,
// SmolLM3), each under its real model id at a pinned commit of its Hugging Face repository: the
// twin pulled from the loopback hub, exported, verified, run on Vulkan and gated as the eight
// cells are.
TEST(E2eTwins, TheFamilyCellsPassOnTheVulkanDevice) {
  const E2eRun r = run_e2e(
      "twins-families",
      {"--twins", "--cells-file", std::string(VKLLM_SOURCE_DIR) + "/e2e/cells-families.tsv"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.results["cells"].size(), 3u);
  // The model ids and the commits of their Hugging Face repositories (typed in, not read from the
  // cells file), and the twins.
  const std::map<int, std::array<std::string, 3>> want = {
      {9,
       {"Qwen/Qwen2.5-0.5B-Instruct", "7ae557604adf67be50417f59c2c2f167def9a775", "tiny-qwen2.5"}},
      {10, {"google/gemma-3-1b-it", "dcc83ea841ab6100d6b47a070329e1ba4cf78752", "tiny-gemma3"}},
      {11,
       {"HuggingFaceTB/SmolLM3-3B", "a07cc9a04f16550a088caea529712d1d335b0ac1", "tiny-smollm3"}},
  };
  for (const auto& c : r.results["cells"]) {
    const int id = c["cell"].get<int>();
    SCOPED_TRACE("cell " + std::to_string(id));
    ASSERT_TRUE(want.count(id));
    EXPECT_EQ(c["model"], want.at(id)[0]);
    EXPECT_EQ(c["revision"], want.at(id)[1]);
    EXPECT_EQ(c["twin"], want.at(id)[2]);
    EXPECT_EQ(c["lora"], "");
    expect_twin_cell_passed(r, c);
  }
  EXPECT_TRUE(fs::is_empty(r.dir + "/artifacts"));
  expect_pulls_at_the_pinned_revisions(r);
  // results.tsv: header + 3 PASS lines; the report renders the three passing rows.
  const auto lines = tsv_lines(r.dir + "/results.tsv");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 1; i < lines.size(); ++i)
    EXPECT_NE(lines[i].find("\tPASS\t"), std::string::npos) << lines[i];
  const std::string dom = chromium_dom(r.dir + "/report.html");
  EXPECT_EQ(count_of(dom, "<tr class=\"cell-row pass\""), 3u);
  EXPECT_NE(dom.find("3 / 3 passed"), std::string::npos);
  EXPECT_NE(r.err.find("e2e: [3/3] cell 11: PASS"), std::string::npos) << r.err;
}

// The test-only switch VKLLM_TEST_CORRUPT_OP zeroes one Vulkan op family's outputs. The int4
// embedding kernel is used only by the -embedding recipes: cell 4 must fail with a clear reason,
// cell 2 (fp32 embedding table) must still pass.
TEST(E2eGates, ACorruptedKernelFailsTheCellsThatUseIt) {
  const E2eRun r = run_e2e("corrupt", {"--twins", "--cells", "2,4", "-n", "8"},
                           {{"VKLLM_TEST_CORRUPT_OP", "embedding_q4"}});
  EXPECT_EQ(r.code, 1) << r.err;
  ASSERT_EQ(r.results["cells"].size(), 2u) << r.err;
  EXPECT_TRUE(cell(r, 2)["pass"].get<bool>()) << cell(r, 2)["reason"];
  const json& c4 = cell(r, 4);
  EXPECT_FALSE(c4["pass"].get<bool>());
  EXPECT_EQ(c4["stage"], "cpu");
  // The zeroed int4 embedding moves Vulkan's logits far from the CPU backend's at the first step
  // (vkllm verify --agree: NMSE over the recipe's bound).
  const std::string why = c4["reason"];
  EXPECT_EQ(why.rfind("cpu: Vulkan disagrees with the CPU reference: step 0: logits NMSE ", 0), 0u)
      << why;
  EXPECT_NE(r.out.find("1/2 cells passed"), std::string::npos) << r.out;
  const auto lines = tsv_lines(r.dir + "/results.tsv");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("\tFAIL\tcpu: Vulkan disagrees with the CPU reference"),
            std::string::npos)
      << lines[2];
}

// The adapter cell fails when its adapter changes nothing: with --lora-strength 0 the generated
// adapter's B is zero, so the merged model is the base, and its greedy ids equal the base's
// transformers golden (as they would if the export ignored --lora). Nothing is exported for the
// recipe.
TEST(E2eGates, AnAdapterThatChangesNothingFailsTheAdapterCell) {
  const E2eRun r =
      run_e2e("lora-zero", {"--twins", "--cells", "8", "-n", "8", "--lora-strength", "0"});
  EXPECT_EQ(r.code, 1) << r.err;
  const json& c8 = cell(r, 8);
  EXPECT_FALSE(c8["pass"].get<bool>());
  EXPECT_EQ(c8["stage"], "golden");
  EXPECT_TRUE(stage(c8, "lora")["ok"].get<bool>()) << stage(c8, "lora")["note"];
  EXPECT_EQ(c8["reason"].get<std::string>(),
            "golden: the merged model's 32 greedy ids on the CPU equal the base twin's "
            "transformers golden: the adapter changed nothing")
      << c8["reason"];
  EXPECT_FALSE(stage(c8, "export")["ran"].get<bool>());
  // The adapter was published and merged all the same: zeros, not a missing adapter.
  const json e = json::parse(read_text_file(r.dir + "/logs/cell8/golden-lora-export.stdout"));
  EXPECT_GT(e["lora"]["modules"].get<int>(), 0);
}

// A golden that disagrees with the fp32 twin (one id changed) must fail the golden gate.
TEST(E2eGates, AWrongGoldenFailsTheGoldenGate) {
  const std::string gdir = std::string(VKLLM_BINARY_DIR) + "/tests/e2e/bad-goldens";
  fs::create_directories(gdir);
  json g =
      json::parse(read_text_file(std::string(VKLLM_SOURCE_DIR) + "/tests/goldens/tiny-qwen3.json"));
  g["continuation_ids"][5] = g["continuation_ids"][5].get<int>() + 1;
  std::ofstream(gdir + "/tiny-qwen3.json") << g.dump();
  const E2eRun r = run_e2e("bad-golden", {"--twins", "--cells", "1", "--goldens", gdir});
  EXPECT_EQ(r.code, 1) << r.err;
  const json& c1 = cell(r, 1);
  EXPECT_FALSE(c1["pass"].get<bool>());
  EXPECT_EQ(c1["stage"], "golden");
  EXPECT_NE(c1["reason"].get<std::string>().find(
                "golden: fp32 twin differs from the transformers golden at step 5"),
            std::string::npos)
      << c1["reason"];
  EXPECT_FALSE(stage(c1, "export")["ran"].get<bool>());
}

// The golden stage also runs the twin's non-quantized artifact on Vulkan: a broken fp32 kernel
// (VKLLM_TEST_CORRUPT_OP zeroes rope's outputs; the CPU run of the folder is not affected) fails
// it against the transformers golden before any recipe is exported.
TEST(E2eGates, ABrokenFp32KernelFailsTheGoldenStageOnVulkan) {
  const E2eRun r =
      run_e2e("corrupt-rope", {"--twins", "--cells", "1"}, {{"VKLLM_TEST_CORRUPT_OP", "rope"}});
  EXPECT_EQ(r.code, 1) << r.err;
  const json& c1 = cell(r, 1);
  EXPECT_EQ(c1["stage"], "golden");
  EXPECT_NE(c1["reason"].get<std::string>().find(
                "golden: the fp32 artifact on Vulkan differs from the transformers golden at step"),
            std::string::npos)
      << c1["reason"];
  EXPECT_FALSE(stage(c1, "export")["ran"].get<bool>());
}

// Real mode (no --twins) against a hub: the real path runs every stage; a random-weight twin
// served under the real id cannot say "Paris", so the answer gate must report it; a model the
// hub does not have fails at pull. The adapter cell's adapter is generated for the pulled base
// and pulled from its own hub in real mode too (no third-party adapter).
TEST(E2eReal, StagesRunAndTheAnswerGateReportsTheMissingAnswer) {
  const std::string work = std::string(VKLLM_BINARY_DIR) + "/tests/e2e/real-hub";
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(work + "/logs");
  const auto cells =
      select_cells(read_cells(std::string(VKLLM_SOURCE_DIR) + "/e2e/cells.tsv"), "1,8");
  TwinHub hub(VKLLM_EXE, VKLLM_SOURCE_DIR, cells, work, work + "/logs", nullptr);
  const E2eRun r = run_e2e("real", {"--cells", "1,7,8", "-n", "4"}, hub.pull_env());
  EXPECT_EQ(r.code, 1) << r.err;
  ASSERT_EQ(r.results["mode"], "real");
  const json& c1 = cell(r, 1);
  EXPECT_FALSE(c1["pass"].get<bool>());
  EXPECT_EQ(c1["stage"], "run");
  EXPECT_NE(c1["reason"].get<std::string>().find(
                "run: answer 'Paris' not found in the runner's stdout (4 tokens"),
            std::string::npos)
      << c1["reason"];
  for (const char* s : {"pull", "export", "verify"})
    EXPECT_TRUE(stage(c1, s)["ok"].get<bool>()) << s;
  for (const char* s : {"golden", "cpu", "quality"})
    EXPECT_FALSE(stage(c1, s)["ran"].get<bool>()) << s;
  const json& c7 = cell(r, 7);  // its model is not on this hub
  EXPECT_EQ(c7["stage"], "pull");
  EXPECT_NE(c7["reason"].get<std::string>().find("not found"), std::string::npos) << c7["reason"];
  const json& c8 = cell(r, 8);
  EXPECT_EQ(c8["stage"], "run");
  EXPECT_NE(c8["reason"].get<std::string>().find("run: answer 'Paris' not found"),
            std::string::npos)
      << c8["reason"];
  for (const char* s : {"pull", "lora", "export", "verify"})
    EXPECT_TRUE(stage(c8, s)["ok"].get<bool>()) << s << ": " << stage(c8, s)["note"];
  EXPECT_NE(stage(c8, "verify")["note"].get<std::string>().find(
                "; lora vkllm-e2e/Llama-3.2-1B-Instruct-lora @ main ("),
            std::string::npos)
      << stage(c8, "verify")["note"];
  const json ad =
      json::parse(read_text_file(r.dir + "/lora-hub/cell8/vkllm-e2e/Llama-3.2-1B-Instruct-lora/"
                                         "adapter_config.json"));
  EXPECT_EQ(ad["base_model_name_or_path"], "unsloth/Llama-3.2-1B-Instruct");
  for (const char* s : {"golden", "cpu", "quality"})
    EXPECT_FALSE(stage(c8, s)["ran"].get<bool>()) << s;
}
