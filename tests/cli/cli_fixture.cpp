#include "cli_fixture.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "e2e/process.h"
#include "testutil/files.h"

namespace vkllm::test {

namespace fs = std::filesystem;

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "vkllm-cli-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string binary_stamp() {
  struct stat st {};
  ::stat(VKLLM_EXE, &st);
  return std::to_string(st.st_size) + "-" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

std::vector<std::string> Proc::err_lines() const {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

std::string scratch_dir() {
  static Scratch s;
  static int n = 0;
  const std::string d = s.path + "/" + std::to_string(n++);
  fs::create_directories(d);
  return d;
}

Proc run_vkllm(const std::vector<std::string>& args,
               const std::map<std::string, std::optional<std::string>>& env, double timeout_s) {
  const std::string d = scratch_dir();
  ChildSpec c;
  c.argv = {VKLLM_EXE};
  c.argv.insert(c.argv.end(), args.begin(), args.end());
  c.env = env;
  c.stdout_path = d + "/stdout";
  c.stderr_path = d + "/stderr";
  c.timeout_s = timeout_s;
  const ChildResult r = run_child(c);
  return Proc{r.exit_code, read_file(c.stdout_path), read_file(c.stderr_path)};
}

std::map<std::string, std::optional<std::string>> validated_env() {
  return {{"VKLLM_VALIDATION", "1"}};
}

const SharedTwin& shared_twin() {
  static SharedTwin t = [] {
    const std::string root = std::string(VKLLM_BINARY_DIR) + "/tests/cli/shared-twin";
    fs::create_directories(root);
    SharedTwin s{root + "/tiny-qwen3", root + "/tiny-qwen3-fp32-ctx64.vkllm",
                 root + "/tiny-qwen3-fp32-ctx1024.vkllm"};
    const int fd = ::open((root + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + root);
    const std::string stamp = binary_stamp(), stamp_file = root + "/.made-by";
    if (read_file(stamp_file) != stamp) {
      fs::remove(stamp_file);
      Proc a = run_vkllm({"synth", "--preset", "tiny-qwen3", "-o", s.dir, "-q"});
      Proc b = run_vkllm({"export", s.dir, "--recipe", "non-quantized", "--max-context", "64", "-o",
                          s.artifact, "-q"});
      Proc c = run_vkllm({"export", s.dir, "--recipe", "non-quantized", "--max-context", "1024",
                          "-o", s.artifact_long, "-q"});
      if (a.code != 0 || b.code != 0 || c.code != 0)
        throw std::runtime_error("shared twin: synth/export failed: " + a.err + b.err + c.err);
      std::ofstream(stamp_file) << stamp;
    }
    ::close(fd);
    return s;
  }();
  return t;
}

}  // namespace vkllm::test
