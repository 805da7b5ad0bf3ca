#include "backend/vulkan/vk_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/vulkan/vk_shaders.h"
#include "core/error.h"

namespace vkllm::vk {

const ShaderBlob* find_shader(std::string_view name) {
  for (const ShaderBlob& b : all_shaders())
    if (name == b.name) return &b;
  return nullptr;
}

std::array<uint32_t, 3> local_size(const ShaderBlob& b, std::span<const SpecField> fields,
                                   std::span<const uint32_t> words) {
  // SPIR-V: OpExecutionMode %main LocalSize x y z; with local_size_x_id, gl_WorkGroupSize is an
  // OpSpecConstantComposite decorated BuiltIn WorkgroupSize whose first constituent carries SpecId.
  constexpr uint32_t kExecutionMode = 16, kDecorate = 71, kSpecComposite = 51, kLocalSize = 17,
                     kBuiltIn = 11, kWorkgroupSize = 25, kSpecId = 1;
  const uint32_t* w = b.code;
  std::array<uint32_t, 3> size = {0, 0, 0};
  uint32_t wg_id = 0, wg_first = 0;
  std::vector<std::pair<uint32_t, uint32_t>> spec_ids, composites;  // (id, spec id), (id, first)
  for (size_t i = 5; i < b.words;) {
    const uint32_t op = w[i] & 0xFFFFu, len = w[i] >> 16;
    if (len == 0 || i + len > b.words) break;
    if (op == kExecutionMode && len >= 6 && w[i + 2] == kLocalSize)
      size = {w[i + 3], w[i + 4], w[i + 5]};
    if (op == kDecorate && len >= 4 && w[i + 2] == kBuiltIn && w[i + 3] == kWorkgroupSize)
      wg_id = w[i + 1];
    if (op == kDecorate && len >= 4 && w[i + 2] == kSpecId)
      spec_ids.emplace_back(w[i + 1], w[i + 3]);
    if (op == kSpecComposite && len >= 4) composites.emplace_back(w[i + 2], w[i + 3]);
    i += len;
  }
  for (const auto& [id, first] : composites)
    if (id == wg_id) wg_first = first;
  for (const auto& [id, sid] : spec_ids)
    for (size_t f = 0; f < fields.size() && f < words.size(); ++f)
      if (wg_first && id == wg_first && fields[f].id == sid) size[0] = words[f];
  return size;
}

Kernels::Kernels(Context& ctx)
    : ctx_(ctx),
      compiling_(std::clamp<std::ptrdiff_t>(std::thread::hardware_concurrency(), 1, 256)) {}

Kernels::~Kernels() {
  VkDevice d = ctx_.device();
  for (auto& [key, k] : cache_)
    if (k->ready.valid()) k->ready.wait();  // (a failed creation leaves a null pipeline)
  for (auto& [key, k] : cache_) {
    vkDestroyPipeline(d, k->pipeline_, nullptr);
    vkDestroyPipelineLayout(d, k->layout, nullptr);
    vkDestroyDescriptorSetLayout(d, k->set_layout, nullptr);
  }
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(d, p, nullptr);
}

Phase phase_of(const Kernel& k, std::span<const BufRange> ranges) {
  const std::string_view access = k.decl->access;
  if (ranges.size() != access.size())
    fail("vulkan: kernel {} takes {} bindings, given {}", k.decl->name, access.size(),
         ranges.size());
  Phase ph;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (access[i] != 'w') ph.reads.push_back(ranges[i].buf);
    if (access[i] != 'r') ph.writes.push_back(ranges[i].buf);
  }
  return ph;
}

void merge(Phase& into, const Phase& p) {
  for (VkBuffer b : p.reads)
    if (std::find(into.reads.begin(), into.reads.end(), b) == into.reads.end())
      into.reads.push_back(b);
  for (VkBuffer b : p.writes)
    if (std::find(into.writes.begin(), into.writes.end(), b) == into.writes.end())
      into.writes.push_back(b);
}

