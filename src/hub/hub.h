// Hugging Face Hub client: pinned pulls into the standard HF cache (shared with huggingface_hub).
//
// Cache layout (identical to Python's huggingface_hub, so files are shared in both directions):
//   $HF_HUB_CACHE/models--<org>--<name>/blobs/<etag>            the bytes (sha256 or git sha1)
//   $HF_HUB_CACHE/models--<org>--<name>/snapshots/<commit>/<file> -> ../../blobs/<etag>
//   $HF_HUB_CACHE/models--<org>--<name>/refs/<revision>           the commit id of a branch/tag
//   $HF_HUB_CACHE/.locks/models--<org>--<name>/<etag>.lock         flock()ed during a download
// See docs/hub.md for the environment variables and the guarantees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm {

struct PullOptions {
  // Empty fields fall back to the environment (HF_ENDPOINT, HF_HUB_CACHE / HF_HOME, HF_TOKEN /
  // token file), then to huggingface_hub's defaults.
  std::string endpoint;
  std::string cache_dir;
  std::string token;
  bool offline = false;     // also on when HF_HUB_OFFLINE is 1/true/yes/on
  bool progress = true;     // per-file progress bar on stderr, only when stderr is a terminal
  int max_retries = 5;      // per request, on 5xx / 429 / timeouts / cut transfers
  int retry_base_ms = 500;  // backoff: base * 2^attempt, capped at 8 s
  int connect_timeout_s = 10;
  int stall_timeout_s = 0;  // abort a transfer idle this long; 0: HF_HUB_DOWNLOAD_TIMEOUT or 10
  // A LoRA adapter repository: pulls adapter_config.json and adapter_model.safetensors (a
  // pickle adapter_model.bin is refused) instead of a model's files (docs/lora.md).
  bool adapter = false;
};

struct PulledFile {
  std::string name;  // path inside the repo ("model.safetensors")
  std::string path;  // snapshot path (a symlink into blobs/)
  std::string etag;  // sha256 (LFS) or git blob sha1; empty when served offline
  uint64_t size = 0;
  bool downloaded = false;  // false: already in the cache
};

struct PullResult {
  std::string repo;          // "org/name"
  std::string revision;      // as asked ("main" by default)
  std::string commit;        // 40-hex commit the revision resolved to
  std::string snapshot_dir;  // a directory HfCheckpoint can open
  std::vector<PulledFile> files;
  bool offline = false;  // served from the cache without contacting the hub
};

struct RepoSpec {
  std::string repo;      // "org/name"
  std::string revision;  // "main" when the spec has no @revision
};

// Parses "org/name[@revision]"; throws Error naming the spec when it is not a valid model id.
RepoSpec parse_repo_spec(const std::string& spec);

// True when `s` is a syntactically valid "org/name[@revision]" model id AND no local file or
// directory of that name exists (so "export ./dir" and "export org/name" can share one argument).
bool looks_like_repo_id(const std::string& s);

// The cache root in effect: opts.cache_dir, else $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::string hub_cache_dir(const PullOptions& opts = {});
// opts.offline || $HF_HUB_OFFLINE is truthy.
bool hub_offline(const PullOptions& opts = {});

// Resolves the revision to a commit, downloads what the cache lacks of the files the exporter
// needs (config.json, generation_config.json, model.safetensors or model.safetensors.index.json
// and its shards, tokenizer.json, tokenizer_config.json), verifies each against the hub's hash,
// and links the snapshot. Offline (or HF_HUB_OFFLINE), serves from the cache or fails naming what
// is missing. Throws Error with one clear line on any failure.
PullResult hub_pull(const std::string& spec, const PullOptions& opts = {});

// For verbs that take "a checkpoint directory or a model id" (export, e2e): returns `arg` when it
// is not a model id (a local path), else hub_pull(arg, opts).snapshot_dir.
std::string model_dir_or_pull(const std::string& arg, const PullOptions& opts = {});

// The offline half of hub_pull: the cached snapshot of spec, or an Error naming what is missing.
// Never touches the network; works in builds without libcurl.
PullResult hub_find_cached(const std::string& spec, const PullOptions& opts = {});

// Lowercase hex sha256 of a file; "" in builds without OpenSSL (VKLLM_WITH_CURL=OFF).
std::string sha256_file_hex(const std::string& path);

}  // namespace vkllm
