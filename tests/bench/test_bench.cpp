// `vkllm bench` end to end on the tiny Qwen3 twin: the JSON report has every figure, the rates
// are positive and consistent with the repetitions, the other formats carry the same tests, and
// bad arguments fail with one line. (Speed itself is measured on the GPU machine, never here.)
// The model runs on Vulkan are in test_bench_vulkan.cpp (label heavy).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_fixture.h"

using namespace bench_test;

TEST(Bench, JsonReportOnTheCpuBackend) {
  const Out o = sh(std::string(VKLLM_EXE) + " bench -m " + artifact() +
                   " --backend cpu -p 12 -n 5 -r 3 --output json");
  ASSERT_EQ(o.rc, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["recipe"], "quantized-int4-weight-only");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_GT(j["load_ms"].get<double>(), 0);
  EXPECT_EQ(j["pp"]["tokens"], 12);
  EXPECT_EQ(j["tg"]["tokens"], 5);
  for (const char* t : {"pp", "tg"}) {
    ASSERT_EQ(j[t]["runs_tok_s"].size(), 3u) << t;
    double lo = 1e30, hi = 0;
    for (double r : j[t]["runs_tok_s"]) lo = std::min(lo, r), hi = std::max(hi, r);
    EXPECT_GT(lo, 0) << t;
    EXPECT_GE(j[t]["median_tok_s"].get<double>(), lo) << t;
    EXPECT_LE(j[t]["median_tok_s"].get<double>(), hi) << t;
  }
  EXPECT_GT(j["peak_host_mb"].get<double>(), 1);
  EXPECT_EQ(j["tg"]["depth"], 0);
  EXPECT_GT(j["context"].get<int>(), 0);
  EXPECT_GT(j["kv_cache_mib"].get<double>(), 0);
}

// -d: tg decodes after a d-token prompt (llama-bench's -d), reported as such; a depth past the
// context fails with one line.
TEST(Bench, DepthDecodesAfterALongerPrompt) {
  const std::string base = std::string(VKLLM_EXE) + " bench -m " + artifact() + " --backend cpu";
  const Out js = sh(base + " -p 4 -n 3 -d 20 -r 1 --output json");
  ASSERT_EQ(js.rc, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["tg"]["depth"], 20);
  EXPECT_EQ(j["tg"]["tokens"], 3);
  EXPECT_GT(j["tg"]["median_tok_s"].get<double>(), 0);
  const Out md = sh(base + " -p 4 -n 3 -d 20 -r 1");
  ASSERT_EQ(md.rc, 0);
  EXPECT_NE(md.out.find("| tg3 @ d20 |"), std::string::npos) << md.out;
  const Out bad = sh(base + " -p 4 -n 3 -d 100000 -r 1");
  EXPECT_NE(bad.rc, 0);
}

// --physics: the device's fixed costs, measured on lavapipe here (the figures are the H200's in
// docs/perf.md): every kind of row, positive times, and grid syncs that completed (the command
// fails when a sync's counters are left dirty, as on a grid that was not resident).
TEST(Bench, PhysicsMeasuresDispatchesSyncsAndStreams) {
  const auto r = sh(std::string(VKLLM_EXE) + " bench --physics -r 1 --groups 2 --output json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  std::map<std::string, int> kinds;
  for (const auto& row : j["rows"]) {
    ++kinds[row["what"].get<std::string>()];
    EXPECT_GT(row["us"].get<double>(), 0.0) << row.dump();
    if (row["bytes"].get<uint64_t>() > 0) {
      EXPECT_GT(row["gb_s"].get<double>(), 0.0) << row.dump();
    }
  }
  for (const char* k : {"empty dispatch + barrier", "grid sync", "stream, ordinary grid",
                        "stream, resident grid", "stream, 8 stages + syncs"})
    EXPECT_GT(kinds[k], 0) << k << "\n" << r.out;
}

// --gemm: the prefill GEMM at prefill-like shapes (small ones on a CPU device), each row with its
// shape, a positive time and throughput; the cooperative-matrix ceiling rows appear only where the
// device has them: the KHR ones ("mma peak (KHR), ...") exactly where the JSON says coopmat_khr,
// which lavapipe (no VK_KHR_cooperative_matrix) never does.
TEST(Bench, GemmMeasuresTheTiledGemm) {
  const auto r = sh(std::string(VKLLM_EXE) + " bench --gemm -r 1 --output json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  int gemms = 0, khr = 0;
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["us"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["tops"].get<double>(), 0.0) << row.dump();
    const auto what = row["what"].get<std::string>();
    if (what.rfind("linear_8da4w_mm", 0) == 0) {
      ++gemms;
      EXPECT_GT(row["M"].get<int>() * row["N"].get<int>() * row["K"].get<int>(), 0) << row.dump();
    }
    khr += what.rfind("mma peak (KHR), ", 0) == 0;
  }
  EXPECT_GE(gemms, 2) << r.out;
  const bool has_khr = j["coopmat_khr"].get<bool>();
  if (has_khr)
    EXPECT_GE(khr, 1) << r.out;
  else
    EXPECT_EQ(khr, 0) << r.out;
  if (j["device"].get<std::string>().find("llvmpipe") != std::string::npos) {
    EXPECT_FALSE(has_khr) << r.out;
  }
  EXPECT_NE(sh(std::string(VKLLM_EXE) + " bench --gemm --physics").rc, 0);
}

// --matvec: the decode mat-vec kernels (small shapes on a CPU device), each row with a positive
// time; every streamed linear_8da4w_mv's output with matvec_decode's bits, and every
// linear_q4w_mv's within NMSE 1e-10 of the old linear_q4w's, on the bench's random inputs.
TEST(Bench, MatvecComparesTheDecodeKernels) {
  const auto r = sh(std::string(VKLLM_EXE) + " bench --matvec -r 1 --output json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  int old_rows = 0, mv_rows = 0, q4_rows = 0, q4_mv_rows = 0;
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["us"].get<double>(), 0.0) << row.dump();
    EXPECT_TRUE(row["agrees"].get<bool>()) << row.dump();
    const auto k = row["kernel"].get<std::string>();
    old_rows += k == "linear_8da4w matvec_decode";
    mv_rows += k.rfind("linear_8da4w_mv", 0) == 0;
    q4_rows += k == "linear_q4w (old)";
    q4_mv_rows += k.rfind("linear_q4w_mv", 0) == 0;
  }
  EXPECT_GE(old_rows, 2) << r.out;
  EXPECT_GE(mv_rows, old_rows) << r.out;  // (a GPU adds a sweep for the lm_heads)
  EXPECT_EQ(q4_rows, old_rows) << r.out;
  EXPECT_EQ(q4_mv_rows, q4_rows) << r.out;
  EXPECT_NE(sh(std::string(VKLLM_EXE) + " bench --matvec --gemm").rc, 0);
}

TEST(Bench, BadArgumentsFail) {
  const std::string exe = VKLLM_EXE;
  EXPECT_NE(sh(exe + " bench").rc, 0);  // no model and no --physics
  EXPECT_NE(sh(exe + " bench -m " + artifact() + " --output xml").rc, 0);
  EXPECT_NE(sh(exe + " bench -m /nonexistent.vkllm").rc, 0);
  EXPECT_NE(sh(exe + " bench -m " + artifact() + " --backend cpu -p 100000").rc, 0);
}
