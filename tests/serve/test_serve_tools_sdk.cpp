// Tool calling with the openai SDK against `vkllm serve` (tools.test.mjs). Label heavy: it runs in
// the dev build (scripts/test.sh). Its constrained replies of up to 96 tokens took 144 s under the
// sanitizers and 5 s in the dev build; the code under them is reached sanitized by test_serve_tools
// (request checks, the reply parser of every family, the streamed calls through the SDK's
// accumulator), test_grammar (the constrained decoding) and test_serve's other SDK tests.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "../cli/cli_fixture.h"
#include "serve_fixture.h"

using namespace vkllm::test;

// Tool calling with the openai SDK (tools.test.mjs): the long-context twin, since the tool
// instructions alone outgrow 64 tokens.
TEST(Serve, ToolCallingWithTheOpenAISdk) {
  const SharedTwin& t = shared_twin();
  ServeProc s(t.artifact_long);
  const NodeResult r = run_node(
      "tools.test.mjs", {{"VKLLM_URL", s.url()},
                         {"VKLLM_MODEL", std::filesystem::path(t.artifact_long).stem().string()},
                         {"VKLLM_TWIN", t.dir}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
}
