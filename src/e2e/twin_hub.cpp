#include "e2e/twin_hub.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/mapped_file.h"

namespace vkllm {

namespace fs = std::filesystem;

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream in(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

LoopbackHub::LoopbackHub(const std::string& repo_root, const std::string& root,
                         const std::string& logs_dir, const std::string& name) {
  if (repo_root.empty())
    fail("the loopback test hub (tests/hub/fake_hub.py) needs the vkllm source tree; run from it");
  const std::string script = repo_root + "/tests/hub/fake_hub.py";
  if (!fs::is_regular_file(script))
    fail("{}: the loopback test hub is missing (it runs from a vkllm source tree)", script);
  const std::string python = find_in_path("python3");
  if (python.empty()) fail("the loopback test hub needs python3 (apt-get install python3)");
  fs::create_directories(logs_dir);
  ChildSpec h;
  h.argv = {python, script, "--root", root, "--log", logs_dir + "/" + name + "-requests.jsonl"};
  h.stdout_path = logs_dir + "/" + name + ".stdout";
  h.stderr_path = logs_dir + "/" + name + ".stderr";
  hub_ = std::make_unique<BackgroundChild>(h);
  // The hub prints "PORT <n>" once it accepts connections (it first hashes every file).
  for (int i = 0; i < 1200; ++i) {
    std::string line;
    if (fs::exists(h.stdout_path)) line = read_text_file(h.stdout_path);
    if (line.rfind("PORT ", 0) == 0 && line.find('\n') != std::string::npos) {
      endpoint_ = "http://127.0.0.1:" + std::to_string(std::atoi(line.c_str() + 5));
      return;
    }
    if (!hub_->running())
      fail("the loopback hub exited: {}", last_line(read_text_file(h.stderr_path)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  fail("the loopback hub did not start within 60 s ({})", h.stderr_path);
}

LoopbackHub::~LoopbackHub() = default;

std::map<std::string, std::optional<std::string>> LoopbackHub::pull_env(
    const std::string& cache) const {
  return {{"HF_ENDPOINT", endpoint_},
          {"HF_HUB_CACHE", cache},
          {"HF_HUB_OFFLINE", std::nullopt},
          {"HF_TOKEN", std::nullopt}};
}

TwinHub::TwinHub(const std::string& exe, const std::string& repo_root,
                 const std::vector<Cell>& cells, const std::string& out_dir,
                 const std::string& logs_dir,
                 const std::function<void(const std::string&)>& progress) {
  if (!fs::is_regular_file(repo_root + "/tests/hub/fake_hub.py"))
    fail(
        "{}/tests/hub/fake_hub.py: the loopback test hub is missing (twin mode runs from a "
        "vkllm source tree)",
        repo_root);
  const std::string root = out_dir + "/hub";
  cache_ = out_dir + "/hf-cache";
  const std::string setup_logs = logs_dir + "/setup";
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::remove_all(cache_, ec);
  fs::create_directories(setup_logs);
  std::set<std::string> made;
  for (const Cell& c : cells) {
    const std::string dir = root + "/" + c.model + "@" + c.revision;
    if (!made.insert(dir).second) continue;
    const auto t0 = std::chrono::steady_clock::now();
    ChildSpec s;
    s.argv = {exe, "synth", "--preset", c.twin, "-o", dir, "--json"};
    s.stdout_path = setup_logs + "/synth-" + c.twin + ".stdout";
    s.stderr_path = setup_logs + "/synth-" + c.twin + ".stderr";
    s.timeout_s = 600;
    const ChildResult r = run_child(s);
    if (!r.ok())
      fail("twin setup: `vkllm synth --preset {}` failed ({}): {}", c.twin, r.describe(),
           last_line(read_text_file(s.stderr_path)));
    if (progress)
      progress(fmt::format(
          "synth {} as {} ({:.1f} s)", c.twin, c.spec(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  try {
    hub_ = std::make_unique<LoopbackHub>(repo_root, root, setup_logs, "hub");
  } catch (const Error& e) {
    fail("twin setup: {}", e.what());
  }
  if (progress) progress("loopback hub at " + hub_->endpoint() + " serving " + root);
}

TwinHub::~TwinHub() = default;

std::map<std::string, std::optional<std::string>> TwinHub::pull_env() const {
  return hub_->pull_env(cache_);
}

}  // namespace vkllm
