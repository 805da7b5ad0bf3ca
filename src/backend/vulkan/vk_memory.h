// Buffers sub-allocated from large memory blocks, uploads and downloads through one bounded
// staging buffer. Buffers live until the allocator is destroyed (weights, caches and activation
// slots are allocated once per executor).
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

struct Buffer {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  void* mapped = nullptr;  // host-visible buffers only
};

class Allocator {
 public:
  explicit Allocator(Context& ctx);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // A storage buffer usable as transfer source and destination. `what` names it in errors.
  // host_reads: a host-visible buffer the host reads (Context::memory_type).
  Buffer create(VkDeviceSize size, bool host_visible, const char* what, bool host_reads = false);
  void upload(const Buffer& dst, VkDeviceSize offset, const void* src, VkDeviceSize n);
  void download(const Buffer& src, VkDeviceSize offset, void* dst, VkDeviceSize n);
  void fill(const Buffer& b, uint32_t word);  // every 32-bit word of b (poisoning, zeroing)
  uint64_t device_bytes() const { return device_bytes_; }  // device-local blocks allocated
  Context& context() { return ctx_; }

 private:
  struct Block {
    VkDeviceMemory mem;
    VkDeviceSize size, used;
    uint32_t type;
    void* mapped;
  };
  Context& ctx_;
  std::vector<Block> blocks_;
  std::vector<VkBuffer> buffers_;
  Buffer staging_;
  uint64_t device_bytes_ = 0;
};

// Device bytes held by live loaded programs (weights) and executors (caches, activations,
// scratch), and the most at once (vulkan_usage); usage_device records the device and driver of
// the last executor created.
void usage_hold(uint64_t bytes);
void usage_release(uint64_t bytes);
void usage_device(const std::string& name, const std::string& driver);

}  // namespace vkllm::vk
