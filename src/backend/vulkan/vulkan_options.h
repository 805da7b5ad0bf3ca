// Options of the Vulkan backend (device choice, validation, limits, tuning). With `environment`
// on, the Context reads the VKLLM_* variables into them once (read_environment, vk_tuning.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "backend/vulkan/vk_tuning.h"

namespace vkllm {

struct VulkanOptions {
  // Device index or case-insensitive name substring; empty: $VKLLM_DEVICE, else the first
  // discrete GPU, else integrated, else any.
  std::string device;
  // Khronos validation layer and a debug messenger that prints and counts every message
  // (also on with VKLLM_VALIDATION=1). sync_validation adds synchronization validation.
  bool validation = false;
  bool sync_validation = false;
  // Largest number of tokens one forward records; longer prompts are split (0: 512).
  int max_tokens = 0;
  // Cap on one descriptor binding (0: the device's maxStorageBufferRange). Tests lower it to
  // exercise the chunked bindings used for tensors larger than the range.
  uint64_t max_binding_bytes = 0;
  // Host staging buffer for uploads (bounded; weights stream through it).
  uint64_t staging_bytes = 64ull << 20;
  // Optional paths; each also off with its environment switch.
  bool no_int_dot = false;  // VKLLM_NO_INT_DOT=1: portable int8 dot product
  bool no_coopmat = false;  // VKLLM_NO_COOPMAT=1: prefill without cooperative matrices
  bool no_fp16 = false;     // VKLLM_NO_FP16=1: no fp16 storage (programs with F16 tensors fail)
  bool no_fusion = false;   // VKLLM_NO_FUSION=1: every forward runs every op alone
  // VKLLM_KHR_COOPMAT=1: read and enable VK_KHR_cooperative_matrix (its structures are declared by
  // hand for Debian 12's headers; off until checked on a GPU).
  bool khr_coopmat = false;
  // Apply the verdict `vkllm selftest` cached for the device (vk_verdict.h); the selftest itself
  // turns it off to test every variant.
  bool selftest_verdict = true;
  bool profile = false;     // per-op GPU timestamps (VKLLM_PROFILE=1)
  Tuning tuning;            // the planner's knobs (vk_tuning.h)
  bool environment = true;  // read the VKLLM_* variables when the Context is made
};

}  // namespace vkllm
