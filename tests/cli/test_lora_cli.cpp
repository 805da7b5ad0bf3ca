// `vkllm export --lora` and `vkllm verify` through the binary (docs/lora.md): the twin adapter of
// `vkllm synth` merged into the tiny Qwen3 twin; the adapter is recorded and printed; --plan
// predicts the size exactly; without BASE the adapter's base_model_name_or_path is the base.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "hf/synth.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;

TEST(LoraCli, ExportRecordsTheAdapterAndVerifyPrintsIt) {
  const SharedTwin& twin = shared_twin();
  const std::string dir = scratch_dir();
  SynthLoraOptions lo;
  lo.preset = "tiny-qwen3";
  lo.out_dir = dir + "/adapter";
  lo.base_model = twin.dir;
  synth_lora_write(lo);
  const std::string sha = testutil::sha256_file_hex(lo.out_dir + "/adapter_model.safetensors");

  const std::vector<std::string> common = {"--lora",        lo.out_dir, "--lora-scale",
                                           "0.5",           "--recipe", "quantized-8da4w",
                                           "--max-context", "64",       "--json"};
  std::vector<std::string> plan = {"export", twin.dir, "--plan"};
  plan.insert(plan.end(), common.begin(), common.end());
  const Proc p = run_vkllm(plan);
  ASSERT_EQ(p.code, 0) << p.err;

  // No BASE: the adapter names the twin's folder.
  std::vector<std::string> exp = {"export", "-o", dir + "/m.vkllm"};
  exp.insert(exp.end(), common.begin(), common.end());
  const Proc e = run_vkllm(exp);
  ASSERT_EQ(e.code, 0) << e.err;
  const json ej = json::parse(e.out);
  EXPECT_EQ(ej["lora"]["scale"], 0.5);
  EXPECT_EQ(ej["lora"]["modules"], 4 * 7);
  EXPECT_EQ(ej["lora"]["source"], lo.out_dir);
  EXPECT_EQ(ej["file_size"], json::parse(p.out)["file_size"]);  // --plan is exact with --lora

  const Proc v = run_vkllm({"verify", dir + "/m.vkllm"});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("  lora       " + lo.out_dir + ", 28 modules, scale 0.5, sha256 " + sha),
            std::string::npos)
      << v.out;
  const Proc vj = run_vkllm({"verify", dir + "/m.vkllm", "--json"});
  ASSERT_EQ(vj.code, 0) << vj.err;
  EXPECT_EQ(json::parse(vj.out)["lora"]["sha256"]["adapter_model.safetensors"], sha);

  // An artifact without an adapter has no lora line.
  const Proc bv = run_vkllm({"verify", twin.artifact});
  ASSERT_EQ(bv.code, 0) << bv.err;
  EXPECT_EQ(bv.out.find("  lora "), std::string::npos);
}