const Kernel& Kernels::get_words(Shader id, bool f16, std::span<const uint32_t> spec) {
  const KernelDecl& dc = kernel_decl(id);
  const std::string shader = module_name(id, f16);
  if (spec.size() != dc.spec_fields.size())
    fail("vulkan: kernel {} takes {} specialization constants, given {}", dc.name,
         dc.spec_fields.size(), spec.size());
  const uint32_t bindings = dc.bindings(), push_bytes = dc.push_bytes;
  std::string key = shader;
  for (uint32_t s : spec) key += fmt::format(":{}", s);  // (g++ 12 -Wrestrict on ":" + string)
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  const ShaderBlob* blob = find_shader(shader);
  if (!blob) fail("vulkan: no embedded shader named '{}'", shader);
  VkDevice d = ctx_.device();
  auto k = std::make_unique<Kernel>();
  k->decl = &dc;
  k->bindings = bindings;
  k->push_bytes = push_bytes;
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (uint32_t i = 0; i < bindings; ++i)
    b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = bindings;
  dl.pBindings = b.data();
  VK_CHECK(vkCreateDescriptorSetLayout(d, &dl, nullptr, &k->set_layout));
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &k->set_layout;
  pl.pushConstantRangeCount = push_bytes ? 1 : 0;
  pl.pPushConstantRanges = &pr;
  VK_CHECK(vkCreatePipelineLayout(d, &pl, nullptr, &k->layout));
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = blob->words * 4;
  mi.pCode = blob->code;
  VkShaderModule mod;
  VK_CHECK(vkCreateShaderModule(d, &mi, nullptr, &mod));
  // The create info and what it points to, kept whole for the thread that compiles it.
  struct Job {
    VkShaderModule mod = VK_NULL_HANDLE;
    std::vector<uint32_t> spec;
    std::vector<VkSpecializationMapEntry> entries;
    VkSpecializationInfo si{};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo rs{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    VkPipelineCreationFeedback fb{}, stage_fb{};
    VkPipelineCreationFeedbackCreateInfo fci{
        VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  };
  auto job = std::make_shared<Job>();
  job->mod = mod;
  job->spec.assign(spec.begin(), spec.end());
  job->entries.resize(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) job->entries[i] = {dc.spec_fields[i].id, i * 4, 4};
  job->si = {static_cast<uint32_t>(spec.size()), job->entries.data(), spec.size() * 4,
             job->spec.data()};
  VkComputePipelineCreateInfo& ci = job->ci;
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &job->si;
  // Full subgroups wherever the workgroup holds whole ones: the kernels stride by gl_SubgroupSize
  // and the host sizes their work by DeviceInfo::subgroup_size. Of that size where the workgroup
  // fits the device's subgroup count; else of any size (the workgroup then holds whole subgroups
  // of the largest).
  const DeviceInfo& inf = ctx_.info();
  const std::array<uint32_t, 3> ls = local_size(*blob, dc.spec_fields, spec);
  const uint32_t x = ls[0], threads = ls[0] * ls[1] * ls[2];
  if (inf.subgroup_size_control && x > 0 && inf.subgroup_size > 0 && x % inf.subgroup_size == 0 &&
      threads <= inf.subgroup_size * inf.max_wg_subgroups) {
    job->rs.requiredSubgroupSize = inf.subgroup_size;
    ci.stage.pNext = &job->rs;
    ci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    k->full_subgroups = true;
  } else if (inf.subgroup_size_control && x > 0 && inf.subgroup_max > 0 &&
             x % inf.subgroup_max == 0) {
    ci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    k->full_subgroups = true;
  }
  ci.layout = k->layout;
  if (ctx_.pipeline_stats()) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  // Where the driver reports it: whether the pipeline came from the Context's pipeline cache.
  job->fci.pPipelineCreationFeedback = &job->fb;
  job->fci.pipelineStageCreationFeedbackCount = 1;
  job->fci.pPipelineStageCreationFeedbacks = &job->stage_fb;
  if (inf.creation_feedback) ci.pNext = &job->fci;
  // Compiled on a thread of its own, at most one a core at once (the pipeline cache is internally
  // synchronized); whoever binds it first waits for it (Kernel::pipeline).
  Kernel* kp = k.get();
  k->ready =
      std::async(std::launch::async, [this, job, kp, shader, key] {
        compiling_.acquire();
        const auto t0 = std::chrono::steady_clock::now();
        VkDevice dev = ctx_.device();
        VkResult r = vkCreateComputePipelines(dev, ctx_.pipeline_cache(), 1, &job->ci, nullptr,
                                              &kp->pipeline_);
        compiling_.release();
        ctx_.count_pipeline(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count(),
            (job->fb.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT) &&
                (job->fb.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT));
        vkDestroyShaderModule(dev, job->mod, nullptr);
        if (r != VK_SUCCESS) {
          kp->pipeline_ = VK_NULL_HANDLE;
          vk_fail(("vkCreateComputePipelines(" + shader + ")").c_str(), r);
        }
        if (ctx_.pipeline_stats()) print_statistics(key, kp->pipeline_);
      }).share();
  return *cache_.emplace(key, std::move(k)).first->second;
}

void Kernels::wait_all() const {
  for (const auto& [key, k] : cache_) k->pipeline();
}

// One line per executable of the pipeline: the driver's compiler statistics (VKLLM_PIPELINE_STATS).
void Kernels::print_statistics(const std::string& key, VkPipeline pipeline) const {
  VkDevice d = ctx_.device();
  auto props_fn = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(d, "vkGetPipelineExecutablePropertiesKHR"));
  auto stats_fn = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(d, "vkGetPipelineExecutableStatisticsKHR"));
  if (!props_fn || !stats_fn) return;
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = pipeline;
  uint32_t n = 0;
  if (props_fn(d, &pi, &n, nullptr) != VK_SUCCESS) return;
  for (uint32_t e = 0; e < n; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = pipeline;
    ei.executableIndex = e;
    uint32_t ns = 0;
    if (stats_fn(d, &ei, &ns, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> st(
        ns, VkPipelineExecutableStatisticKHR{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (stats_fn(d, &ei, &ns, st.data()) != VK_SUCCESS) continue;
    std::string line;
    for (const auto& s : st) {
      std::string v;
      switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          v = s.value.b32 ? "true" : "false";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          v = fmt::format("{}", s.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          v = fmt::format("{}", s.value.u64);
          break;
        default:
          v = fmt::format("{}", s.value.f64);
      }
      line += fmt::format("{}{}={}", line.empty() ? "" : ", ", s.name, v);
    }
    fmt::print(stderr, "vkllm: pipeline {}: {}\n", key, line);
  }
}

VkDescriptorSet Kernels::make_set(const Kernel& k, std::span<const BufRange> ranges) {
  if (ranges.size() != k.bindings)
    fail("vulkan: kernel needs {} bindings, got {}", k.bindings, ranges.size());
  VkDevice d = ctx_.device();
  VkDescriptorSet set = VK_NULL_HANDLE;
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &k.set_layout;
  VkResult r = VK_ERROR_OUT_OF_POOL_MEMORY;
  if (!pools_.empty()) {
    ai.descriptorPool = pools_.back();
    r = vkAllocateDescriptorSets(d, &ai, &set);
  }
  if (r != VK_SUCCESS) {
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4096};
    VkDescriptorPoolCreateInfo pci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pci.maxSets = 512;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &ps;
    VkDescriptorPool pool;
    VK_CHECK(vkCreateDescriptorPool(d, &pci, nullptr, &pool));
    pools_.push_back(pool);
    ai.descriptorPool = pool;
    VK_CHECK(vkAllocateDescriptorSets(d, &ai, &set));
  }
  std::vector<VkDescriptorBufferInfo> infos(ranges.size());
  std::vector<VkWriteDescriptorSet> writes(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    infos[i] = {ranges[i].buf, ranges[i].offset, ranges[i].range};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(d, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  return set;
}

}  // namespace vkllm::vk
