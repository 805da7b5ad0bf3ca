#include "hub/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace vkllm::hub_detail {

namespace {

std::atomic<unsigned> g_tmp_counter{0};

std::string tmp_name(const std::string& path) {
  return fmt::format("{}.tmp-{}-{}", path, ::getpid(), g_tmp_counter.fetch_add(1));
}

std::string strip_ws(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

std::string repo_folder(const std::string& repo) {
  std::string out = "models--";
  for (char c : repo) {
    if (c == '/')
      out += "--";
    else
      out += c;
  }
  return out;
}

bool is_hex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && is_hex(s);
}

bool is_safe_repo_path(const std::string& name) {
  if (name.empty() || name.size() > 1024 || name.front() == '/') return false;
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f || c == '\\') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

void check_repo_path(const std::string& repo, const std::string& name) {
  if (!is_safe_repo_path(name))
    fail(
        "{}: the hub sent an unsafe file name '{}' (absolute, '..' or '.' component, or control "
        "characters); refusing it",
        repo, name);
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string hub_home() {
  std::string home = env_str("HF_HOME");
  if (!home.empty()) return home;
  std::string xdg = env_str("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/huggingface";
  std::string user_home = env_str("HOME");
  if (user_home.empty()) user_home = "/tmp";
  return user_home + "/.cache/huggingface";
}

std::string hub_endpoint(const PullOptions& opts) {
  std::string e = !opts.endpoint.empty() ? opts.endpoint : env_str("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hub_token(const PullOptions& opts) {
  if (!opts.token.empty()) return opts.token;
  std::string t = strip_ws(env_str("HF_TOKEN"));
  if (!t.empty()) return t;
  std::string path = env_str("HF_TOKEN_PATH");
  if (path.empty()) path = hub_home() + "/token";
  return strip_ws(read_small_file(path, 4096));
}

int make_dirs(const std::string& path, std::string* where) {
  if (path.empty()) return 0;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    std::string part = path.substr(0, pos);
    if (part.empty()) continue;
    if (::mkdir(part.c_str(), 0755) != 0) {
      int e = errno;
      struct stat st {};
      if (::stat(part.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      if (where) *where = part;
      return e == EEXIST ? ENOTDIR : e;
    }
  }
  return 0;
}

bool is_readonly_errno(int e) {
  return e == EROFS || e == EACCES || e == EPERM;
}

void fail_not_writable(const std::string& cache, const std::string& path, int err) {
  fail(
      "{}: the Hugging Face cache is not writable ({}: {}); set HF_HUB_CACHE to a writable "
      "directory (or pull with --offline to use only what is cached)",
      cache, path, std::strerror(err));
}

void ensure_writable(const std::string& cache, const std::string& repo) {
  std::string repo_dir = cache + "/" + repo_folder(repo);
  for (const std::string& d : {repo_dir + "/blobs", repo_dir + "/snapshots", repo_dir + "/refs",
                               cache + "/.locks/" + repo_folder(repo)}) {
    std::string where;
    int e = make_dirs(d, &where);
    if (e != 0) {
      if (is_readonly_errno(e)) fail_not_writable(cache, where, e);
      fail("{}: cannot create directory: {}", where, std::strerror(e));
    }
  }
  std::string probe = tmp_name(repo_dir + "/blobs/.vkllm-write-probe");
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    if (is_readonly_errno(e)) fail_not_writable(cache, repo_dir + "/blobs", e);
    fail("{}: cannot write: {}", probe, std::strerror(e));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_file_atomic(const std::string& path, const std::string& content) {
  std::string tmp = tmp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed: {}", tmp, std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot write: {}", path, std::strerror(e));
  }
}

void link_snapshot_file(const std::string& repo_dir, const std::string& commit,
                        const std::string& name, const std::string& etag) {
  std::string link = repo_dir + "/snapshots/" + commit + "/" + name;
  std::string parent = link.substr(0, link.rfind('/'));
  std::string where;
  if (int e = make_dirs(parent, &where); e != 0)
    fail("{}: cannot create directory: {}", where, std::strerror(e));
  // snapshots/<commit>/ is two levels below the repo folder, plus one per '/' in name.
  std::string target;
  for (size_t i = 0, n = 2 + static_cast<size_t>(std::count(name.begin(), name.end(), '/')); i < n;
       ++i)
    target += "../";
  target += "blobs/" + etag;
  char buf[4096];
  ssize_t len = ::readlink(link.c_str(), buf, sizeof(buf));
  if (len > 0 && std::string(buf, static_cast<size_t>(len)) == target) return;
  std::string tmp = tmp_name(link);
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    fail("{}: cannot create symlink: {}", tmp, std::strerror(errno));
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot link: {}", link, std::strerror(e));
  }
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> index_shards(const std::string& repo, const std::string& index_path,
                                      const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    fail("{}: not a safetensors index (no \"weight_map\" object)", index_path);
  std::set<std::string> shards;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail("{}: weight_map[\"{}\"] is not a file name", index_path, tensor);
    std::string name = file.get<std::string>();
    check_repo_path(repo, name);
    shards.insert(name);
  }
  if (shards.empty()) fail("{}: weight_map is empty", index_path);
  return {shards.begin(), shards.end()};
}

std::vector<std::string> missing_in_snapshot(const std::string& repo, const std::string& snap,
                                             bool adapter) {
  std::vector<std::string> missing;
  if (adapter) {
    for (const char* f : {kAdapterConfig, kAdapterWeights})
      if (!is_regular_file(snap + "/" + f)) missing.push_back(f);
    return missing;
  }
  if (!is_regular_file(snap + "/" + kConfig)) missing.push_back(kConfig);
  if (!is_regular_file(snap + "/" + kWeights)) {
    std::string index = snap + "/" + kIndex;
    if (!is_regular_file(index)) {
      missing.push_back(std::string(kWeights) + " (or " + kIndex + ")");
    } else {
      for (const std::string& s : index_shards(repo, index, read_small_file(index, 64u << 20)))
        if (!is_regular_file(snap + "/" + s)) missing.push_back(s);
    }
  }
  if (!is_regular_file(snap + "/" + kTokenizer)) missing.push_back(kTokenizer);
  return missing;
}

}  // namespace vkllm::hub_detail
