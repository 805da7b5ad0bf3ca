// The quality gate `vkllm e2e` runs as a child process, on the shared tiny Qwen3 twin:
// `vkllm e2e quality` (KL / top-1 against the fp32 reference). The Vulkan-vs-CPU gate is
// `vkllm verify --agree` (tests/runtime/test_agreement.cpp, tests/cli).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "core/mapped_file.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;

// The e2e matrix's Vulkan-vs-CPU gate: `vkllm verify --agree` passes an fp32 artifact on
// lavapipe (every token the CPU's), and fails it, naming the step, when a kernel is broken.
TEST(VerifyAgree, PassesOnTheTwinAndFailsWithABrokenKernel) {
  const std::string prompt = scratch_dir() + "/prompt.txt";
  std::ofstream(prompt) << "What is the capital of France?";
  auto env = validated_env();
  Proc r = run_vkllm(
      {"verify", shared_twin().artifact, "--agree", prompt, "--agree-tokens", "8", "--json"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  json g = json::parse(r.out)["agreement"];
  EXPECT_TRUE(g["ok"].get<bool>());
  EXPECT_EQ(g["steps"], 8);
  EXPECT_EQ(g["exact"], 8);
  EXPECT_LE(g["worst_logits_nmse"].get<double>(), 1e-8);
  EXPECT_EQ(g["tokens"], g["reference_tokens"]);
  env["VKLLM_TEST_CORRUPT_OP"] = "rms_norm";
  r = run_vkllm(
      {"verify", shared_twin().artifact, "--agree", prompt, "--agree-tokens", "8", "--json"}, env);
  EXPECT_EQ(r.code, 1) << r.err;
  g = json::parse(r.out)["agreement"];
  EXPECT_FALSE(g["ok"].get<bool>());
  EXPECT_NE(g["reason"].get<std::string>().find("step 0"), std::string::npos) << g.dump();
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
