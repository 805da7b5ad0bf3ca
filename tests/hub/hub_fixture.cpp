#include "hub_fixture.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "hf/safetensors.h"

namespace vkllm::test {

namespace {

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  ::remove(path);
  return 0;
}

std::string tmp_root() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

std::vector<uint8_t> f32_bytes(size_t n, unsigned seed) {
  std::vector<uint8_t> out(n * 4);
  uint32_t s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float v = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001 - 1000) / 1000.0f;
    std::memcpy(&out[i * 4], &v, 4);
  }
  return out;
}

int wait_with_timeout(int pid, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    int st = 0;
    int r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return 124;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = tmp_root() + "/vkllm-hub-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path = buf.data();
  ::chmod(path.c_str(), 0755);  // an unprivileged child must be able to look inside
}

TempDir::~TempDir() {
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

void write_file(const std::string& path, const std::string& content) {
  make_dirs(path.substr(0, path.rfind('/')));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  if (!f) throw std::runtime_error("cannot write " + path);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string read_link(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

static std::vector<std::string>* g_tree = nullptr;
static size_t g_tree_prefix = 0;
static int tree_entry(const char* path, const struct stat*, int, struct FTW*) {
  std::string p(path);
  if (p.size() > g_tree_prefix) g_tree->push_back(p.substr(g_tree_prefix));
  return 0;
}

std::vector<std::string> list_tree(const std::string& root) {
  std::vector<std::string> out;
  g_tree = &out;
  g_tree_prefix = root.size() + 1;
  ::nftw(root.c_str(), tree_entry, 16, FTW_PHYS);
  std::sort(out.begin(), out.end());
  return out;
}

void make_repo(const std::string& root, const std::string& dir_name, const RepoOptions& o) {
  std::string dir = root + "/" + dir_name;
  make_dirs(dir);
  nlohmann::json config = {{"architectures", {"Qwen3ForCausalLM"}},
                           {"model_type", "qwen3"},
                           {"hidden_size", 64},
                           {"num_hidden_layers", 1},
                           {"num_attention_heads", 2},
                           {"num_key_value_heads", 1},
                           {"head_dim", 32},
                           {"intermediate_size", 128},
                           {"vocab_size", 256},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 1000000.0},
                           {"tie_word_embeddings", true},
                           {"note", o.config_note}};
  write_file(dir + "/config.json", config.dump(2) + "\n");
  write_file(dir + "/generation_config.json", R"({"eos_token_id": 2, "do_sample": false})"
                                              "\n");
  write_file(
      dir + "/tokenizer.json",
      R"({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})"
      "\n");
  write_file(dir + "/tokenizer_config.json", R"({"eos_token": "b"})"
                                             "\n");
  size_t floats = o.kib * 1024 / 4;
  int parts = std::max(1, o.shards);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int p = 0; p < parts; ++p) {
    std::vector<TensorToWrite> ts;
    size_t n = floats / static_cast<size_t>(parts) / 2;
    for (int t = 0; t < 2; ++t) {
      std::string name = fmt::format("model.layers.{}.w{}", p, t);
      ts.push_back({name,
                    StDType::F32,
                    {static_cast<int64_t>(n / 64), 64},
                    f32_bytes(n / 64 * 64, o.seed * 131u + static_cast<unsigned>(p * 2 + t))});
      std::string file = o.shards == 0
                             ? "model.safetensors"
                             : fmt::format("model-{:05d}-of-{:05d}.safetensors", p + 1, parts);
      weight_map[name] = file;
    }
    std::string file = o.shards == 0
                           ? "model.safetensors"
                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", p + 1, parts);
    write_safetensors(dir + "/" + file, ts);
  }
  if (o.shards > 0) {
    int k = 0;
    for (const auto& extra : o.extra_index_files) weight_map[fmt::format("extra.{}", k++)] = extra;
    nlohmann::json index = {{"metadata", {{"total_size", floats * 4}}}, {"weight_map", weight_map}};
    write_file(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  }
}

FakeHub::FakeHub(const std::string& root, const nlohmann::json& faults,
                 const std::string& work_dir) {
  static int counter = 0;
  int n = counter++;
  std::string faults_path = fmt::format("{}/faults-{}.json", work_dir, n);
  std::string manifest_path = fmt::format("{}/manifest-{}.json", work_dir, n);
  log_path_ = fmt::format("{}/hub-{}.log", work_dir, n);
  write_file(faults_path, faults.is_null() ? "{}" : faults.dump());
  std::string script = std::string(VKLLM_SOURCE_DIR) + "/tests/hub/fake_hub.py";
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execlp("python3", "python3", script.c_str(), "--root", root.c_str(), "--faults",
             faults_path.c_str(), "--log", log_path_.c_str(), "--manifest", manifest_path.c_str(),
             static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[256];
    ssize_t r = ::read(fds[0], buf, sizeof(buf));
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  if (out.rfind("PORT ", 0) != 0) {
    stop();
    throw std::runtime_error("fake_hub.py did not start (is python3 installed?): " + out);
  }
  port_ = std::atoi(out.c_str() + 5);
  manifest_ = nlohmann::json::parse(read_file(manifest_path));
}

FakeHub::~FakeHub() {
  stop();
}

void FakeHub::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    wait_with_timeout(pid_, 10);
    pid_ = -1;
  }
}

std::vector<nlohmann::json> FakeHub::log() const {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(log_path_));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

int FakeHub::count(const std::string& method, const std::string& part, int status) const {
  int n = 0;
  for (const auto& e : log())
    if (e["method"] == method && e["path"].get<std::string>().find(part) != std::string::npos &&
        (status == 0 || e["status"] == status))
      ++n;
  return n;
}

std::string FakeHub::commit(const std::string& repo, const std::string& rev) const {
  return manifest_.at(repo).at(rev).at("commit").get<std::string>();
}

std::string FakeHub::oid(const std::string& repo, const std::string& rev,
                         const std::string& file) const {
  return manifest_.at(repo).at(rev).at("files").at(file).at("oid").get<std::string>();
}

static int spawn(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env, const std::string& out_path,
                 const std::string& err_path) {
  int pid = ::fork();
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::vector<ProcResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                      const std::map<std::string, std::string>& env,
                                      int timeout_s) {
  TempDir tmp;
  std::vector<int> pids;
  for (size_t i = 0; i < argvs.size(); ++i)
    pids.push_back(spawn(argvs[i], env, fmt::format("{}/out{}", tmp.path, i),
                         fmt::format("{}/err{}", tmp.path, i)));
  std::vector<ProcResult> res(argvs.size());
  for (size_t i = 0; i < argvs.size(); ++i) {
    res[i].status = wait_with_timeout(pids[i], timeout_s);
    res[i].out = read_file(fmt::format("{}/out{}", tmp.path, i));
    res[i].err = read_file(fmt::format("{}/err{}", tmp.path, i));
  }
  return res;
}

ProcResult run_process(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env, int timeout_s) {
  return run_processes({argv}, env, timeout_s)[0];
}

RestrictedResult run_with_unwritable_dir(const std::string& dir,
                                         const std::function<std::string()>& fn, Unwritable how) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  bool non_root = ::geteuid() != 0;
  int pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string mech;
    bool try_mount = how != Unwritable::kDropUid, try_uid = how != Unwritable::kBindMount;
    if (try_mount && ::unshare(CLONE_NEWNS) == 0 &&
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0 &&
        ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0) {
      mech = "read-only bind mount";
    } else if (!non_root && try_uid) {
      if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
          ::setresuid(65534, 65534, 65534) != 0)
        mech = "";
      else
        mech = "setresuid(65534)";
    } else if (::chmod(dir.c_str(), 0555) == 0) {
      mech = "chmod 0555 (non-root)";
    }
    std::string report;
    std::string probe = dir + "/.writable-probe";
    int fd = mech.empty() ? -1 : ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (mech.empty()) {
      report = "unavailable\n0\ncannot make the directory unwritable this way here";
    } else if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      report = mech + "\n0\nthe directory is still writable for the child";
    } else {
      try {
        report = mech + "\n1\n" + fn();
      } catch (const std::exception& e) {
        report = mech + "\n0\n" + e.what();
      }
    }
    ssize_t w = ::write(fds[1], report.data(), report.size());
    (void)w;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  int status = wait_with_timeout(pid, 60);
  if (non_root) ::chmod(dir.c_str(), 0755);
  size_t a = text.find('\n'), b = a == std::string::npos ? a : text.find('\n', a + 1);
  if (status != 0 || b == std::string::npos)
    throw std::runtime_error(fmt::format("restricted child failed (status {}): {}", status, text));
  RestrictedResult r;
  r.mechanism = text.substr(0, a);
  r.ok = text.substr(a + 1, b - a - 1) == "1";
  r.text = text.substr(b + 1);
  return r;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = std::getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value)
    ::setenv(name, value, 1);
  else
    ::unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (had_)
    ::setenv(name_.c_str(), old_.c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

}  // namespace vkllm::test
