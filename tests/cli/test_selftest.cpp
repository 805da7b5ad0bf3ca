// `vkllm selftest` through the binary (src/selftest/selftest.h): the caller's path switches are
// refused. The whole selftest runs, green and with a corrupted kernel: test_selftest_runs.cpp
// (label heavy); sanitized, selftest_lavapipe_128_bits and _512_bits (tests/cli/CMakeLists.txt).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;

TEST(SelftestCli, RejectsTheCallersPathSwitches) {
  auto env = selftest_env(scratch_dir());
  env["VKLLM_NO_INT_DOT"] = "1";
  const Proc p = run_vkllm({"selftest"}, env);
  EXPECT_NE(p.code, 0);
  ASSERT_EQ(p.err_lines().size(), 1u) << p.err;
  EXPECT_NE(p.err.find("VKLLM_NO_INT_DOT"), std::string::npos) << p.err;
}
