// The online pull: resolve the revision, pick the files, download, verify, link.
#include "hub/download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "core/error.h"
#include "hub/cache.h"

namespace vkllm::hub_detail {

namespace {

using Clock = std::chrono::steady_clock;

// Closes an fd on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string hash_file(const std::string& path, bool git_blob) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), git_blob ? EVP_sha1() : EVP_sha256(), nullptr) != 1)
    fail("openssl: cannot initialise a digest");
  if (git_blob) {
    std::string prefix = fmt::format("blob {}", static_cast<uint64_t>(st.st_size));
    EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size() + 1);  // with the NUL
  }
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(f.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read error: {}", path, std::strerror(errno));
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

namespace {

// Per-file progress line on stderr (a terminal only), redrawn at most ten times a second.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string name)
      : on_(enabled && ::isatty(2)), name_(std::move(name)) {}
  ~ProgressBar() {
    if (drawn_) std::fputc('\n', stderr);
  }
  void update(uint64_t now, uint64_t total, bool force = false) {
    if (!on_ || total == 0) return;
    auto t = Clock::now();
    if (!force && drawn_ && t - last_ < std::chrono::milliseconds(100)) return;
    last_ = t;
    drawn_ = true;
    double secs = std::chrono::duration<double>(t - start_).count();
    double mib = 1024.0 * 1024.0;
    int width = 30, filled = static_cast<int>(width * std::min(1.0, double(now) / double(total)));
    std::fprintf(stderr, "\r%-32.32s [%s%s] %3d%% %8.1f/%.1f MiB %6.1f MiB/s", name_.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), ' ').c_str(),
                 static_cast<int>(100.0 * double(now) / double(total)), double(now) / mib,
                 double(total) / mib, secs > 0 ? double(now) / mib / secs : 0.0);
    std::fflush(stderr);
  }

 private:
  bool on_;
  std::string name_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now(), last_;
};

class Puller {
 public:
  Puller(const RepoSpec& spec, const PullOptions& opts)
      : spec_(spec),
        opts_(opts),
        http_(opts),
        cache_(hub_cache_dir(opts)),
        repo_dir_(cache_ + "/" + repo_folder(spec.repo)) {}

  PullResult run();

 private:
  HttpResponse with_retries(const std::string& what, const std::function<HttpResponse()>& fn);
  [[noreturn]] void fail_http(const std::string& what, const HttpResponse& r,
                              const std::string& file = "");
  void resolve_revision();
  void pull_model_files(PullResult& res);
  void need(const char* name) const {
    if (!siblings_.count(name))
      fail("{}@{}: the repository has no {} (vkllm needs it)", spec_.repo, spec_.revision, name);
  }
  void record_ref();
  PulledFile fetch(const std::string& name);
  void download_blob(const std::string& name, const std::string& url, const std::string& etag,
                     uint64_t size, bool size_known);
  void writable() {
    if (!writable_checked_) ensure_writable(cache_, spec_.repo);
    writable_checked_ = true;
  }

  RepoSpec spec_;
  PullOptions opts_;
  HttpClient http_;
  std::string cache_, repo_dir_, commit_;
  std::set<std::string> siblings_;
  bool writable_checked_ = false;
};

HttpResponse Puller::with_retries(const std::string& what,
                                  const std::function<HttpResponse()>& fn) {
  int max = std::max(0, opts_.max_retries);
  for (int attempt = 0;; ++attempt) {
    HttpResponse r = fn();
    if (!HttpClient::retryable(r) || attempt >= max) {
      if (HttpClient::retryable(r) && max > 0)
        fail("{} (gave up after {} attempts)", HttpClient::describe(what, r), attempt + 1);
      return r;
    }
    int64_t ms = std::min<int64_t>(8000, int64_t(opts_.retry_base_ms) << std::min(attempt, 10));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(ms, 0)));
  }
}

