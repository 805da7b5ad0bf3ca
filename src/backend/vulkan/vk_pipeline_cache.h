// The Context's VkPipelineCache, kept on disk between runs so that a second start skips the
// driver's shader compilation (issue 53, "cold start").
//
// One file per device and build: <dir>/<vendor>-<device>-<driver version>-<pipelineCacheUUID>-
// <SPIR-V hash>.bin, where <dir> is $XDG_CACHE_HOME/vkllm/pipelines (vk_cache_dir.h) unless
// VKLLM_PIPELINE_CACHE names another folder (Tuning::pipeline_cache; "0" turns the cache off). A
// new vkllm binary (other SPIR-V) or a new driver therefore never reads a stale file. The file is
// a 40-byte vkllm header (magic, format, driver version, SPIR-V hash, the data's size and hash)
// followed by the bytes vkGetPipelineCacheData returned; both that header and the Vulkan header
// at the start of the data (VkPipelineCacheHeaderVersionOne: its size, version, vendor, device
// and UUID) are checked before the data reaches vkCreatePipelineCache. A file that is missing,
// unreadable, truncated, corrupt or another device's is ignored (one line on stderr under
// VKLLM_PROFILE=1) and the run goes on with an empty cache. save() writes the cache back
// atomically (a temp file in the same folder, fsync, rename) when its contents changed since
// they were loaded or last written; a failure to write is likewise only a VKLLM_PROFILE line.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

// What the Context's pipeline cache did (Context::pipeline_cache_stats).
struct PipelineCacheStats {
  bool enabled = false;       // a VkPipelineCache is in use (off: VKLLM_PIPELINE_CACHE=0)
  std::string path;           // its file ("" when off)
  uint64_t loaded_bytes = 0;  // cache data handed to vkCreatePipelineCache (0: started empty)
  std::string ignored;        // why an existing file was not used ("" when used or absent)
  uint64_t saved_bytes = 0;   // cache data of the last file written (0: none written)
  uint32_t saves = 0;         // files written by this Context
  // Every vkCreateComputePipelines of the Context (its probes' and every Kernels'): how many,
  // their time, and how many the driver reported found in the cache (VK_EXT_pipeline_creation_
  // feedback; 0 where the driver does not report it).
  uint32_t pipelines = 0, hits = 0;
  double pipeline_ms = 0;
};

// A hash of every embedded SPIR-V module (all_shaders(): names and code), computed once.
uint64_t spirv_hash();

// The file name (no folder) of `d`'s cache for this build's SPIR-V.
std::string pipeline_cache_name(const DeviceInfo& d);

// The file's bytes for the Vulkan cache data `data` of device `d`: the vkllm header, then `data`.
std::vector<uint8_t> pack_pipeline_cache(const DeviceInfo& d, std::span<const uint8_t> data);

// Checks a cache file's bytes against device `d` and this build: "" when they are usable (the
// Vulkan data is then file[kPipelineCacheHeaderBytes:]), else one line saying what is wrong.
// Never reads outside `file`.
std::string check_pipeline_cache(std::span<const uint8_t> file, const DeviceInfo& d);
constexpr size_t kPipelineCacheHeaderBytes = 40;

class PipelineCache {
 public:
  // setting: Tuning::pipeline_cache ("" or "1": the user's cache folder; "0": off; else a folder).
  // verbose: one line on stderr for a file ignored, written or not written (VKLLM_PROFILE=1).
  PipelineCache(VkDevice dev, const DeviceInfo& d, const std::string& setting, bool verbose);
  ~PipelineCache();  // destroys the VkPipelineCache (save() first to keep it)
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  VkPipelineCache handle() const { return cache_; }
  // Writes the cache to its file when its contents changed since loaded or last written (a write
  // that failed is not tried again for the same contents). Never throws; thread-safe.
  void save() noexcept;
  // Counts one vkCreateComputePipelines of `ms` milliseconds, found in the cache or not.
  void count(double ms, bool hit);
  PipelineCacheStats stats() const;

 private:
  void note(const std::string& line) const;
  VkDevice dev_;
  DeviceInfo info_;
  bool verbose_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  mutable std::mutex m_;
  std::string path_;
  uint64_t known_size_ = 0, known_hash_ = 0;  // the contents last loaded, or last written or tried
  PipelineCacheStats stats_;
};

}  // namespace vkllm::vk
