// Runner tests spawn the built `vkllm` binary (VKLLM_EXE) as a real child process, with stdout and
// stderr captured separately. The shared model: the tiny Qwen3 twin of `vkllm synth` (real
// tokenizer and vocabulary) and its non-quantized artifact (context 64), made once per build.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vkllm::test {

struct Proc {
  int code = -1;  // exit status; -1 when killed
  std::string out, err;
  std::vector<std::string> err_lines() const;
};

// `vkllm args...`; env entries set (or with nullopt unset) variables in the child.
Proc run_vkllm(const std::vector<std::string>& args,
               const std::map<std::string, std::optional<std::string>>& env = {},
               double timeout_s = 600);

struct SharedTwin {
  std::string dir;            // the tiny-qwen3 Hugging Face folder
  std::string artifact;       // its non-quantized artifact, --max-context 64
  std::string artifact_long;  // the same with --max-context 1024 (long replies: vkllm chat)
};
// Made under the build tree on first use (a file lock serializes concurrent tests); remade when the
// vkllm binary changes.
const SharedTwin& shared_twin();

// A fresh temporary directory, removed at exit of the test process.
std::string scratch_dir();

// The Vulkan environment of the tests: the Khronos validation layer on (docs/design.md section 3).
std::map<std::string, std::optional<std::string>> validated_env();

// validated_env() with the selftest's verdict cache under `cache` (XDG_CACHE_HOME).
inline std::map<std::string, std::optional<std::string>> selftest_env(const std::string& cache) {
  auto env = validated_env();
  env["XDG_CACHE_HOME"] = cache;
  return env;
}

}  // namespace vkllm::test