void Puller::fail_http(const std::string& what, const HttpResponse& r, const std::string& file) {
  if (r.curl_code != 0) fail("{}", HttpClient::describe(what, r));
  std::string code = r.header("x-error-code");
  const std::string& repo = spec_.repo;
  if (code == "RepoNotFound" || (r.status == 404 && code.empty() && file.empty()))
    fail(
        "{}: repository not found on {} (HTTP {}); check the model id, or set HF_TOKEN if it is "
        "private",
        repo, http_.endpoint(), r.status);
  if (code == "RevisionNotFound")
    fail("{}: revision '{}' not found on {} (HTTP {})", repo, spec_.revision, http_.endpoint(),
         r.status);
  if (r.status == 401)
    fail(
        "{}: gated or private repository (HTTP 401): set HF_TOKEN (or the token file under "
        "HF_HOME) to a token of an account that has access",
        repo);
  if (r.status == 403)
    fail(
        "{}: access denied (HTTP 403): the token has no access to this repository; accept its "
        "terms at {}/{}",
        repo, http_.endpoint(), repo);
  if (code == "EntryNotFound" || r.status == 404)
    fail("{}: file '{}' not found at commit {} (HTTP {})", repo, file, commit_, r.status);
  fail("{}", HttpClient::describe(what, r));
}

void Puller::resolve_revision() {
  std::string url =
      http_.endpoint() + "/api/models/" + spec_.repo + "/revision/" + http_.escape(spec_.revision);
  HttpResponse r = with_retries(url, [&] { return http_.request("GET", url, true); });
  if (r.curl_code != 0 || r.status != 200) fail_http(url, r);
  RevisionInfo info = parse_model_info(r.body, url, spec_);
  commit_ = std::move(info.commit);
  siblings_ = std::move(info.siblings);
}

void Puller::download_blob(const std::string& name, const std::string& url, const std::string& etag,
                           uint64_t size, bool size_known) {
  std::string blob = repo_dir_ + "/blobs/" + etag;
  std::string part = blob + ".incomplete";
  Fd f{::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (f.fd < 0) {
    if (is_readonly_errno(errno)) fail_not_writable(cache_, part, errno);
    fail("{}: cannot create: {}", part, std::strerror(errno));
  }
  struct stat st {};
  ::fstat(f.fd, &st);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  if (size_known && have > size) {
    if (::ftruncate(f.fd, 0) != 0) fail("{}: cannot truncate: {}", part, std::strerror(errno));
    have = 0;
  }
  ProgressBar bar(opts_.progress, name);
  int max = std::max(0, opts_.max_retries);
  // A transfer that makes progress gets a fresh retry budget, but never more than this many
  // requests in all (a server cutting every transfer after a few bytes cannot keep us forever).
  int requests = 0, requests_max = 4 * (max + 1) + 16;
  for (int attempt = 0;; ++attempt) {
    if (size_known && have == size) break;
    if (++requests > requests_max)
      fail("{}/{}: gave up after {} interrupted transfers; {} is kept for the next pull",
           spec_.repo, name, requests_max, part);
    uint64_t from = have;
    std::string write_error;
    auto sink = [&](long status, const char* data, size_t n) {
      if (status == 200 && have != 0 && have == from) {  // no range support: start over
        if (::ftruncate(f.fd, 0) != 0) return false;
        have = 0;
      }
      size_t done = 0;
      while (done < n) {
        ssize_t w = ::pwrite(f.fd, data + done, n - done, static_cast<off_t>(have + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          write_error = std::strerror(errno);
          return false;
        }
        done += static_cast<size_t>(w);
      }
      have += n;
      return true;
    };
    auto progress = [&](uint64_t now, uint64_t total) { bar.update(now, total); };
    HttpResponse r = http_.request("GET", url, true, from, sink, progress);
    if (!write_error.empty()) fail("{}: write failed: {}", part, write_error);
    if (r.curl_code == 0 && (r.status == 200 || r.status == 206)) {
      if (!size_known || have == size) break;
      if (have > size)
        fail("{}/{}: the server sent {} bytes, expected {}", spec_.repo, name, have, size);
    } else if (r.curl_code == 0 && r.status == 416) {
      if (::ftruncate(f.fd, 0) != 0) fail("{}: cannot truncate: {}", part, std::strerror(errno));
      have = 0;  // our partial file does not match the server's: start over
    } else if (!HttpClient::retryable(r)) {
      fail_http(url, r, name);
    }
    if (have > from) attempt = 0;  // progress was made: the retry budget starts again
    if (attempt >= max)
      fail("{} (gave up after {} attempts; {} of the file is kept for the next pull)",
           HttpClient::describe(url, r), attempt + 1, part);
    int64_t ms = std::min<int64_t>(8000, int64_t(opts_.retry_base_ms) << std::min(attempt, 10));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(ms, 0)));
  }
  bar.update(have, size_known ? size : have, true);
  // Integrity: a 64-hex etag is the sha256 of an LFS file, a 40-hex one the git blob sha1.
  std::string got = hash_file(part, etag.size() == 40);
  if (got != etag) {
    ::unlink(part.c_str());
    fail(
        "{}/{}: checksum mismatch: the hub says {} {} but the download hashes to {}; the download "
        "was deleted and nothing was linked",
        spec_.repo, name, etag.size() == 40 ? "git-sha1" : "sha256", etag, got);
  }
  if (::fsync(f.fd) != 0 || ::rename(part.c_str(), blob.c_str()) != 0)
    fail("{}: cannot move into place: {}", blob, std::strerror(errno));
}

