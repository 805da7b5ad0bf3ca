// Structured output (response_format json_schema / json_object) end to end: `vkllm serve` on the
// tiny Qwen3 twin, the official OpenAI SDK as the client and ajv as the validator
// (structured.test.mjs): a seeded table of random schemas, greedy and sampled, streamed and not.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "../cli/cli_fixture.h"
#include "serve_fixture.h"

using namespace vkllm::test;

TEST(ServeStructured, RandomSchemasValidateWithAjv) {
  const std::string art = shared_twin().artifact_long;
  ServeProc s(art);
  const auto t0 = std::chrono::steady_clock::now();
  const NodeResult r = run_node("structured.test.mjs",
                                {{"VKLLM_URL", s.url()},
                                 {"VKLLM_MODEL", std::filesystem::path(art).stem().string()},
                                 {"VKLLM_SCHEMAS", "50"},
                                 {"VKLLM_MAX_TOKENS", "96"}},
                                600);
  std::printf("%s", r.out.c_str());
  std::printf("structured.test.mjs: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
}
