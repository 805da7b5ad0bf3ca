// The device's capabilities as the backend reads them (DeviceInfo): properties, features,
// extensions and the cooperative-matrix shapes it lists, queried without opening the device.
// Internal to the Vulkan backend (vk_context.cpp lists and opens devices with it).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

// VK_KHR_cooperative_matrix's structures and query, which Debian 12's Vulkan headers (1.3.239)
// predate: the registry's layouts and values (extension 507).
constexpr auto kStructCoopmatFeaturesKhr = static_cast<VkStructureType>(1000506000);
constexpr auto kStructCoopmatPropertiesKhr = static_cast<VkStructureType>(1000506001);
struct CoopmatFeaturesKhr {  // VkPhysicalDeviceCooperativeMatrixFeaturesKHR
  VkStructureType sType = kStructCoopmatFeaturesKhr;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};

// Whether `exts` names the extension `name`.
bool has_ext(const std::vector<VkExtensionProperties>& exts, const char* name);
// The extensions a physical device offers.
std::vector<VkExtensionProperties> device_exts(VkPhysicalDevice pd);
// The DeviceInfo of physical device `index` (validated: its instance has the validation layer;
// khr: VK_KHR_cooperative_matrix is queried where listed).
DeviceInfo query_device(VkInstance inst, VkPhysicalDevice pd, uint32_t index, bool validated,
                        bool khr);

}  // namespace vkllm::vk
