// The helpers of the `vkllm bench` tests (test_bench.cpp, test_bench_vulkan.cpp): a shell command's
// exit status and stdout, and the tiny Qwen3 twin's int4 weight-only artifact, made once a process.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "testutil/tiny_checkpoint.h"

namespace bench_test {

struct Out {
  int rc;
  std::string out;
};

inline Out sh(const std::string& cmd) {
  Out o{0, ""};
  FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) o.out.append(buf.data(), n);
  o.rc = pclose(f);
  return o;
}

inline const std::string& artifact() {
  static const std::string path = [] {
    const std::string dir = vkllm::testutil::temp_dir("bench");
    const std::string exe = VKLLM_EXE;
    EXPECT_EQ(sh(exe + " synth --preset tiny-qwen3 -q -o " + dir + "/twin --tokenizer-dir " +
                 VKLLM_SOURCE_DIR + "/.fixtures/qwen3")
                  .rc,
              0);
    EXPECT_EQ(sh(exe + " export " + dir + "/twin --recipe quantized-int4-weight-only -q -o " + dir +
                 "/m.vkllm")
                  .rc,
              0);
    return dir + "/m.vkllm";
  }();
  return path;
}

}  // namespace bench_test
