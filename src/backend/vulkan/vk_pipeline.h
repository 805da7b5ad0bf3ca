// Compute pipelines built from the embedded SPIR-V, cached by (shader, specialization constants),
// and descriptor sets from growing pools.
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

struct Kernel {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
  bool full_subgroups = false;  // created with full subgroups of the device's default size
};

// One storage-buffer binding: a byte range of a buffer.
struct BufRange {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize range = 0;
};

struct ShaderBlob;
// The workgroup size (x, y, z) of a compute module under the specialization `spec` (constants 1,
// 2, ...): its LocalSize, x from the constant local_size_x_id names; zeros when it declares none.
std::array<uint32_t, 3> local_size(const ShaderBlob& b, const std::vector<uint32_t>& spec);

class Kernels {
 public:
  explicit Kernels(Context& ctx) : ctx_(ctx) {}
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  // `spec` holds specialization constants 1, 2, ... (constant 0 is unused: the local size is
  // fixed).
  const Kernel& get(const std::string& shader, uint32_t bindings, uint32_t push_bytes,
                    const std::vector<uint32_t>& spec);
  // A descriptor set of `k`'s layout bound to `ranges` (one per binding, in order).
  VkDescriptorSet make_set(const Kernel& k, std::span<const BufRange> ranges);
  Context& context() { return ctx_; }

 private:
  void print_statistics(const std::string& key, VkPipeline pipeline) const;
  Context& ctx_;
  std::map<std::string, std::unique_ptr<Kernel>> cache_;
  std::vector<VkDescriptorPool> pools_;
};

}  // namespace vkllm::vk
