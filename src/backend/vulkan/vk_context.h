// Vulkan device layer: instance (optional validation), physical device choice, one compute queue,
// capability detection with an environment switch per optional path.
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/vulkan_options.h"

namespace vkllm::vk {

[[noreturn]] void vk_fail(const char* what, VkResult r);
#define VK_CHECK(expr)                                           \
  do {                                                           \
    VkResult vk_r_ = (expr);                                     \
    if (vk_r_ != VK_SUCCESS) ::vkllm::vk::vk_fail(#expr, vk_r_); \
  } while (0)

// A cooperative matrix shape M x N x K (A is M x K, B K x N, C M x N); zeros: none.
struct CoopmatShape {
  uint32_t m = 0, n = 0, k = 0;
  explicit operator bool() const { return m > 0; }
};

// What `vkllm devices` lists and what kernel selection looks at.
struct DeviceInfo {
  uint32_t index = 0;
  std::string name, type, driver, api_version;
  uint32_t api = 0;
  // VkPhysicalDeviceProperties' identity of the device and driver (the pipeline cache's key).
  uint32_t vendor_id = 0, device_id = 0, driver_version = 0;
  std::array<uint8_t, VK_UUID_SIZE> cache_uuid{};  // pipelineCacheUUID
  bool creation_feedback = false;  // VK_EXT_pipeline_creation_feedback (core in Vulkan 1.3)
  uint64_t device_local_bytes = 0;
  uint32_t subgroup_size = 0, subgroup_min = 0, subgroup_max = 0;
  uint32_t max_shared = 0;   // maxComputeSharedMemorySize, bytes
  uint32_t max_wg_size = 0;  // threads a workgroup: the smaller of the invocations and x limits
  bool subgroup_size_control = false;
  uint32_t max_wg_subgroups = 0;  // maxComputeWorkgroupSubgroups (subgroup size control)
  uint32_t compute_units = 0;     // SMs / CUs where the driver says (NV SM builtins, AMD core)
  bool sm_builtins = false;       // VK_NV_shader_sm_builtins reported compute_units
  bool buffer_address = false;    // bufferDeviceAddress (Vulkan 1.2): the decode chain's tables
  bool subgroup_arith = false;    // subgroup arithmetic and shuffles in compute shaders (required)
  bool fp16_arith = false, storage16 = false, storage8 = false, int8_arith = false;
  bool int_dot = false, int_dot_accel = false;  // shaderIntegerDotProduct; 4x8 packed accelerated
  bool coopmat_khr = false, coopmat_nv = false;
  // What the tiled prefill GEMM's VKLLM_COOPMAT variant needs (linear_8da4w_mm.comp):
  // VK_NV_cooperative_matrix listing 16 x 8 x 32 int8 x int8 -> int32 at subgroup scope, its
  // feature, the Vulkan memory model and shaderInt8, on 32-lane subgroups.
  bool coopmat_int8 = false;
  bool coopmat_f16 = false;  // and 16 x 8 x 16 fp16 x fp16 -> fp32 (`vkllm bench --gemm`'s ceiling)
  // VK_KHR_cooperative_matrix with its feature, the Vulkan memory model and Vulkan 1.3: a shape
  // of int8 x int8 -> int32 (with shaderInt8) and of fp16 x fp16 -> fp32 (with shaderFloat16) at
  // subgroup scope from the device's list, zeros where none (vk_device_info.cpp query_khr_coopmat);
  // `vkllm bench --gemm`'s KHR ceiling rows (gemm_peak_khr.comp). Not read under validation.
  CoopmatShape khr_int8, khr_f16;
  bool compute_queue = false, timestamps = false;
  uint64_t max_storage_range = 0, max_alloc = 0;
  uint32_t min_storage_align = 0;
  float timestamp_period = 0;
};

// Enumerates the devices through a temporary instance (no validation).
std::vector<DeviceInfo> list_devices();

// Number of validation / debug messages printed by every context since the process started.
uint64_t validation_message_count();

class PipelineCache;
struct PipelineCacheStats;

class Context {
 public:
  explicit Context(const VulkanOptions& opt);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  const VulkanOptions& options() const { return opt_; }
  const Tuning& tuning() const { return opt_.tuning; }
  VkDevice device() const { return dev_; }
  VkPhysicalDevice physical() const { return phys_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return qfam_; }
  // Enabled optional paths (device support, options and environment switches combined).
  bool use_fp16() const { return use_fp16_; }
  bool use_int_dot() const { return use_int_dot_; }
  bool use_coopmat() const { return use_coopmat_; }
  // fp16 cooperative matrices for the prefill attention of fp16 caches (attention_prefill_coopmat)
  bool use_coopmat_f16() const { return use_coopmat_f16_; }
  // KHR cooperative matrices enabled on the device (DeviceInfo::khr_int8 or khr_f16 listed, the
  // VK_KERNEL_KHR modules embedded, VKLLM_NO_COOPMAT unset): gemm_peak_khr's rows of
  // `vkllm bench --gemm`.
  bool use_coopmat_khr() const { return use_coopmat_khr_; }
  // Buffer device addresses are enabled (every Allocator buffer has one: address()).
  bool use_buffer_address() const { return use_bda_; }
  uint64_t address(VkBuffer b) const;
  // VKLLM_PIPELINE_STATS=1 on a device with VK_KHR_pipeline_executable_properties: every pipeline
  // is created capturing its compiler statistics (registers, spills, shared memory: whatever the
  // driver reports), and Kernels::get prints them (docs/vulkan.md).
  bool pipeline_stats() const { return pipeline_stats_; }
  // VKLLM_CHAIN_CLOCK=1 on a device with VK_KHR_shader_clock's subgroup clock: the decode chains
  // time their phases in SM cycles (linear_8da4w_chain.comp VKLLM_CLOCK, docs/vulkan.md).
  bool chain_clock() const { return chain_clock_; }
  // Largest byte range one descriptor binding may cover (multiple of 256).
  uint64_t max_binding() const { return max_binding_; }
  // Rows one workgroup of a mat-vec kernel (matvec.glsl) takes for a weight of n rows: one per
  // subgroup on GPUs; on CPU devices (lavapipe), where each workgroup costs a thread hand-off,
  // enough that a few hundred workgroups cover the weight.
  uint32_t matvec_rows(uint64_t n) const;
  uint32_t storage_align() const { return info_.min_storage_align; }
  // Memory type with the required flags among `bits`; host_visible also wants HOST_COHERENT.
  // host_reads: a host-visible buffer the host reads back (a cached type where there is one: the
  // CPU reads write-combined memory an order of magnitude slower).
  uint32_t memory_type(uint32_t bits, bool host_visible, bool host_reads = false) const;

  // The pipeline cache every pipeline of this Context is created with (vk_pipeline_cache.h;
  // VK_NULL_HANDLE when off), loaded from its file when the device opens and written back, when
  // it changed, by save_pipeline_cache() and when the Context is destroyed.
  VkPipelineCache pipeline_cache() const;
  void save_pipeline_cache() noexcept;
  PipelineCacheStats pipeline_cache_stats() const;  // (include vk_pipeline_cache.h)
  // Counts one vkCreateComputePipelines (Kernels::get) in the stats above.
  void count_pipeline(double ms, bool cache_hit);

  // One-shot command buffers for uploads and tests.
  VkCommandBuffer begin_once();
  void submit_and_wait(VkCommandBuffer cb);  // ends, submits, waits, frees

 private:
  VulkanOptions opt_;
  VkInstance inst_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t qfam_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  std::unique_ptr<PipelineCache> pcache_;
  VkPhysicalDeviceMemoryProperties mem_{};
  DeviceInfo info_;
  bool use_fp16_ = false, use_int_dot_ = false, use_coopmat_ = false, use_bda_ = false;
  bool use_coopmat_f16_ = false, use_coopmat_khr_ = false;
  bool pipeline_stats_ = false;
  bool chain_clock_ = false;
  uint64_t max_binding_ = 0;
};

// grid_sync.glsl's spin limit for this device: on GPUs the polls of the arrival counter before a
// wait gives up (seconds); on CPU devices bit 31 and the loop iterations of a dispatch's waits,
// 256 polls each (llvmpipe ends an invocation's loops after 65,535 iterations in all; half of
// them is left to the kernel's own loops).
inline uint32_t grid_spin_limit(const DeviceInfo& d) {
  return d.type == "cpu" ? (1u << 31) | (1u << 15) : 1u << 22;
}

}  // namespace vkllm::vk
