// Child processes for the e2e matrix: every stage runs as `vkllm <verb> ...` with its stdout and
// stderr in separate log files, so the logs are the real streams and a crash stays contained.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vkllm {

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the program path (no PATH search)
  // Environment changes on top of the parent's: a value sets the variable, nullopt unsets it.
  std::map<std::string, std::optional<std::string>> env;
  std::string stdout_path, stderr_path;  // empty: /dev/null
  double timeout_s = 0;                  // 0: wait forever; else SIGKILL the child's group
};

struct ChildResult {
  int exit_code = -1;  // the exit status, -1 when the child did not exit normally
  int signal = 0;      // the signal that ended it (timeouts end with SIGKILL)
  bool timed_out = false;
  double seconds = 0;
  bool ok() const { return exit_code == 0; }
  // "exit 0", "exit 3", "killed by signal 11 (Segmentation fault)", "timed out after 60 s"
  std::string describe() const;
};

// Runs the child to completion. Throws Error when it cannot be started (fork, log files).
ChildResult run_child(const ChildSpec& spec);

// A long-running helper process (the loopback hub): started in its own process group, stopped
// (SIGTERM, then SIGKILL) by stop() or the destructor.
class BackgroundChild {
 public:
  explicit BackgroundChild(const ChildSpec& spec);
  ~BackgroundChild();
  BackgroundChild(const BackgroundChild&) = delete;
  BackgroundChild& operator=(const BackgroundChild&) = delete;
  bool running();
  void stop();
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

// The path of the running executable (/proc/self/exe).
std::string self_exe_path();

// The last non-empty line of a text (a child's one-line error), at most max_chars long.
std::string last_line(const std::string& text, size_t max_chars = 300);

}  // namespace vkllm