PulledFile Puller::fetch(const std::string& name) {
  PulledFile out;
  out.name = name;
  out.path = repo_dir_ + "/snapshots/" + commit_ + "/" + name;
  // Already in this snapshot (ours or Python's): nothing to ask, nothing to write.
  if (is_regular_file(out.path)) {
    char buf[4096];
    ssize_t n = ::readlink(out.path.c_str(), buf, sizeof(buf));
    std::string target = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    out.etag = target.substr(target.rfind('/') + 1);
    struct stat st {};
    ::stat(out.path.c_str(), &st);
    out.size = static_cast<uint64_t>(st.st_size);
    return out;
  }
  std::string path_enc;
  for (size_t start = 0; start <= name.size();) {
    size_t end = std::min(name.find('/', start), name.size());
    path_enc += (start ? "/" : "") + http_.escape(name.substr(start, end - start));
    start = end + 1;
  }
  std::string url = http_.endpoint() + "/" + spec_.repo + "/resolve/" + commit_ + "/" + path_enc;
  // HEAD without following: an LFS file answers 302 to its blob URL with X-Linked-Etag; a plain
  // redirect (renamed repo) is followed by hand.
  HttpResponse head;
  std::string head_url = url;
  for (int hop = 0;; ++hop) {
    head = with_retries(head_url, [&] { return http_.request("HEAD", head_url, false); });
    bool redirect = head.curl_code == 0 && head.status >= 300 && head.status < 400;
    if (redirect && head.header("x-linked-etag").empty() && !head.header("location").empty() &&
        hop < 5) {
      head_url = resolve_location(http_.endpoint(), head.header("location"));
      continue;
    }
    if (head.curl_code != 0 || (head.status != 200 && !redirect)) fail_http(head_url, head, name);
    break;
  }
  const FileHead fh = parse_file_head(head, http_.endpoint(), url, spec_, commit_, name);
  out.etag = fh.etag;
  out.size = fh.size;
  const bool size_known = fh.size_known;
  const std::string& download_url = fh.download_url;

  std::string blob = repo_dir_ + "/blobs/" + out.etag;
  writable();
  if (!is_regular_file(blob)) {
    std::string lock_path =
        cache_ + "/.locks/" + repo_folder(spec_.repo) + "/" + out.etag + ".lock";
    Fd lock{::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
    if (lock.fd < 0) fail("{}: cannot create lock: {}", lock_path, std::strerror(errno));
    if (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
      if (opts_.progress && ::isatty(2))
        std::fprintf(stderr, "%s: another process is downloading it, waiting...\n", name.c_str());
      while (::flock(lock.fd, LOCK_EX) != 0)
        if (errno != EINTR) fail("{}: cannot lock: {}", lock_path, std::strerror(errno));
    }
    if (!is_regular_file(blob)) {  // the other process may have finished it meanwhile
      download_blob(name, download_url, out.etag, out.size, size_known);
      out.downloaded = true;
    }
  }  // lock released here
  struct stat st {};
  if (::stat(blob.c_str(), &st) == 0) out.size = static_cast<uint64_t>(st.st_size);
  link_snapshot_file(repo_dir_, commit_, name, out.etag);
  return out;
}

PullResult Puller::run() {
  resolve_revision();
  PullResult res;
  res.repo = spec_.repo;
  res.revision = spec_.revision;
  res.commit = commit_;
  res.snapshot_dir = repo_dir_ + "/snapshots/" + commit_;
  if (opts_.adapter) {
    need(kAdapterConfig);
    if (!siblings_.count(kAdapterWeights)) {
      if (siblings_.count(kAdapterPickle))
        fail(
            "{}@{}: the adapter is only a pickle file ({}); pickle files can run code and are "
            "refused",
            spec_.repo, spec_.revision, kAdapterPickle);
      need(kAdapterWeights);
    }
    for (const char* name : {kAdapterConfig, kAdapterWeights}) res.files.push_back(fetch(name));
  } else {
    pull_model_files(res);
  }
  record_ref();
  return res;
}

void Puller::pull_model_files(PullResult& res) {
  need(kConfig);
  need(kTokenizer);
  bool single = siblings_.count(kWeights) != 0;
  if (!single && !siblings_.count(kIndex))
    fail("{}@{}: the repository has neither {} nor {} (vkllm reads safetensors only)", spec_.repo,
         spec_.revision, kWeights, kIndex);
  for (const char* name : {kConfig, kGenerationConfig, kTokenizer, kTokenizerConfig})
    if (siblings_.count(name)) res.files.push_back(fetch(name));
  if (single) {
    res.files.push_back(fetch(kWeights));
  } else {
    res.files.push_back(fetch(kIndex));
    std::string index_path = res.files.back().path;
    for (const std::string& shard :
         index_shards(spec_.repo, index_path, read_small_file(index_path, 64u << 20))) {
      if (!siblings_.count(shard))
        fail("{}: {} names shard '{}' which the repository does not have", spec_.repo, kIndex,
             shard);
      res.files.push_back(fetch(shard));
    }
  }
}

void Puller::record_ref() {
  // refs/<branch or tag> -> commit, as huggingface_hub does (not for commit ids).
  if (!is_commit_hash(spec_.revision)) {
    std::string ref = repo_dir_ + "/refs/" + spec_.revision;
    if (read_small_file(ref, 256) != commit_) {
      // A complete snapshot in a read-only cache is served as is; only the ref is not recorded.
      std::string probe = exists_nofollow(repo_dir_ + "/refs") ? repo_dir_ + "/refs" : repo_dir_;
      if (writable_checked_ || ::access(probe.c_str(), W_OK) == 0 || !is_readonly_errno(errno)) {
        writable();
        std::string where;
        if (int e = make_dirs(ref.substr(0, ref.rfind('/')), &where); e != 0)
          fail("{}: cannot create directory: {}", where, std::strerror(e));
        write_file_atomic(ref, commit_);
      }
    }
  }
}

}  // namespace

PullResult pull_online(const RepoSpec& spec, const PullOptions& opts) {
  return Puller(spec, opts).run();
}

}  // namespace vkllm::hub_detail
