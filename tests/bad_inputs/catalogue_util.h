// Helpers of the bad-input catalogue (docs/robustness.md): run the built `vkllm` binary on a bad
// input and check the one thing every such run must deliver: the expected exit code, exactly one
// line on stderr that names the problem, no crash and no sanitizer report, and no output file
// (not even a partial or temporary one).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "testutil/files.h"

namespace vkllm::catalogue {

struct RunOptions {
  std::map<std::string, std::string> env;  // set in the child
  std::vector<std::string> unset_env;      // removed in the child
  std::string stdin_path;                  // empty: /dev/null
  uint64_t file_size_limit = 0;            // RLIMIT_FSIZE in the child (SIGXFSZ ignored)
  std::function<void()> in_child;          // runs in the child just before exec
  int timeout_s = 600;
};

struct RunResult {
  int exit_code = -1;  // -1 when a signal ended the process
  int signal = 0;
  std::string out, err;
};

// Starts VKLLM_EXE with `args`; stdout and stderr go to files under `io_dir`.
pid_t spawn_vkllm(const std::vector<std::string>& args, const RunOptions& o,
                  const std::string& io_dir);
RunResult wait_vkllm(pid_t pid, const std::string& io_dir, int timeout_s);
RunResult run_vkllm(const std::vector<std::string>& args, const RunOptions& o = {});

// Lines of stderr that are not ours: Mesa's lavapipe announces itself on every device creation.
std::vector<std::string> our_stderr_lines(const std::string& err);

// The checks of a refused input. Returns "" or what went wrong (for EXPECT_EQ(..., "")).
std::string check_refusal(const RunResult& r, int exit_code, const std::string& message);
// Nothing named `name` (or a temporary of it, "<name>.tmp-*") in `dir`.
std::string check_no_output(const std::string& dir, const std::string& name);

// A fresh empty directory, removed with its contents on destruction.
struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

using vkllm::test::read_file;
void write_file(const std::string& path, const std::string& bytes);
void copy_dir(const std::string& from, const std::string& to);

// Shared inputs, made once per build (under VKLLM_BINARY_DIR/bad_inputs, locked against
// concurrent test processes, remade when the test binary changes): the tiny Qwen3 twin of
// `vkllm synth` and its export with e2e cell 1's recipe (quantized-8da4w-fp16-embedding).
struct Fixtures {
  std::string twin;      // HF folder (config, generation config, safetensors, tokenizer files)
  std::string artifact;  // .vkllm
};
const Fixtures& fixtures();

// A small HF folder (testutil::write_tiny_checkpoint: Llama, vocab 300) with a small tokenizer.json
// that loads (testutil::tiny_tokenizer_json), for the export cases that break one file of it.
std::string tiny_checkpoint(const std::string& dir);

// Rewrites a safetensors file: `edit` changes the parsed header (tensor entries, metadata); the
// data section is kept byte for byte (patch_data may change it).
void rewrite_safetensors(const std::string& path,
                         const std::function<void(std::string& header_json)>& edit,
                         const std::function<void(std::string& data)>& patch_data = {});

}  // namespace vkllm::catalogue
