// The program's weights on one device (VulkanLoaded): the device opened, the weights validated and
// uploaded once, shared by every executor made from it (vulkan_executor.cpp). Internal to the
// Vulkan backend.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vulkan_executor.h"

namespace vkllm {

inline double ms_between(std::chrono::steady_clock::time_point a,
                         std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The program's weights on one device: validated, uploaded once, shared by every executor made
// from it. Executors own the rest (KV caches, activations, pipelines, command buffer).
class VulkanLoaded final : public LoadedProgram, public std::enable_shared_from_this<VulkanLoaded> {
 public:
  VulkanLoaded(const Program& prog, const WeightSource& weights, const VulkanOptions& opt);
  ~VulkanLoaded() override { vk::usage_release(held); }

  std::unique_ptr<Executor> make_executor() override;
  std::unique_ptr<BatchExecutor> make_batch_executor(int num_blocks, int block_tokens, int max_rows,
                                                     int window_blocks) override;
  std::string device_name() const override { return ctx->info().name; }

  const Program& p;
  const WeightSource& w;
  std::chrono::steady_clock::time_point t0;  // (declared before ctx: the device's start)
  std::unique_ptr<vk::Context> ctx;
  vk::Allocator alloc;                   // the weights
  std::vector<vk::Buffer> bufs;          // by tensor index: the used weights, empty for other kinds
  int max_t = 1;                         // rows of every [-1, N] activation buffer
  uint64_t held = 0;                     // device bytes of the weights
  double device_ms = 0, weights_ms = 0;  // the load's stages (vulkan_load_stages)

 private:
  void choose_max_tokens(int want);
};

}  // namespace vkllm
