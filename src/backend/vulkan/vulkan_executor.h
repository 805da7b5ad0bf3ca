// The Vulkan interpreter of a program: weights uploaded once, activations for up to max_tokens
// tokens (longer prompts run in chunks), KV caches on the device, argmax on the device.
#pragma once
#include <memory>
#include <string>

#include "backend/executor.h"
#include "backend/vulkan/vk_pipeline_cache.h"
#include "backend/vulkan/vulkan_options.h"

namespace vkllm {

// Opens the device and uploads the program's weights once; every executor made from the result
// shares them and owns only its KV caches and activations. The program and the weight source must
// outlive it. Throws Error with one clear line when no device fits (naming what is missing and
// how to choose another device).
std::shared_ptr<LoadedProgram> load_vulkan_program(const Program& program,
                                                   const WeightSource& weights,
                                                   const VulkanOptions& options);

// One executor with weights of its own: load_vulkan_program(...)->make_executor().
std::unique_ptr<Executor> make_vulkan_executor(const Program& program, const WeightSource& weights,
                                               const VulkanOptions& options);

// Where a loaded Vulkan program's start went: opening the device (its probes included), uploading
// the weights, and what the device's pipeline cache did for every pipeline created so far (the
// probes' and every executor's).
struct VulkanLoadStages {
  double device_ms = 0, weights_ms = 0;
  vk::PipelineCacheStats pipelines;
};
// Of a program load_vulkan_program returned; throws Error for another backend's.
VulkanLoadStages vulkan_load_stages(const LoadedProgram& loaded);

// What this process's Vulkan programs and executors used, for run statistics: the most device
// memory they held at once (bytes: weights, caches, activations, scratch) and the device and
// driver of the last executor created.
struct VulkanUsage {
  uint64_t peak_device_bytes = 0;
  std::string device_name, driver;
};
VulkanUsage vulkan_usage();

}  // namespace vkllm
