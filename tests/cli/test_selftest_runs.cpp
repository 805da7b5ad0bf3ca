// `vkllm selftest` through the binary (src/selftest/selftest.h): green on this device with every
// variant listed and the verdict cached; red, naming exactly the variants that use a kernel, when
// that kernel is corrupted with the test switch. Label heavy: it runs in the dev build
// (scripts/test.sh). Each is a whole selftest or two (125 s each under the sanitizers); the same
// selftest runs sanitized in selftest_lavapipe_128_bits and _512_bits (every variant, at 4 and 16
// lanes; tests/cli/CMakeLists.txt), and the corruption switch in
// VerifyAgree.PassesOnTheTwinAndFailsWithABrokenKernel.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_fixture.h"
#include "testutil/files.h"

using namespace vkllm::test;
using nlohmann::json;

TEST(SelftestCli, PassesOnThisDeviceListsEveryVariantAndCachesTheVerdict) {
  const std::string cache = scratch_dir();
  const Proc p = run_vkllm({"selftest", "--json", "--steps", "4"}, selftest_env(cache));
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  const json j = json::parse(p.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_TRUE(j["wrong"].empty());
  std::set<std::string> paths;
  size_t toys = 0;
  for (const auto& v : j["variants"]) {
    EXPECT_TRUE(v["ok"].get<bool>()) << v.dump();
    paths.insert(v["path"].get<std::string>());
    if (v["path"] == "default" && v["name"] != "subgroup layout") {
      ++toys;
      EXPECT_EQ(v["steps"], 4) << v.dump();
      EXPECT_LE(v["worst_logits_nmse"].get<double>(), v["max_logits_nmse"].get<double>());
    }
  }
  EXPECT_EQ(toys, 5u);  // every storage combination (lavapipe has 16-bit storage)
  EXPECT_TRUE(paths.count("what the kernels assume")) << "the subgroup probe";
  EXPECT_TRUE(paths.count("unfused"));
  EXPECT_TRUE(paths.count("prefill in chunks of 4"));
  EXPECT_EQ(paths.count("portable int8 dot"), j["int8_dot_product"].get<bool>() ? 1u : 0u);
  EXPECT_EQ(paths.count("prefill without cooperative matrices"),
            j["cooperative_matrix"].get<bool>() ? 1u : 0u);
  const json v = json::parse(read_file(j["verdict"].get<std::string>()));
  EXPECT_EQ(v["device"], j["device"]);
  EXPECT_TRUE(v["wrong"].empty());

  // The table form: one PASS line per variant and the summary.
  const Proc t = run_vkllm({"selftest", "--steps", "2", "--no-cache"}, selftest_env(cache));
  ASSERT_EQ(t.code, 0) << t.err;
  size_t pass = 0;
  for (size_t at = 0; (at = t.out.find("\nPASS  ", at)) != std::string::npos; ++at) ++pass;
  EXPECT_EQ(pass + (t.out.rfind("PASS  ", 0) == 0), j["variants"].size()) << t.out;
  EXPECT_NE(t.out.find(" variants pass on "), std::string::npos) << t.out;
}

TEST(SelftestCli, ACorruptedKernelFailsExactlyTheVariantsThatUseIt) {
  const std::string cache = scratch_dir();
  auto env = selftest_env(cache);
  env["VKLLM_TEST_CORRUPT_OP"] = "linear_8da4w";
  const Proc p = run_vkllm({"selftest", "--json", "--steps", "2"}, env);
  EXPECT_EQ(p.code, 1) << p.err;
  const json j = json::parse(p.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  size_t failed = 0;
  for (const auto& v : j["variants"]) {
    const bool uses = v["name"].get<std::string>().find("8da4w") != std::string::npos;
    EXPECT_EQ(v["ok"].get<bool>(), !uses) << v.dump();
    if (!uses) continue;
    ++failed;
    EXPECT_NE(v["reason"].get<std::string>().find("NMSE"), std::string::npos) << v.dump();
  }
  EXPECT_GE(failed, 4u);
  // Every path of the corrupted op failed alike: none is singled out as the wrong one.
  EXPECT_TRUE(j["wrong"].empty()) << j["wrong"].dump();
}
