// Model ids, cache location, offline lookup; the network half lives in download.cpp.
#include "hub/hub.h"

#include <sys/stat.h>

#include <cctype>

#include "core/error.h"
#include "hub/cache.h"
#include "hub/download.h"

namespace vkllm {

using namespace hub_detail;

namespace {

// huggingface_hub's rules: [A-Za-z0-9_.-], at most 96 characters, no "--" or "..", and no
// leading or trailing '-' or '.'.
bool valid_id_part(const std::string& s) {
  if (s.empty() || s.size() > 96) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return false;
  if (s.find("--") != std::string::npos || s.find("..") != std::string::npos) return false;
  return s.front() != '-' && s.front() != '.' && s.back() != '-' && s.back() != '.';
}

bool valid_revision(const std::string& r) {
  if (r.empty() || r.size() > 255) return false;
  for (unsigned char c : r)
    if (c <= 0x20 || c == 0x7f || c == '\\' || c == '?' || c == '#' || c == '%') return false;
  return is_safe_repo_path(r);
}

bool parse_spec(const std::string& spec, RepoSpec* out, std::string* why) {
  std::string id = spec, rev = "main";
  if (size_t at = spec.find('@'); at != std::string::npos) {
    id = spec.substr(0, at);
    rev = spec.substr(at + 1);
    if (!valid_revision(rev)) {
      *why = "the revision after '@' must be a branch, tag or commit";
      return false;
    }
  }
  size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos ||
      !valid_id_part(id.substr(0, slash)) || !valid_id_part(id.substr(slash + 1))) {
    *why = "expected org/name[@revision] (letters, digits, '-', '_', '.')";
    return false;
  }
  out->repo = id;
  out->revision = rev;
  return true;
}

bool truthy(const std::string& v) {
  std::string l;
  for (char c : v) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l == "1" || l == "true" || l == "yes" || l == "on";
}

}  // namespace

RepoSpec parse_repo_spec(const std::string& spec) {
  RepoSpec r;
  std::string why;
  if (!parse_spec(spec, &r, &why)) fail("'{}': not a Hugging Face model id: {}", spec, why);
  return r;
}

bool looks_like_repo_id(const std::string& s) {
  RepoSpec r;
  std::string why;
  if (!parse_spec(s, &r, &why)) return false;
  struct stat st {};
  return ::stat(s.c_str(), &st) != 0;
}

std::string hub_cache_dir(const PullOptions& opts) {
  std::string dir = !opts.cache_dir.empty() ? opts.cache_dir : env_str("HF_HUB_CACHE");
  if (dir.empty()) dir = hub_home() + "/hub";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool hub_offline(const PullOptions& opts) {
  return opts.offline || truthy(env_str("HF_HUB_OFFLINE"));
}

PullResult hub_find_cached(const std::string& spec, const PullOptions& opts) {
  RepoSpec rs = parse_repo_spec(spec);
  std::string cache = hub_cache_dir(opts);
  std::string repo_dir = cache + "/" + repo_folder(rs.repo);
  std::string where = fmt::format("{}@{}", rs.repo, rs.revision);
  struct stat st {};
  if (::stat(repo_dir.c_str(), &st) != 0)
    fail(
        "{}: not in the cache (no {}); pull it online first, or point HF_HUB_CACHE at the cache "
        "that has it",
        where, repo_dir);
  std::string commit;
  if (is_commit_hash(rs.revision)) {
    commit = rs.revision;
  } else {
    std::string ref = read_small_file(repo_dir + "/refs/" + rs.revision, 256);
    while (!ref.empty() && std::isspace(static_cast<unsigned char>(ref.back()))) ref.pop_back();
    if (ref.empty())
      fail("{}: revision '{}' was never pulled into the cache ({}/refs/{} is missing)", where,
           rs.revision, repo_dir, rs.revision);
    if (!is_commit_hash(ref)) fail("{}/refs/{}: does not hold a commit id", repo_dir, rs.revision);
    commit = ref;
  }
  std::string snap = repo_dir + "/snapshots/" + commit;
  if (::stat(snap.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail("{}: commit {} is not in the cache (no {})", where, commit, snap);
  std::vector<std::string> missing = missing_in_snapshot(rs.repo, snap, opts.adapter);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail("{}: the cached snapshot {} is incomplete: missing {}", where, snap, list);
  }
  PullResult r;
  r.repo = rs.repo;
  r.revision = rs.revision;
  r.commit = commit;
  r.snapshot_dir = snap;
  r.offline = true;
  if (opts.adapter) {
    for (const char* f : {kAdapterConfig, kAdapterWeights}) {
      std::string p = snap + "/" + f;
      ::stat(p.c_str(), &st);
      r.files.push_back({f, p, "", static_cast<uint64_t>(st.st_size), false});
    }
    return r;
  }
  for (const char* f :
       {kConfig, kGenerationConfig, kWeights, kIndex, kTokenizer, kTokenizerConfig}) {
    std::string p = snap + "/" + f;
    if (!is_regular_file(p)) continue;
    ::stat(p.c_str(), &st);
    r.files.push_back({f, p, "", static_cast<uint64_t>(st.st_size), false});
    if (std::string(f) == kIndex && !is_regular_file(snap + "/" + kWeights)) {
      for (const std::string& s : index_shards(rs.repo, p, read_small_file(p, 64u << 20))) {
        std::string sp = snap + "/" + s;
        ::stat(sp.c_str(), &st);
        r.files.push_back({s, sp, "", static_cast<uint64_t>(st.st_size), false});
      }
    }
  }
  return r;
}

std::string sha256_file_hex(const std::string& path) {
#ifdef VKLLM_WITH_CURL
  return hash_file(path, false);
#else
  (void)path;
  return "";
#endif
}

std::string model_dir_or_pull(const std::string& arg, const PullOptions& opts) {
  return looks_like_repo_id(arg) ? hub_pull(arg, opts).snapshot_dir : arg;
}

PullResult hub_pull(const std::string& spec, const PullOptions& opts) {
  if (hub_offline(opts)) {
    try {
      return hub_find_cached(spec, opts);
    } catch (const Error& e) {
      fail("offline mode{}: {}", opts.offline ? "" : " (HF_HUB_OFFLINE is set)", e.what());
    }
  }
#ifdef VKLLM_WITH_CURL
  return hub_detail::pull_online(parse_repo_spec(spec), opts);
#else
  parse_repo_spec(spec);
  fail(
      "{}: this vkllm was built without libcurl (VKLLM_WITH_CURL=OFF), so it cannot download; "
      "use --offline (or HF_HUB_OFFLINE=1) to serve it from the cache {}",
      spec, hub_cache_dir(opts));
#endif
}

}  // namespace vkllm
