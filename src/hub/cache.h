// Internal: the HF cache layout, environment, names and atomic file operations (no network).
#pragma once
#include <string>
#include <vector>

#include "hub/hub.h"

namespace vkllm::hub_detail {

// The files a pull fetches, in order. The weights are model.safetensors, or the index and the
// shards it names.
inline constexpr const char* kConfig = "config.json";
inline constexpr const char* kGenerationConfig = "generation_config.json";
inline constexpr const char* kWeights = "model.safetensors";
inline constexpr const char* kIndex = "model.safetensors.index.json";
inline constexpr const char* kTokenizer = "tokenizer.json";
inline constexpr const char* kTokenizerConfig = "tokenizer_config.json";
// A LoRA adapter's files (PullOptions::adapter).
inline constexpr const char* kAdapterConfig = "adapter_config.json";
inline constexpr const char* kAdapterWeights = "adapter_model.safetensors";
inline constexpr const char* kAdapterPickle = "adapter_model.bin";

std::string repo_folder(const std::string& repo);  // "models--org--name"
bool is_commit_hash(const std::string& s);         // 40 lowercase hex digits
bool is_hex(const std::string& s);

// A relative path with no empty, "." or ".." component, no backslash, no control character.
bool is_safe_repo_path(const std::string& name);
// Throws Error when a filename sent by the hub is absolute or escapes the snapshot.
void check_repo_path(const std::string& repo, const std::string& name);

std::string env_str(const char* name);  // "" when unset
std::string hub_home();                 // $HF_HOME or $XDG_CACHE_HOME/huggingface or ~/...
std::string hub_endpoint(const PullOptions& opts);
std::string hub_token(const PullOptions& opts);

// mkdir -p. Returns 0 or the errno of the failing step (path of it in *where).
int make_dirs(const std::string& path, std::string* where);
bool is_readonly_errno(int e);
// The one line for a cache the process cannot write to.
[[noreturn]] void fail_not_writable(const std::string& cache, const std::string& path, int err);
// Creates the repo's folders and proves the cache is writable (probe file), or fails with the
// not-writable line. Called before the first write of a pull.
void ensure_writable(const std::string& cache, const std::string& repo);

// Write via "<path>.tmp-<pid>-<n>" + rename (concurrent writers each succeed).
void write_file_atomic(const std::string& path, const std::string& content);
// snapshots/<commit>/<name> -> relative path to blobs/<etag>, replaced atomically.
void link_snapshot_file(const std::string& repo_dir, const std::string& commit,
                        const std::string& name, const std::string& etag);
std::string read_small_file(const std::string& path, size_t max_bytes);  // "" when absent
bool is_regular_file(const std::string& path);                           // follows symlinks
bool exists_nofollow(const std::string& path);

// Shard file names listed by a model.safetensors.index.json text (validated, unique, sorted).
std::vector<std::string> index_shards(const std::string& repo, const std::string& index_path,
                                      const std::string& text);

// Files the snapshot lacks for export (required ones only), in a stable order; with adapter,
// those of a LoRA adapter.
std::vector<std::string> missing_in_snapshot(const std::string& repo, const std::string& snap,
                                             bool adapter = false);

}  // namespace vkllm::hub_detail
