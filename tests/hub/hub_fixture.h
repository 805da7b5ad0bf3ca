// Test helpers for the hub client: temp dirs, tiny repos, the loopback fake hub, child processes.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testutil/files.h"  // read_file

namespace vkllm::test {

// A fresh 0755 directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
struct TempDir {
  TempDir();
  ~TempDir();
  std::string path;
};

void write_file(const std::string& path, const std::string& content);  // creates parents
void make_dirs(const std::string& path);
bool exists(const std::string& path);                         // without following symlinks
std::string read_link(const std::string& path);               // "" when not a symlink
std::vector<std::string> list_tree(const std::string& root);  // relative paths, sorted

// Writes a small model repo into root/<org>/<name>[@rev]: config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json and either model.safetensors (`shards` == 0) or an index
// plus that many shards. `seed` changes the weights; weights are about `kib` KiB in total.
struct RepoOptions {
  int shards = 0;
  unsigned seed = 1;
  size_t kib = 256;
  std::string config_note;                     // makes config.json differ between revisions
  std::vector<std::string> extra_index_files;  // extra weight_map targets (path traversal)
};
void make_repo(const std::string& root, const std::string& dir_name, const RepoOptions& o = {});

// python3 tests/hub/fake_hub.py on 127.0.0.1, an ephemeral port, killed on destruction.
class FakeHub {
 public:
  FakeHub(const std::string& root, const nlohmann::json& faults, const std::string& work_dir);
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;
  void stop();
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Every request so far: {method, path, range, status}.
  std::vector<nlohmann::json> log() const;
  // How many logged requests have this method and a path containing `part`.
  int count(const std::string& method, const std::string& part, int status = 0) const;
  const nlohmann::json& manifest() const { return manifest_; }
  std::string commit(const std::string& repo, const std::string& rev = "main") const;
  std::string oid(const std::string& repo, const std::string& rev, const std::string& file) const;

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  nlohmann::json manifest_;
};

struct ProcResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};
// Runs argv with extra environment variables; gives up (kills) after timeout_s.
ProcResult run_process(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, int timeout_s = 60);
// Starts several processes at once and waits for all.
std::vector<ProcResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                      const std::map<std::string, std::string>& env,
                                      int timeout_s = 60);

// Runs fn in a forked child for which `dir` is really unwritable, even as root: a private
// mount namespace with a read-only bind mount of dir, else (no CAP_SYS_ADMIN) dropping to uid
// 65534 with setresuid, else (not root) chmod 0555 is already binding. The child checks that it
// cannot create a file in dir before running fn. Returns fn's text, or throws on child failure.
enum class Unwritable { kAny, kBindMount, kDropUid };
struct RestrictedResult {
  std::string mechanism;  // "read-only bind mount", "setresuid(65534)", "chmod 0555 (non-root)",
                          // or "unavailable" (ok is then false)
  bool ok = false;        // fn returned without throwing
  std::string text;       // fn's return value or the error message
};
// `how` restricts the choice to one mechanism (kAny: the first that works). As non-root,
// chmod is used whatever `how` says.
RestrictedResult run_with_unwritable_dir(const std::string& dir,
                                         const std::function<std::string()>& fn,
                                         Unwritable how = Unwritable::kAny);

// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();

 private:
  std::string name_, old_;
  bool had_;
};

}  // namespace vkllm::test
