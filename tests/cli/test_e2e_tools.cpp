// The two gates `vkllm e2e` runs as child processes, on the shared tiny Qwen3 twin:
// `vkllm e2e agree` (greedy ids against the CPU backend) and `vkllm e2e quality` (KL / top-1
// against the fp32 reference).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "core/mapped_file.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;

namespace {

json ids_after_run(const std::string& model, int n) {
  const std::string ids = scratch_dir() + "/ids.json";
  const Proc r =
      run_vkllm({"run", "-m", model, "--backend", "cpu", "-p", "What is the capital of France?",
                 "--chat", "-n", std::to_string(n), "--ids_file", ids, "--no-stats"});
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(read_text_file(ids));
}

std::string write_json(const json& j) {
  const std::string p = scratch_dir() + "/ids.json";
  std::ofstream(p) << j.dump();
  return p;
}

Proc agree(const std::string& ids_file, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"e2e",   "agree",  shared_twin().artifact,
                                "--ids", ids_file, "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return run_vkllm(a);
}

}  // namespace

TEST(E2eAgree, TheCpuBackendsOwnIdsAgreeExactly) {
  const json ids = ids_after_run(shared_twin().artifact, 12);
  const Proc r = agree(write_json(ids));
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["steps"], 12);
  EXPECT_EQ(j["exact"], 12);
  EXPECT_TRUE(j["differing"].empty());
  EXPECT_EQ(j["tolerance"].get<double>(), 0.01);  // fp32 recipe
}

TEST(E2eAgree, AReplacedIdFailsUnlessItIsWithinTheTolerance) {
  json ids = ids_after_run(shared_twin().artifact, 8);
  ids["generated_ids"][7] = 12345;  // the last one (later steps would see a changed context)
  const std::string f = write_json(ids);
  const Proc r = agree(f);
  EXPECT_EQ(r.code, 1);
  const json j = json::parse(r.out);
  ASSERT_EQ(j["differing"].size(), 1u);
  EXPECT_EQ(j["differing"][0]["step"], 7);
  EXPECT_EQ(j["differing"][0]["token"], 12345);
  EXPECT_GT(j["differing"][0]["gap"].get<double>(), 1.0);
  EXPECT_FALSE(j["pass"].get<bool>());
  // The same ids pass with a tolerance above that gap (and the other steps stay exact).
  const Proc loose = agree(f, {"--tolerance", "1000"});
  EXPECT_EQ(loose.code, 0) << loose.out;
  EXPECT_EQ(json::parse(loose.out)["exact"], 7);
}

TEST(E2eAgree, AnEosStopIsCheckedToo) {
  json ids = ids_after_run(shared_twin().artifact, 6);
  ids["stopped_by_eos"] = true;  // the twin does not pick an eos id after these six tokens
  const Proc r = agree(write_json(ids));
  EXPECT_EQ(r.code, 1);
  const json j = json::parse(r.out);
  EXPECT_EQ(j["steps"], 7);
  ASSERT_EQ(j["differing"].size(), 1u);
  EXPECT_EQ(j["differing"][0]["step"], 6);
}

TEST(E2eAgree, BadIdsFilesAreOneLineErrors) {
  for (const std::string& text :
       {std::string("not json"), std::string("{\"prompt_ids\": [1]}"),
        std::string("{\"prompt_ids\": [1], \"generated_ids\": [\"x\"]}"),
        std::string("{\"prompt_ids\": [1], \"generated_ids\": [999999999]}")}) {
    const std::string p = scratch_dir() + "/bad.json";
    std::ofstream(p) << text;
    const Proc r = agree(p);
    EXPECT_EQ(r.code, 1) << text;
    EXPECT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_EQ(r.out, "") << text;
  }
}

TEST(E2eQuality, Fp32ArtifactAgainstItsFolderIsExactAndQuantizedPassesItsGate) {
  Proc r = run_vkllm(
      {"e2e", "quality", shared_twin().artifact, "--reference", shared_twin().dir, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_LT(j["kl_mean"].get<double>(), 1e-9);
  EXPECT_EQ(j["top1"].get<double>(), 1.0);
  EXPECT_EQ(j["positions"], 32);
  // A quantized artifact of the same twin: within the int4 gate (docs/quality.md).
  const std::string q = scratch_dir() + "/q.vkllm";
  ASSERT_EQ(run_vkllm({"export", shared_twin().dir, "--recipe", "quantized-8da4w", "--max-context",
                       "64", "-o", q, "-q"})
                .code,
            0);
  r = run_vkllm({"e2e", "quality", q, "--reference", shared_twin().dir, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_GT(j["kl_mean"].get<double>(), 0.1);
  EXPECT_LE(j["kl_mean"].get<double>(), j["gate"]["kl_mean_max"].get<double>());
  EXPECT_EQ(j["recipe"], "quantized-8da4w");
  // The quantized artifact is no fp32 reference.
  r = run_vkllm({"e2e", "quality", shared_twin().artifact, "--reference", q});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the reference must be fp32"), std::string::npos) << r.err;
}
