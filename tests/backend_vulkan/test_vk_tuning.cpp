// The one reader of the backend's VKLLM_* variables (vk_tuning.cpp): each switch lands in its
// typed field, malformed values and removed switches fail with one line, and describe() names
// exactly the fields that differ from the defaults. (The parser is the one place a test sets the
// environment; every other test sets Tuning fields.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vk_tuning.h"
#include "backend/vulkan/vulkan_options.h"
#include "core/error.h"

namespace vkllm::test {
namespace {

// Sets the variables for one read_environment call and unsets them after.
VulkanOptions read_with(const std::vector<std::pair<const char*, const char*>>& vars) {
  for (const auto& [k, v] : vars) ::setenv(k, v, 1);
  VulkanOptions o;
  try {
    read_environment(o);
  } catch (...) {
    for (const auto& [k, v] : vars) ::unsetenv(k);
    throw;
  }
  for (const auto& [k, v] : vars) ::unsetenv(k);
  return o;
}

std::string error_of(const std::vector<std::pair<const char*, const char*>>& vars) {
  try {
    read_with(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VulkanTuning, DefaultsDescribeThemselves) {
  EXPECT_EQ(Tuning{}.describe(), "defaults");
  const VulkanOptions o = read_with({});
  EXPECT_EQ(o.tuning.describe(), "defaults");
  EXPECT_FALSE(o.no_fusion);
}

TEST(VulkanTuning, EachSwitchLandsInItsField) {
  const VulkanOptions o = read_with({{"VKLLM_MATVEC_PARTS", "auto"},
                                     {"VKLLM_MV", "0"},
                                     {"VKLLM_GEMM_TILE", "64"},
                                     {"VKLLM_GEMM_FEW_ROWS_TO", "32"},
                                     {"VKLLM_NO_FUSE", "tail,,prefill"},
                                     {"VKLLM_CHAIN_GROUPS", "-1"},
                                     {"VKLLM_CHAIN_ATT_UNTIL", "40"},
                                     {"VKLLM_DECODE_BATCH", "1"},
                                     {"VKLLM_CONSTRAINED_AHEAD", "3"},
                                     {"VKLLM_FENCE_SPIN", "0"},
                                     {"VKLLM_NO_INT_DOT", "0"},
                                     {"VKLLM_NO_FUSION", "1"}});
  EXPECT_EQ(o.tuning.matvec_parts, 0u);
  EXPECT_EQ(o.tuning.mv, 0);
  EXPECT_EQ(o.tuning.gemm_tile, 64u);
  EXPECT_EQ(o.tuning.gemm_few_rows_to, 32u);
  EXPECT_EQ(o.tuning.no_fuse, (std::vector<std::string>{"tail", "prefill"}));
  ASSERT_TRUE(o.tuning.chain_groups.has_value());
  EXPECT_EQ(*o.tuning.chain_groups, -1);
  EXPECT_EQ(o.tuning.chain_att_until.value_or(0), 40);
  EXPECT_EQ(o.tuning.decode_batch, 1u);
  EXPECT_EQ(o.tuning.constrained_ahead, 3u);
  EXPECT_EQ(o.tuning.fence_spin, 0);
  // VKLLM_NO_INT_DOT=0 keeps the path on but records the user's choice (over a selftest verdict).
  EXPECT_FALSE(o.no_int_dot);
  EXPECT_TRUE(o.tuning.chose_int_dot);
  EXPECT_TRUE(o.no_fusion);
  EXPECT_TRUE(o.tuning.chose_fusion);
  const std::string d = o.tuning.describe();
  for (const char* f :
       {"matvec_parts=0", "mv=0", "gemm_tile=64", "gemm_few_rows_to=32", "no_fuse=tail,prefill", "chain_groups=-1",
        "chain_att_until=40", "decode_batch=1", "constrained_ahead=3"})
    EXPECT_NE(d.find(f), std::string::npos) << f << " in " << d;
  EXPECT_EQ(d.find("chain_wg"), std::string::npos) << d;
}

// VKLLM_PIPELINE_CACHE: "0" (off) or a folder lands in the field as given; a field already set
// stays; unset, the field stays empty (the user's cache folder). It changes no kernel, so
// describe() leaves it out. (The variable's value in this process, if any, is put back after.)
TEST(VulkanTuning, PipelineCacheSwitch) {
  const char* was = std::getenv("VKLLM_PIPELINE_CACHE");
  const std::string saved = was ? was : "";
  ::unsetenv("VKLLM_PIPELINE_CACHE");
  EXPECT_EQ(read_with({}).tuning.pipeline_cache, "");
  EXPECT_EQ(read_with({{"VKLLM_PIPELINE_CACHE", "0"}}).tuning.pipeline_cache, "0");
  const VulkanOptions o = read_with({{"VKLLM_PIPELINE_CACHE", "/some/folder"}});
  EXPECT_EQ(o.tuning.pipeline_cache, "/some/folder");
  EXPECT_EQ(o.tuning.describe(), "defaults");
  ::setenv("VKLLM_PIPELINE_CACHE", "0", 1);
  VulkanOptions set;
  set.tuning.pipeline_cache = "/tests/own";
  read_environment(set);
  EXPECT_EQ(set.tuning.pipeline_cache, "/tests/own");
  if (was)
    ::setenv("VKLLM_PIPELINE_CACHE", saved.c_str(), 1);
  else
    ::unsetenv("VKLLM_PIPELINE_CACHE");
}

TEST(VulkanTuning, MalformedValuesFailWithOneLine) {
  for (const auto& [var, value] :
       std::vector<std::pair<const char*, const char*>>{{"VKLLM_GEMM_TILE", "48"},
                                                        {"VKLLM_GEMM_TILE", "64x"},
                                                        {"VKLLM_MATVEC_PARTS", "3"},
                                                        {"VKLLM_CHAIN_WG", "128"},
                                                        {"VKLLM_DECODE_BATCH", "0"},
                                                        {"VKLLM_CONSTRAINED_AHEAD", "0"},
                                                        {"VKLLM_FENCE_SPIN", "2"},
                                                        {"VKLLM_CHAIN_DEAL", "2"},
                                                        {"VKLLM_VK_MEMORY_BUDGET", "lots"}}) {
    const std::string e = error_of({{var, value}});
    EXPECT_NE(e.find(var), std::string::npos) << var << "=" << value << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(VulkanTuning, RemovedSwitchesAreRefusedByName) {
  for (const char* var : {"VKLLM_CHAIN_DEPTH", "VKLLM_ATT_ORDER", "VKLLM_GEMM_KC"}) {
    const std::string e = error_of({{var, "1"}});
    EXPECT_NE(e.find(var), std::string::npos) << e;
    EXPECT_NE(e.find("no longer"), std::string::npos) << e;
  }
}

// The wrong-result switches exist only in a measurement build; this test binary is one (the dev
// and asan presets), and a release build refuses them (read_environment's measure_switch).
TEST(VulkanTuning, MeasurementSwitchesNeedAMeasurementBuild) {
  const std::vector<std::pair<const char*, const char*>> vars = {{"VKLLM_TEST_CORRUPT_OP", "add"},
                                                                 {"VKLLM_GEMM_ABLATE", "3"}};
  if (kMeasureBuild) {
    const VulkanOptions o = read_with(vars);
    EXPECT_EQ(o.tuning.corrupt_op, "add");
    EXPECT_EQ(o.tuning.gemm_ablate, 3u);
  } else {
    EXPECT_NE(error_of(vars).find("measurement"), std::string::npos);
  }
}

}  // namespace
}  // namespace vkllm::test
