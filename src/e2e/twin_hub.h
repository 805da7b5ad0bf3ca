// Twin mode's hub: each cell's tiny twin is synthesized (`vkllm synth`) under the cell's model id
// and pinned revision in a folder the loopback test hub (tests/hub/fake_hub.py) serves, so the
// pull stage downloads, hash-checks and caches it exactly as it would the real checkpoint.
// The adapter cells (a `lora` column) publish their generated adapter on a LoopbackHub of their
// own, in both modes.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "e2e/cells.h"
#include "e2e/process.h"

namespace vkllm {

// tests/hub/fake_hub.py (under repo_root) serving the folders under `root` on 127.0.0.1; logs in
// logs_dir/<name>.stdout, .stderr, -requests.jsonl. Up once it has printed its port (it hashes
// every file first); stopped by the destructor. Throws Error with one line when it cannot start.
class LoopbackHub {
 public:
  LoopbackHub(const std::string& repo_root, const std::string& root, const std::string& logs_dir,
              const std::string& name);
  ~LoopbackHub();
  const std::string& endpoint() const { return endpoint_; }
  // The environment of a pull through this hub into `cache`.
  std::map<std::string, std::optional<std::string>> pull_env(const std::string& cache) const;

 private:
  std::unique_ptr<BackgroundChild> hub_;
  std::string endpoint_;
};

class TwinHub {
 public:
  // Synthesizes the twins of `cells` into out_dir/hub (one per model and revision), starts the
  // hub on 127.0.0.1 and empties out_dir/hf-cache. Logs go to logs_dir/setup/. Throws Error with
  // one line when a twin cannot be made or the hub does not start.
  TwinHub(const std::string& exe, const std::string& repo_root, const std::vector<Cell>& cells,
          const std::string& out_dir, const std::string& logs_dir,
          const std::function<void(const std::string&)>& progress);
  ~TwinHub();
  const std::string& endpoint() const { return hub_->endpoint(); }
  // The environment of a pull through this hub into the fresh cache.
  std::map<std::string, std::optional<std::string>> pull_env() const;

 private:
  std::unique_ptr<LoopbackHub> hub_;
  std::string cache_;
};

// Searches PATH for an executable; empty when absent.
std::string find_in_path(const std::string& name);

}  // namespace vkllm
