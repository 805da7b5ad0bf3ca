// Compute pipelines built from the embedded SPIR-V, cached by (shader, specialization constants),
// and descriptor sets from growing pools.
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <future>
#include <map>
#include <memory>
#include <semaphore>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_kernels.h"
#include "core/error.h"

namespace vkllm::vk {

// One storage-buffer binding: a byte range of a buffer.
struct BufRange {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize range = 0;
};

// What a recording reads and writes, as the executor's barrier plan sees it.
struct Phase {
  std::vector<VkBuffer> reads, writes;
};

struct Kernel {
  const KernelDecl* decl = nullptr;  // its registry entry (bindings' access, push size)
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
  bool full_subgroups = false;  // created with full subgroups of the device's default size
  // The pipeline, compiled on a thread of its own (Kernels::get_words): waits for it, and rethrows
  // its creation's error.
  VkPipeline pipeline() const {
    if (ready.valid()) ready.get();
    return pipeline_;
  }
  VkPipeline pipeline_ = VK_NULL_HANDLE;  // (set by its creation, before `ready`)
  std::shared_future<void> ready;
};

// The reads and writes of a dispatch of `k` over `ranges` (one per binding), from the access its
// declaration gives each binding.
Phase phase_of(const Kernel& k, std::span<const BufRange> ranges);
// Adds p's reads and writes to `into` (one stage of several dispatches).
void merge(Phase& into, const Phase& p);

struct ShaderBlob;
// The workgroup size (x, y, z) of a compute module under the specialization `words` (the values of
// `fields`, vk_kernels.h): its LocalSize, x from the constant local_size_x_id names; zeros when it
// declares none.
std::array<uint32_t, 3> local_size(const ShaderBlob& b, std::span<const SpecField> fields,
                                   std::span<const uint32_t> words);

class Kernels {
 public:
  explicit Kernels(Context& ctx);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  // Module k (its fp16 twin with f16) specialized by `spec`, the struct its kernels.def line
  // declares. Made on first use.
  template <class S>
  const Kernel& get(Shader k, bool f16, const S& spec) {
    if (kernel_decl(k).spec_fields.data() != spec_fields<S>().data())
      fail("vulkan: kernel {} is specialized by another struct", kernel_decl(k).name);
    const auto w = spec_words(spec);
    return get_words(k, f16, w);
  }
  // The same, with the values of the declaration's spec fields in their order.
  const Kernel& get_words(Shader k, bool f16, std::span<const uint32_t> words);
  // A descriptor set of `k`'s layout bound to `ranges` (one per binding, in order).
  VkDescriptorSet make_set(const Kernel& k, std::span<const BufRange> ranges);
  Context& context() { return ctx_; }
  // Waits until every pipeline made so far is compiled (rethrowing the first error): an
  // executor's ops request theirs as they are prepared, so that the driver compiles them at once,
  // a thread each (at most the machine's cores), then waits once.
  void wait_all() const;

 private:
  void print_statistics(const std::string& key, VkPipeline pipeline) const;
  Context& ctx_;
  std::map<std::string, std::unique_ptr<Kernel>> cache_;
  std::vector<VkDescriptorPool> pools_;
  std::counting_semaphore<256> compiling_{1};  // (sized in the constructor)
};

}  // namespace vkllm::vk
