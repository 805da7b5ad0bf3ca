#include "catalogue_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "export/exporter.h"
#include "hf/synth.h"
#include "testutil/tiny_checkpoint.h"

namespace vkllm::catalogue {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void copy_dir(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    fs::copy_file(e.path(), to + "/" + e.path().filename().string(),
                  fs::copy_options::overwrite_existing);
}

TempDir::TempDir() {
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t && *t ? t : "/tmp") + "/vkllm-bad-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path = tmpl;
  ::chmod(path.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
  for (const auto& e : fs::recursive_directory_iterator(path, ec))
    if (e.is_directory(ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path, ec);
}

pid_t spawn_vkllm(const std::vector<std::string>& args, const RunOptions& o,
                  const std::string& io_dir) {
  const std::string out = io_dir + "/stdout", err = io_dir + "/stderr";
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid > 0) return pid;
  const int in = ::open(o.stdin_path.empty() ? "/dev/null" : o.stdin_path.c_str(), O_RDONLY);
  const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || fo < 0 || fe < 0) ::_exit(126);
  ::dup2(in, 0);
  ::dup2(fo, 1);
  ::dup2(fe, 2);
  for (const auto& k : o.unset_env) ::unsetenv(k.c_str());
  for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
  if (o.file_size_limit) {
    ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG, as on a full disk
    struct rlimit rl {
      o.file_size_limit, o.file_size_limit
    };
    ::setrlimit(RLIMIT_FSIZE, &rl);
  }
  if (o.in_child) o.in_child();
  std::vector<char*> argv{const_cast<char*>(VKLLM_EXE)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(VKLLM_EXE, argv.data());
  ::_exit(127);
}

RunResult wait_vkllm(pid_t pid, const std::string& io_dir, int timeout_s) {
  RunResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int st = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0) throw std::runtime_error("waitpid failed");
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      r.err = "(timed out)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.out = read_file(io_dir + "/stdout");
  r.err += read_file(io_dir + "/stderr");
  return r;
}

RunResult run_vkllm(const std::vector<std::string>& args, const RunOptions& o) {
  TempDir io;
  return wait_vkllm(spawn_vkllm(args, o, io.path), io.path, o.timeout_s);
}

std::vector<std::string> our_stderr_lines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string l; std::getline(in, l);)
    if (l.rfind("WARNING: lavapipe is not a conformant", 0) != 0) lines.push_back(l);
  return lines;
}

std::string check_refusal(const RunResult& r, int exit_code, const std::string& message) {
  std::string why;
  if (r.signal) why += fmt::format("killed by signal {}; ", r.signal);
  if (r.exit_code != exit_code)
    why += fmt::format("exit code {} (want {}); ", r.exit_code, exit_code);
  for (const char* bad : {"internal error", "Sanitizer", "runtime error:", "terminate called"})
    if (r.err.find(bad) != std::string::npos) why += fmt::format("stderr shows '{}'; ", bad);
  const auto lines = our_stderr_lines(r.err);
  if (lines.size() != 1)
    why += fmt::format("{} stderr lines (want exactly one); ", lines.size());
  else if (lines[0].rfind("vkllm", 0) != 0)
    why += "the stderr line does not start with 'vkllm'; ";
  if (r.err.find(message) == std::string::npos) why += fmt::format("stderr lacks '{}'; ", message);
  if (!why.empty()) why += "stderr was:\n" + r.err;
  return why;
}

std::string check_no_output(const std::string& dir, const std::string& name) {
  std::string why;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f == name || f.rfind(name + ".tmp-", 0) == 0) why += fmt::format("{} exists; ", f);
  }
  return why;
}

std::string tiny_checkpoint(const std::string& dir) {
  testutil::write_tiny_checkpoint(dir, Arch::Llama);
  write_file(dir + "/tokenizer.json", testutil::tiny_tokenizer_json());
  return dir;
}

void rewrite_safetensors(const std::string& path,
                         const std::function<void(std::string& header_json)>& edit,
                         const std::function<void(std::string& data)>& patch_data) {
  const std::string b = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  std::string header = b.substr(8, n), data = b.substr(8 + n);
  edit(header);
  if (patch_data) patch_data(data);
  const uint64_t m = header.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  write_file(path, out + header + data);
}

const Fixtures& fixtures() {
  static const Fixtures f = [] {
    Fixtures x;
    const std::string dir = std::string(VKLLM_BINARY_DIR) + "/bad_inputs";
    x.twin = dir + "/tiny-qwen3";
    x.artifact = dir + "/tiny-qwen3.vkllm";
    fs::create_directories(dir);
    // Made once per build of this test binary; concurrent test processes wait on the lock.
    struct stat self {};
    ::stat("/proc/self/exe", &self);
    const std::string stamp = fmt::format("{}.{}", self.st_mtim.tv_sec, self.st_size);
    const int lock = ::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
    ::flock(lock, LOCK_EX);
    if (read_file(dir + "/.stamp") != stamp) {
      fs::remove_all(x.twin);
      fs::remove(x.artifact);
      SynthOptions so;
      so.preset = "tiny-qwen3";
      so.out_dir = x.twin;
      so.threads = 2;
      so.tokenizer_dir = std::string(VKLLM_SOURCE_DIR) + "/.fixtures/qwen3";
      synth_write(so);
      RecipeOptions ro;
      ro.recipe = "quantized-8da4w-fp16-embedding";
      export_checkpoint(x.twin, x.artifact, ro);
      write_file(dir + "/.stamp", stamp);
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return x;
  }();
  return f;
}

}  // namespace vkllm::catalogue
