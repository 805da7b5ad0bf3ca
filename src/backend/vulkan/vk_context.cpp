#include "backend/vulkan/vk_context.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "backend/vulkan/vk_device_info.h"
#include "backend/vulkan/vk_kernels.h"
#include "backend/vulkan/vk_pipeline_cache.h"
#include "backend/vulkan/vk_probe.h"
#include "backend/vulkan/vk_shaders.h"
#include "backend/vulkan/vk_verdict.h"
#include "core/error.h"

namespace vkllm::vk {

namespace {

std::atomic<uint64_t> g_messages{0};

const char* result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY (out of GPU memory)";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver found)";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    default:
      return "VkResult";
  }
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                          VkDebugUtilsMessageTypeFlagsEXT,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  g_messages.fetch_add(1);
  std::fprintf(stderr, "vkllm: vulkan %s: %s\n",
               sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "validation error"
                                                                    : "validation warning",
               data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

VkInstance make_instance(bool validation, bool sync_validation) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "vkllm";
  uint32_t loader = VK_API_VERSION_1_0;
  vkEnumerateInstanceVersion(&loader);
  if (loader < VK_API_VERSION_1_1)
    fail("the Vulkan loader supports only 1.0; vkllm needs Vulkan 1.1");
  app.apiVersion = std::min<uint32_t>(
      VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(loader), VK_API_VERSION_MINOR(loader), 0),
      VK_API_VERSION_1_3);
  std::vector<const char*> layers, exts;
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> iexts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, iexts.data());
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  if (has_ext(iexts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    exts.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  VkValidationFeaturesEXT vf{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  const VkValidationFeatureEnableEXT sync =
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  if (validation) {
    uint32_t nl = 0;
    vkEnumerateInstanceLayerProperties(&nl, nullptr);
    std::vector<VkLayerProperties> ls(nl);
    vkEnumerateInstanceLayerProperties(&nl, ls.data());
    bool found = false;
    for (auto& l : ls)
      found = found || std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    if (!found)
      fail(
          "Vulkan validation was requested but VK_LAYER_KHRONOS_validation is not installed "
          "(Debian: apt-get install vulkan-validationlayers)");
    if (!has_ext(iexts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
      fail("Vulkan validation needs VK_EXT_debug_utils");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    exts.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (sync_validation) {
      vf.enabledValidationFeatureCount = 1;
      vf.pEnabledValidationFeatures = &sync;
      ci.pNext = &vf;
    }
  }
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  ci.ppEnabledExtensionNames = exts.data();
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = vkCreateInstance(&ci, nullptr, &inst);
  if (r != VK_SUCCESS)
    fail("cannot create a Vulkan instance: {} (is a Vulkan driver installed?)", result_name(r));
  return inst;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> v(n);
  if (n) vkEnumeratePhysicalDevices(inst, &n, v.data());
  return v;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void vk_fail(const char* what, VkResult r) {
  fail("vulkan: {} failed: {} ({})", what, result_name(r), static_cast<int>(r));
}

uint64_t validation_message_count() {
  return g_messages.load();
}

std::vector<DeviceInfo> list_devices() {
  VkInstance inst = make_instance(false, false);
  std::vector<DeviceInfo> out;
  auto pds = physical_devices(inst);
  VulkanOptions opt;
  read_environment(opt);
  for (uint32_t i = 0; i < pds.size(); ++i)
    out.push_back(query_device(inst, pds[i], i, false, opt.khr_coopmat));
  vkDestroyInstance(inst, nullptr);
  return out;
}

Context::Context(const VulkanOptions& opt) : opt_(opt) {
  if (opt_.environment) {
    read_environment(opt_);
    opt_.environment = false;  // read once: copies of these options keep what was read
  }
  if (!kMeasureBuild) {  // a release build never gives wrong results on purpose
    const Tuning d;
    opt_.tuning.gemm_ablate = d.gemm_ablate;
    opt_.tuning.att_measure = d.att_measure;
    opt_.tuning.chain_noload = d.chain_noload;
    opt_.tuning.chain_clock = d.chain_clock;
    opt_.tuning.corrupt_op = d.corrupt_op;
  }

  inst_ = make_instance(opt_.validation, opt_.sync_validation);
  if (opt_.validation) {
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = on_message;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(inst_, "vkCreateDebugUtilsMessengerEXT"));
    if (!create) fail("vulkan: vkCreateDebugUtilsMessengerEXT is unavailable");
    VK_CHECK(create(inst_, &mi, nullptr, &messenger_));
  }

  auto pds = physical_devices(inst_);
  if (pds.empty())
    fail(
        "no Vulkan device found (install a driver; for a CPU device: apt-get install "
        "mesa-vulkan-drivers)");
  std::vector<DeviceInfo> infos;
  for (uint32_t i = 0; i < pds.size(); ++i)
    infos.push_back(query_device(inst_, pds[i], i, opt_.validation, opt_.khr_coopmat));
  auto listing = [&] {
    std::string s;
    for (auto& d : infos) s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", d.index, d.name);
    return s;
  };
  int chosen = -1;
  if (!opt_.device.empty()) {
    const std::string& sel = opt_.device;
    if (std::all_of(sel.begin(), sel.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const unsigned long idx = sel.size() > 9 ? ~0ul : std::stoul(sel);  // no out_of_range
      if (idx >= infos.size())
        fail("Vulkan device index {} does not exist (devices: {})", sel, listing());
      chosen = static_cast<int>(idx);
    } else {
      for (auto& d : infos)
        if (lower(d.name).find(lower(sel)) != std::string::npos) {
          chosen = static_cast<int>(d.index);
          break;
        }
      if (chosen < 0) fail("no Vulkan device name contains '{}' (devices: {})", sel, listing());
    }
  } else {
    int best_rank = 99;
    for (auto& d : infos) {
      if (d.api < VK_API_VERSION_1_1 || !d.compute_queue) continue;
      const int rank = d.type == "discrete"     ? 0
                       : d.type == "integrated" ? 1
                       : d.type == "virtual"    ? 2
                                                : 3;
      if (rank < best_rank) {
        best_rank = rank;
        chosen = static_cast<int>(d.index);
      }
    }
    if (chosen < 0) fail("no Vulkan 1.1 device with a compute queue (devices: {})", listing());
  }
  info_ = infos[chosen];
  phys_ = pds[chosen];
  const std::string how =
      "choose another device with --device <index|name> or VKLLM_DEVICE (see `vkllm devices`)";
  if (info_.api < VK_API_VERSION_1_1)
    fail("Vulkan device {} ({}) supports only Vulkan {}; vkllm needs 1.1; {}", info_.index,
         info_.name, info_.api_version, how);
  if (!info_.compute_queue)
    fail("Vulkan device {} ({}) has no compute queue; {}", info_.index, info_.name, how);
  if (info_.max_alloc == 0 || info_.max_storage_range < (1u << 20))
    fail("Vulkan device {} ({}) allows storage buffers of only {} bytes; {}", info_.index,
         info_.name, info_.max_storage_range, how);
  if (!info_.subgroup_arith)
    fail("Vulkan device {} ({}) lacks subgroup arithmetic or shuffles in compute shaders; {}",
         info_.index, info_.name, how);
  if (opt_.selftest_verdict) apply_verdict(info_, opt_);
  use_fp16_ = info_.storage16 && !opt_.no_fp16;
  use_int_dot_ = info_.int_dot && !opt_.no_int_dot;
  use_coopmat_ = info_.coopmat_int8 && !opt_.no_coopmat;
  use_coopmat_f16_ = use_coopmat_ && use_fp16_ && info_.coopmat_f16;
  // KHR cooperative matrices where the device lists a shape and this build has the modules
  // (configure found a glslangValidator for them: kernels.def VK_KERNEL_KHR).
  use_coopmat_khr_ = (info_.khr_int8 || info_.khr_f16) && !opt_.no_coopmat &&
                     find_shader(module_name(Shader::gemm_peak_khr, false)) != nullptr;
  use_bda_ = info_.buffer_address;
  max_binding_ = info_.max_storage_range;
  if (opt_.max_binding_bytes)
    max_binding_ = std::min<uint64_t>(max_binding_, opt_.max_binding_bytes);
  max_binding_ &= ~uint64_t(255);

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
  qfam_ = UINT32_MAX;
  for (uint32_t i = 0; i < nq && qfam_ == UINT32_MAX; ++i)  // prefer a compute-only family
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
      qfam_ = i;
  for (uint32_t i = 0; i < nq && qfam_ == UINT32_MAX; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) qfam_ = i;
  info_.timestamps = qf[qfam_].timestampValidBits > 0 && info_.timestamp_period > 0;

  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = qfam_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  std::vector<const char*> exts;
  const auto dexts = device_exts(phys_);
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDevice16BitStorageFeatures s16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures idf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  f2.pNext = &s16;
  s16.storageBuffer16BitAccess = use_fp16_;
  if (use_int_dot_) {
    s16.pNext = &idf;
    idf.shaderIntegerDotProduct = VK_TRUE;
    // Enabled whenever listed: the SPIR-V extension is then allowed whatever the API version.
    if (has_ext(dexts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME))
      exts.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    else if (info_.api < VK_API_VERSION_1_3)
      fail("Vulkan device {} reports integer dot product without its extension", info_.index);
  }
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceVulkanMemoryModelFeatures mmf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  VkPhysicalDeviceShaderFloat16Int8Features i8f{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  CoopmatFeaturesKhr kcf;
  // Either kind of cooperative matrix: the memory model, int8 and fp16 arithmetic (core in
  // Vulkan 1.2, which both imply).
  if (use_coopmat_ || use_coopmat_khr_) {
    mmf.vulkanMemoryModel = VK_TRUE;
    mmf.vulkanMemoryModelDeviceScope = VK_TRUE;
    i8f.shaderInt8 = use_coopmat_ || (use_coopmat_khr_ && info_.khr_int8);
    i8f.shaderFloat16 = use_coopmat_f16_ || (use_coopmat_khr_ && info_.khr_f16);
    mmf.pNext = &i8f;
    i8f.pNext = f2.pNext;
    f2.pNext = &mmf;
  }
  if (use_coopmat_) {
    cmf.cooperativeMatrix = VK_TRUE;
    cmf.pNext = f2.pNext;
    f2.pNext = &cmf;
    exts.push_back("VK_NV_cooperative_matrix");
  }
  if (use_coopmat_khr_) {
    kcf.cooperativeMatrix = VK_TRUE;
    kcf.pNext = f2.pNext;
    f2.pNext = &kcf;
    exts.push_back("VK_KHR_cooperative_matrix");
  }
  // Full subgroups of the device's default size in every kernel (Kernels::get): the kernels stride
  // by gl_SubgroupSize, and a driver may otherwise launch partial subgroups (lavapipe at 32 lanes
  // does: docs/portability.md).
  VkPhysicalDeviceSubgroupSizeControlFeatures sscf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  if (info_.subgroup_size_control) {
    sscf.subgroupSizeControl = VK_TRUE;
    sscf.computeFullSubgroups = VK_TRUE;
    sscf.pNext = f2.pNext;
    f2.pNext = &sscf;
    if (has_ext(dexts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME))
      exts.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  }
  VkPhysicalDeviceBufferDeviceAddressFeatures bdaf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  if (use_bda_) {
    bdaf.bufferDeviceAddress = VK_TRUE;
    bdaf.pNext = f2.pNext;
    f2.pNext = &bdaf;
  }
  // Features a measurement switch asks for: chained into the device's features with their
  // extension where the device has them, else one line says so.
  auto optional_feature = [&](const char* sw, bool have, auto& feature, const char* ext,
                              const char* without) {
    if (!have) {
      fmt::print(stderr, "vkllm: {}: {} has no {}; {}\n", sw, info_.name, ext, without);
      return false;
    }
    feature.pNext = f2.pNext;
    f2.pNext = &feature;
    exts.push_back(ext);
    return true;
  };
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  pef.pipelineExecutableInfo = VK_TRUE;
  if (opt_.tuning.pipeline_stats)
    pipeline_stats_ =
        optional_feature("VKLLM_PIPELINE_STATS",
                         has_ext(dexts, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME), pef,
                         VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME, "no statistics");
  VkPhysicalDeviceShaderClockFeaturesKHR clkf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
  if (opt_.tuning.chain_clock) {
    VkPhysicalDeviceFeatures2 q{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    q.pNext = &clkf;
    if (has_ext(dexts, VK_KHR_SHADER_CLOCK_EXTENSION_NAME)) vkGetPhysicalDeviceFeatures2(phys_, &q);
    const bool have = clkf.shaderSubgroupClock;
    clkf = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
    clkf.shaderSubgroupClock = VK_TRUE;
    chain_clock_ = optional_feature("VKLLM_CHAIN_CLOCK", have, clkf,
                                    VK_KHR_SHADER_CLOCK_EXTENSION_NAME, "no chain clock");
  }
  if (info_.creation_feedback && info_.api < VK_API_VERSION_1_3)
    exts.push_back(VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME);
  if (has_ext(dexts, "VK_KHR_portability_subset")) exts.push_back("VK_KHR_portability_subset");
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  VkResult r = vkCreateDevice(phys_, &dci, nullptr, &dev_);
  if (r != VK_SUCCESS)
    fail("cannot open Vulkan device {} ({}): {}; {}", info_.index, info_.name, result_name(r), how);
  vkGetDeviceQueue(dev_, qfam_, 0, &queue_);
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_);
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = qfam_;
  VK_CHECK(vkCreateCommandPool(dev_, &pci, nullptr, &pool_));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_CHECK(vkCreateFence(dev_, &fci, nullptr, &fence_));
  // Before the probes below: their pipelines are the cache's too.
  pcache_ = std::make_unique<PipelineCache>(dev_, info_, opt_.tuning.pipeline_cache, opt_.profile);
  // The prefill GEMM's cooperative-matrix variant forms its terms from the accumulators in
  // registers, four elements a lane: where the device's layout differs, the int8-dot path runs.
  if (use_coopmat_) {
    const std::string why = probe_coopmat_accumulator(*this);
    if (!why.empty()) {
      use_coopmat_ = use_coopmat_f16_ = false;
      std::fprintf(stderr, "vkllm: the prefill GEMM runs without cooperative matrices: %s\n",
                   why.c_str());
    }
  }
  // The prefill attention's fragment layouts (attention_prefill_coopmat.comp).
  if (use_coopmat_f16_) {
    const std::string why = probe_coopmat_fragments(*this);
    if (!why.empty()) {
      use_coopmat_f16_ = false;
      std::fprintf(stderr, "vkllm: the prefill attention runs without cooperative matrices: %s\n",
                   why.c_str());
    }
  }
}

uint64_t Context::address(VkBuffer b) const {
  if (!use_bda_) fail("vulkan backend: device addresses are not enabled on this device");
  VkBufferDeviceAddressInfo ai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  ai.buffer = b;
  return vkGetBufferDeviceAddress(dev_, &ai);
}

VkPipelineCache Context::pipeline_cache() const {
  return pcache_ ? pcache_->handle() : VK_NULL_HANDLE;
}

void Context::save_pipeline_cache() noexcept {
  if (pcache_) pcache_->save();
}

PipelineCacheStats Context::pipeline_cache_stats() const {
  return pcache_ ? pcache_->stats() : PipelineCacheStats{};
}

void Context::count_pipeline(double ms, bool cache_hit) {
  if (pcache_) pcache_->count(ms, cache_hit);
}

Context::~Context() {
  if (dev_) {
    vkDeviceWaitIdle(dev_);
    if (pcache_) pcache_->save();
    pcache_.reset();
    vkDestroyFence(dev_, fence_, nullptr);
    vkDestroyCommandPool(dev_, pool_, nullptr);
    vkDestroyDevice(dev_, nullptr);
  }
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(inst_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(inst_, messenger_, nullptr);
  }
  if (inst_) vkDestroyInstance(inst_, nullptr);
}

uint32_t Context::matvec_rows(uint64_t n) const {
  const uint32_t per_group = std::max<uint32_t>(1, 64 / std::max<uint32_t>(1, info_.subgroup_size));
  if (info_.type != "cpu") return per_group;
  const uint64_t per_subgroup = std::clamp<uint64_t>(n / (per_group * 256ull), 1, 64);
  return static_cast<uint32_t>(per_group * per_subgroup);
}

uint32_t Context::memory_type(uint32_t bits, bool host_visible, bool host_reads) const {
  if (host_visible && host_reads) {
    const VkMemoryPropertyFlags cached = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    for (uint32_t i = 0; i < mem_.memoryTypeCount; ++i)
      if ((bits & (1u << i)) && (mem_.memoryTypes[i].propertyFlags & cached) == cached) return i;
  }
  const VkMemoryPropertyFlags want =
      host_visible ? (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
                   : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  for (uint32_t i = 0; i < mem_.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (mem_.memoryTypes[i].propertyFlags & want) == want) return i;
  if (!host_visible)  // no device-local type fits: any type will do
    for (uint32_t i = 0; i < mem_.memoryTypeCount; ++i)
      if (bits & (1u << i)) return i;
  fail("Vulkan device {} ({}) has no suitable {} memory type", info_.index, info_.name,
       host_visible ? "host-visible" : "device");
}

VkCommandBuffer Context::begin_once() {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  VK_CHECK(vkAllocateCommandBuffers(dev_, &ai, &cb));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK_CHECK(vkBeginCommandBuffer(cb, &bi));
  return cb;
}

void Context::submit_and_wait(VkCommandBuffer cb) {
  VK_CHECK(vkEndCommandBuffer(cb));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  VK_CHECK(vkQueueSubmit(queue_, 1, &si, fence_));
  VK_CHECK(vkWaitForFences(dev_, 1, &fence_, VK_TRUE, UINT64_MAX));
  VK_CHECK(vkResetFences(dev_, 1, &fence_));
  vkFreeCommandBuffers(dev_, pool_, 1, &cb);
}

}  // namespace vkllm::vk
