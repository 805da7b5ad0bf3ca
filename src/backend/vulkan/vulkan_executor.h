// The Vulkan interpreter of a program: weights uploaded once, activations for up to max_tokens
// tokens (longer prompts run in chunks), KV caches on the device, argmax on the device.
#pragma once
#include <memory>
#include <string>

#include "backend/vulkan/vulkan_options.h"
#include "runtime/executor.h"

namespace vkllm {

// The program and the weight source must outlive the executor. Throws Error with one clear line
// when no device fits (naming what is missing and how to choose another device).
std::unique_ptr<Executor> make_vulkan_executor(const Program& program, const WeightSource& weights,
                                               const VulkanOptions& options);

// What this process's Vulkan executors used, for run statistics: the most device memory they
// held at once (bytes) and the name of the device of the last one created.
struct VulkanUsage {
  uint64_t peak_device_bytes = 0;
  std::string device_name;
};
VulkanUsage vulkan_usage();

}  // namespace vkllm
