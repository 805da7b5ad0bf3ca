#include "backend/vulkan/vk_memory.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/vulkan/vulkan_executor.h"
#include "core/error.h"

namespace vkllm::vk {

Allocator::Allocator(Context& ctx) : ctx_(ctx) {}

Allocator::~Allocator() {
  VkDevice d = ctx_.device();
  vkDeviceWaitIdle(d);
  for (VkBuffer b : buffers_) vkDestroyBuffer(d, b, nullptr);
  for (auto& b : blocks_) {
    if (b.mapped) vkUnmapMemory(d, b.mem);
    vkFreeMemory(d, b.mem, nullptr);
  }
}

Buffer Allocator::create(VkDeviceSize size, bool host_visible, const char* what, bool host_reads) {
  const DeviceInfo& di = ctx_.info();
  size = std::max<VkDeviceSize>(16, (size + 15) & ~VkDeviceSize(15));
  if (size > di.max_alloc)
    fail("{}: {} bytes exceed the largest allocation of Vulkan device {} ({}: {} bytes)", what,
         size, di.index, di.name, di.max_alloc);
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (ctx_.use_buffer_address()) bci.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buf;
  VK_CHECK(vkCreateBuffer(ctx_.device(), &bci, nullptr, &buf));
  buffers_.push_back(buf);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx_.device(), buf, &req);
  const uint32_t type = ctx_.memory_type(req.memoryTypeBits, host_visible, host_reads);
  Block* blk = nullptr;
  VkDeviceSize off = 0;
  for (auto& b : blocks_) {
    if (b.type != type || (host_visible != (b.mapped != nullptr))) continue;
    off = (b.used + req.alignment - 1) / req.alignment * req.alignment;
    if (off + req.size <= b.size) {
      blk = &b;
      break;
    }
  }
  if (!blk) {
    // Blocks of 32 MiB (device-local: weights, caches, activations) or 1 MiB (host-visible:
    // token ids, readback, staging), or one buffer's size when larger: at most one partly used
    // block per kind is memory the model does not use.
    const VkDeviceSize block_size = std::max<VkDeviceSize>(
        req.size, std::min<VkDeviceSize>(host_visible ? 1ull << 20 : 32ull << 20, di.max_alloc));
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = block_size;
    ai.memoryTypeIndex = type;
    VkMemoryAllocateFlagsInfo fi{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    fi.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    if (ctx_.use_buffer_address()) ai.pNext = &fi;
    VkDeviceMemory mem;
    // Tuning::memory_budget (VKLLM_VK_MEMORY_BUDGET): an allocation past it fails as the driver's
    // out-of-memory does (the bad-input catalogue exhausts GPU memory on any device this way).
    const uint64_t budget = ctx_.tuning().memory_budget;
    VkResult r = budget && !host_visible && device_bytes_ + block_size > budget
                     ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                     : vkAllocateMemory(ctx_.device(), &ai, nullptr, &mem);
    if (r != VK_SUCCESS)
      fail(
          "{}: cannot allocate {} MiB on Vulkan device {} ({}) after {} MiB: out of GPU memory; "
          "choose another device with --device or VKLLM_DEVICE (see `vkllm devices`), a "
          "smaller recipe, or a shorter --seq_len",
          what, block_size >> 20, di.index, di.name, device_bytes_ >> 20);
    void* mapped = nullptr;
    if (host_visible) VK_CHECK(vkMapMemory(ctx_.device(), mem, 0, VK_WHOLE_SIZE, 0, &mapped));
    blocks_.push_back({mem, block_size, 0, type, mapped});
    if (!host_visible) device_bytes_ += block_size;  // host-visible memory is not GPU memory
    blk = &blocks_.back();
    off = 0;
  }
  VK_CHECK(vkBindBufferMemory(ctx_.device(), buf, blk->mem, off));
  blk->used = off + req.size;
  Buffer out;
  out.buf = buf;
  out.size = size;
  if (blk->mapped) out.mapped = static_cast<uint8_t*>(blk->mapped) + off;
  return out;
}

void Allocator::upload(const Buffer& dst, VkDeviceSize offset, const void* src, VkDeviceSize n) {
  if (offset + n > dst.size)
    fail("vulkan upload: {} bytes at {} exceed a buffer of {}", n, offset, dst.size);
  if (dst.mapped) {
    std::memcpy(static_cast<uint8_t*>(dst.mapped) + offset, src, n);
    return;
  }
  if (!staging_.buf)
    staging_ =
        create(std::max<uint64_t>(1 << 20, ctx_.options().staging_bytes), true, "staging buffer");
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (VkDeviceSize done = 0; done < n;) {
    const VkDeviceSize c = std::min(n - done, staging_.size);
    std::memcpy(staging_.mapped, p + done, c);
    VkCommandBuffer cb = ctx_.begin_once();
    VkBufferCopy region{0, offset + done, c};
    vkCmdCopyBuffer(cb, staging_.buf, dst.buf, 1, &region);
    ctx_.submit_and_wait(cb);
    done += c;
  }
}

void Allocator::download(const Buffer& src, VkDeviceSize offset, void* dst, VkDeviceSize n) {
  if (offset + n > src.size)
    fail("vulkan download: {} bytes at {} exceed a buffer of {}", n, offset, src.size);
  if (src.mapped) {
    std::memcpy(dst, static_cast<const uint8_t*>(src.mapped) + offset, n);
    return;
  }
  if (!staging_.buf)
    staging_ =
        create(std::max<uint64_t>(1 << 20, ctx_.options().staging_bytes), true, "staging buffer");
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (VkDeviceSize done = 0; done < n;) {
    const VkDeviceSize c = std::min(n - done, staging_.size);
    VkCommandBuffer cb = ctx_.begin_once();
    VkBufferCopy region{offset + done, 0, c};
    vkCmdCopyBuffer(cb, src.buf, staging_.buf, 1, &region);
    ctx_.submit_and_wait(cb);
    std::memcpy(p + done, staging_.mapped, c);
    done += c;
  }
}

void Allocator::fill(const Buffer& b, uint32_t word) {
  VkCommandBuffer cb = ctx_.begin_once();
  vkCmdFillBuffer(cb, b.buf, 0, VK_WHOLE_SIZE, word);
  ctx_.submit_and_wait(cb);
}

namespace {
std::atomic<uint64_t> g_held{0}, g_peak{0};
std::mutex g_usage_mutex;
std::string g_device_name, g_driver;
}  // namespace

void usage_hold(uint64_t bytes) {
  const uint64_t now = g_held += bytes;
  for (uint64_t was = g_peak; now > was && !g_peak.compare_exchange_weak(was, now);) {
  }
}
void usage_release(uint64_t bytes) {
  g_held -= bytes;
}
void usage_device(const std::string& name, const std::string& driver) {
  std::lock_guard<std::mutex> lock(g_usage_mutex);
  g_device_name = name;
  g_driver = driver;
}

}  // namespace vkllm::vk

namespace vkllm {

VulkanUsage vulkan_usage() {
  std::lock_guard<std::mutex> lock(vk::g_usage_mutex);
  return {vk::g_peak.load(), vk::g_device_name, vk::g_driver};
}

}  // namespace vkllm
