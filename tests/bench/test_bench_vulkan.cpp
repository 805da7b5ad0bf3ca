// `vkllm bench` running the tiny Qwen3 twin on Vulkan: the markdown, CSV and JSON reports, and
// --parallel's aggregate decode on both backends. Label heavy: it runs in the dev build
// (scripts/test.sh). Each loads the model on lavapipe several times (112 s and 99 s under the
// sanitizers, a few seconds in the dev build); the code they reach is run sanitized by
// test_bench (the reports, depth and bad arguments on the CPU backend; --physics, --gemm and
// --matvec on Vulkan), test_cli and test_serve (the model on Vulkan, batched decode).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_fixture.h"

using namespace bench_test;

// --parallel: one row per batch size on both backends, each with its repetitions' rates; a batch
// whose prompt and steps pass the context fails with one line.
TEST(Bench, ParallelAggregateDecode) {
  for (const char* backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    const std::string base =
        std::string(VKLLM_EXE) + " bench -m " + artifact() + " --backend " + backend;
    const Out js = sh(base + " -p 6 -n 3 -r 2 --parallel 1,3 --output json");
    ASSERT_EQ(js.rc, 0) << js.out;
    const auto j = nlohmann::json::parse(js.out);
    EXPECT_EQ(j["backend"], backend);
    ASSERT_EQ(j["parallel"].size(), 2u) << js.out;
    for (size_t i = 0; i < 2; ++i) {
      const auto& r = j["parallel"][i];
      EXPECT_EQ(r["sequences"], i == 0 ? 1 : 3);
      EXPECT_EQ(r["prompt_tokens"], 6);
      EXPECT_EQ(r["gen_tokens"], 3);
      ASSERT_EQ(r["runs_tok_s"].size(), 2u);
      for (double v : r["runs_tok_s"]) EXPECT_GT(v, 0);
    }
  }
  const std::string base = std::string(VKLLM_EXE) + " bench -m " + artifact();
  const Out md = sh(base + " -p 6 -n 2 -r 1 --parallel 2");
  ASSERT_EQ(md.rc, 0);
  EXPECT_NE(md.out.find("| 2 | tg2 after pp6 |"), std::string::npos) << md.out;
  EXPECT_NE(sh(base + " -p 6 -n 100000 -r 1 --parallel 2").rc, 0);
}

TEST(Bench, MarkdownAndCsvOnVulkan) {
  const std::string base = std::string(VKLLM_EXE) + " bench -m " + artifact() + " -p 6 -n 2 -r 1";
  const Out md = sh(base);
  ASSERT_EQ(md.rc, 0);
  EXPECT_NE(md.out.find("| pp6 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| tg2 |"), std::string::npos) << md.out;
  const Out csv = sh(base + " --output csv");
  ASSERT_EQ(csv.rc, 0);
  EXPECT_NE(csv.out.find("qwen3,quantized-int4-weight-only,vulkan,"), std::string::npos) << csv.out;
  // On Vulkan the JSON also has the device memory: the weights live there, so at least their size.
  const Out js = sh(base + " --output json");
  ASSERT_EQ(js.rc, 0);
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_GE(j["peak_gpu_mb"].get<double>(), j["weight_mib"].get<double>()) << js.out;
  EXPECT_FALSE(j["driver"].get<std::string>().empty()) << js.out;
}

// --output json's load stages on Vulkan, and the pipeline cache (VKLLM_PIPELINE_CACHE, here a
// fresh folder): the first run writes it, the second loads it and has nothing new to write.
TEST(Bench, LoadStagesAndPipelineCache) {
  char dir[] = "/tmp/vkllm-bench-pcache-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string cmd = std::string("VKLLM_PIPELINE_CACHE=") + dir + " " + VKLLM_EXE +
                          " bench -m " + artifact() + " -p 6 -n 2 -r 1 --output json";
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    const Out js = sh(cmd);
    ASSERT_EQ(js.rc, 0) << js.out;
    const auto j = nlohmann::json::parse(js.out);
    const auto& s = j["load_stages_ms"];
    for (const char* k : {"open", "session", "tokenizer", "tokenizer_parse", "device", "weights",
                          "artifact", "pipelines"})
      EXPECT_TRUE(s.contains(k) && s[k].get<double>() >= 0) << k << " in " << js.out;
    EXPECT_GT(s["tokenizer_parse"].get<double>(), 0.0) << js.out;
    EXPECT_LE(s["tokenizer"].get<double>(), s["tokenizer_parse"].get<double>()) << js.out;
    EXPECT_LE(s["tokenizer"].get<double>() + s["device"].get<double>() + s["weights"].get<double>(),
              s["open"].get<double>());
    EXPECT_LE(s["open"].get<double>() + s["session"].get<double>(),
              j["load_ms"].get<double>() + 1e-6);
    const auto& pc = j["pipeline_cache"];
    EXPECT_TRUE(pc["enabled"].get<bool>()) << js.out;
    EXPECT_GT(pc["pipelines"].get<int>(), 0) << js.out;
    if (run == 0) {
      EXPECT_EQ(pc["loaded_bytes"], 0) << js.out;
      EXPECT_GT(pc["saved_bytes"].get<uint64_t>(), 0u) << js.out;
    } else {
      EXPECT_GT(pc["loaded_bytes"].get<uint64_t>(), 0u) << js.out;
      EXPECT_EQ(pc["saved_bytes"], 0) << js.out;
    }
  }
  std::filesystem::remove_all(dir);
}
