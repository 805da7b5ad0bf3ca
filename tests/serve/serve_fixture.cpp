#include "serve_fixture.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "../cli/cli_fixture.h"
#include "e2e/process.h"
#include "testutil/files.h"

namespace vkllm::test {

namespace fs = std::filesystem;

namespace {}  // namespace

ServeProc::ServeProc(const std::string& artifact, const std::vector<std::string>& extra,
                     const std::string& backend)
    : dir_(scratch_dir()) {
  std::vector<std::string> args = {
      VKLLM_EXE, "serve", "-m",        artifact,
      "--port",  "0",     "--backend", backend.empty() ? serve_backend() : backend};
  args.insert(args.end(), extra.begin(), extra.end());
  const std::string err_path = dir_ + "/stderr";
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setenv("VKLLM_VALIDATION", "1", 1);
    const int fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const std::regex announce(R"(serving .* on http://[^:]+:(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    const std::string e = read_file(err_path);
    if (std::regex_search(e, m, announce)) {
      port_ = std::stoi(m[1]);
      return;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("vkllm serve exited before listening: " + e);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("vkllm serve did not announce its port: " + read_file(err_path));
}

ServeProc::~ServeProc() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

int ServeProc::stop(int sig, double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ServeProc::err() const {
  return read_file(dir_ + "/stderr");
}

long ServeProc::rss_kb() const {
  std::istringstream in(read_file("/proc/" + std::to_string(pid_) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

NodeResult run_node(const std::string& script, const std::map<std::string, std::string>& env,
                    double timeout_s) {
  const std::string here = std::string(VKLLM_SOURCE_DIR) + "/tests/serve";
  if (!fs::exists(here + "/node_modules/openai") ||
      !fs::exists(here + "/node_modules/playwright-core")) {
    ADD_FAILURE() << "tests/serve/node_modules is missing: scripts/setup.sh installs the pinned "
                     "npm packages (npm ci in tests/serve)";
    return {};
  }
  const std::string d = scratch_dir();
  ChildSpec c;
  c.argv = {"/usr/bin/env", "node", here + "/" + script};
  for (const auto& [k, v] : env) c.env[k] = v;
  c.stdout_path = d + "/stdout";
  c.stderr_path = d + "/stderr";
  c.timeout_s = timeout_s;
  const ChildResult r = run_child(c);
  return NodeResult{r.exit_code, read_file(c.stdout_path), read_file(c.stderr_path)};
}

std::string serve_backend() {
  const char* b = std::getenv("VKLLM_SERVE_BACKEND");
  return b && *b ? b : "cpu";
}

std::string greedy_chat_reply(const std::string& artifact, const std::string& question, int n) {
  const Proc r = run_vkllm({"run", "-m", artifact, "--backend", serve_backend(), "--chat", "-p",
                            question, "-n", std::to_string(n), "--temperature", "0", "--no-stats"});
  if (r.code != 0) throw std::runtime_error("vkllm run failed: " + r.err);
  return r.out;
}

}  // namespace vkllm::test
