// `vkllm serve` as its tests see it: the built binary started as a child process on a free port of
// 127.0.0.1 (--port 0; the port read from its "serving ... on http://HOST:PORT" line), stopped
// with a signal, its exit status and stderr kept; and the Node clients of tests/serve run as
// child processes (the openai SDK, playwright-core: pinned in package-lock.json).
#pragma once
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace vkllm::test {

class ServeProc {
 public:
  // Starts `vkllm serve -m artifact --port 0 --backend B extra...` (B: `backend`, else
  // serve_backend()) under the Vulkan validation layer (VKLLM_VALIDATION=1); fails the test
  // (throws) when it does not announce its port within 120 s.
  ServeProc(const std::string& artifact, const std::vector<std::string>& extra = {},
            const std::string& backend = "");
  ~ServeProc();
  ServeProc(const ServeProc&) = delete;
  ServeProc& operator=(const ServeProc&) = delete;
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits (up to timeout_s) for the exit; returns the exit code (-1: a signal).
  int stop(int sig, double timeout_s = 60);
  std::string err() const;  // its stderr so far
  long rss_kb() const;      // VmRSS of the running server

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

struct NodeResult {
  int code = -1;
  std::string out, err;
};
// `node tests/serve/SCRIPT` with env set; fails the calling test when node or the pinned
// packages are missing (scripts/setup.sh installs them).
NodeResult run_node(const std::string& script, const std::map<std::string, std::string>& env,
                    double timeout_s = 300);

// The backend the tests' servers run on: $VKLLM_SERVE_BACKEND, else "cpu" (lavapipe decodes the
// twin at 1-5 tokens/s on CI's two cores: the suites would take minutes; the HTTP, queue and
// cache logic does not depend on the backend).
std::string serve_backend();

// The greedy reply of `vkllm run -m artifact --chat -p question -n n` (stdout) on serve_backend().
std::string greedy_chat_reply(const std::string& artifact, const std::string& question, int n);

}  // namespace vkllm::test
