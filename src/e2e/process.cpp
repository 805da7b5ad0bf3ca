#include "e2e/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace vkllm {

namespace {

using Clock = std::chrono::steady_clock;

int open_log(const std::string& path) {
  const int fd = path.empty()
                     ? ::open("/dev/null", O_WRONLY | O_CLOEXEC)
                     : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create the log file: {}", path, std::strerror(errno));
  return fd;
}

// fork + exec with the logs opened by the parent (so a bad path is an Error, not a silent child
// failure). The child gets its own process group so that a timeout kills what it started too, and
// is killed when its parent dies.
int spawn(const ChildSpec& spec) {
  if (spec.argv.empty()) fail("run_child: empty argv");
  const int out = open_log(spec.stdout_path);
  const int err = open_log(spec.stderr_path);
  std::vector<char*> args;
  for (const auto& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    ::close(err);
    fail("cannot start {}: fork failed: {}", spec.argv[0], std::strerror(errno));
  }
  if (pid == 0) {
    // Dies with its parent (an interrupted matrix leaves no stage or hub behind).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::setpgid(0, 0);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    for (const auto& [k, v] : spec.env) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
    ::execv(args[0], args.data());
    const std::string msg = "cannot execute " + spec.argv[0] + ": " + std::strerror(errno) + "\n";
    ssize_t w = ::write(STDERR_FILENO, msg.data(), msg.size());
    (void)w;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent: no race with an early kill
  ::close(out);
  ::close(err);
  return pid;
}

void fill_status(int st, ChildResult& r) {
  if (WIFEXITED(st)) {
    r.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    r.signal = WTERMSIG(st);
  }
}

}  // namespace

std::string ChildResult::describe() const {
  if (timed_out) return fmt::format("timed out after {:.0f} s", seconds);
  if (exit_code >= 0) return fmt::format("exit {}", exit_code);
  return fmt::format("killed by signal {} ({})", signal, ::strsignal(signal));
}

ChildResult run_child(const ChildSpec& spec) {
  const auto t0 = Clock::now();
  const int pid = spawn(spec);
  ChildResult r;
  for (int sleep_ms = 1;; sleep_ms = std::min(sleep_ms * 2, 50)) {
    int st = 0;
    const int w = ::waitpid(pid, &st, WNOHANG);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (w == pid) {
      fill_status(st, r);
      break;
    }
    if (w < 0 && errno != EINTR) fail("waitpid failed: {}", std::strerror(errno));
    if (spec.timeout_s > 0 && r.seconds > spec.timeout_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      fill_status(st, r);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  return r;
}

BackgroundChild::BackgroundChild(const ChildSpec& spec) : pid_(spawn(spec)) {}

BackgroundChild::~BackgroundChild() {
  stop();
}

bool BackgroundChild::running() {
  if (pid_ <= 0) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void BackgroundChild::stop() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {  // up to 2 s, then SIGKILL
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid_, SIGKILL);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
}

std::string self_exe_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) fail("cannot find the running executable (/proc/self/exe): {}", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::string last_line(const std::string& text, size_t max_chars) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) --end;
  const size_t nl = text.rfind('\n', end == 0 ? 0 : end - 1);
  const size_t begin = nl == std::string::npos ? 0 : nl + 1;
  std::string line = text.substr(begin, end - begin);
  if (line.size() > max_chars) line = line.substr(0, max_chars) + "...";
  return line;
}

}  // namespace vkllm
