#include "backend/vulkan/vk_probe.h"

#include <fmt/format.h>

#include <cstring>
#include <set>
#include <vector>

#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_pipeline.h"

namespace vkllm::vk {

namespace {

// One workgroup of `k` over the single buffer range `r`, waited for.
void run_one_workgroup(Context& ctx, Kernels& kernels, const Kernel& k, const BufRange& r) {
  VkDescriptorSet set = kernels.make_set(k, {&r, 1});
  VkCommandBuffer cb = ctx.begin_once();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
  vkCmdDispatch(cb, 1, 1, 1);
  ctx.submit_and_wait(cb);
}

}  // namespace

std::string SubgroupLayout::describe() const {
  return fmt::format(
      "{} threads: gl_SubgroupSize {}, {}-{} invocations active a subgroup, {} subgroups "
      "({} reported){}",
      workgroup, reported_size, active_min, active_max, seen_subgroups, reported_subgroups,
      lanes_in_order ? "" : ", lanes out of order");
}

SubgroupLayout probe_subgroups(Context& ctx, uint32_t workgroup) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  const Kernel& k = kernels.get("subgroup_probe", 1, 0, {workgroup});
  const VkDeviceSize bytes = static_cast<VkDeviceSize>(workgroup) * 16;
  Buffer out = alloc.create(bytes, false, "subgroup probe");
  const BufRange r{out.buf, 0, bytes};
  run_one_workgroup(ctx, kernels, k, r);
  std::vector<uint32_t> v(static_cast<size_t>(workgroup) * 4);
  alloc.download(out, 0, v.data(), bytes);
  SubgroupLayout s;
  s.workgroup = workgroup;
  s.active_min = ~0u;
  std::set<uint32_t> ids;
  for (uint32_t i = 0; i < workgroup; ++i) {
    const uint32_t* e = &v[static_cast<size_t>(i) * 4];
    s.reported_size = std::max(s.reported_size, e[0]);
    ids.insert(e[2] & 0xFFFFu);
    s.reported_subgroups = std::max(s.reported_subgroups, e[2] >> 16);
    s.active_min = std::min(s.active_min, e[3] & 0xFFFFu);
    s.active_max = std::max(s.active_max, e[3] & 0xFFFFu);
    s.lanes_in_order = s.lanes_in_order && e[1] == (e[3] >> 16);
  }
  s.seen_subgroups = static_cast<uint32_t>(ids.size());
  return s;
}

std::string probe_coopmat_accumulator(Context& ctx, bool f32) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  const Kernel& k = kernels.get(f32 ? "coopmat_probe_f32" : "coopmat_probe", 1, 0, {});
  constexpr uint32_t kLanes = 32, kWords = 128 + 9 * kLanes;
  Buffer io = alloc.create(kWords * 4, false, "cooperative-matrix probe");
  std::vector<int32_t> v(kWords, -1);
  for (int32_t i = 0; i < 128; ++i) {
    const float f = static_cast<float>(i);
    if (f32)
      std::memcpy(&v[static_cast<size_t>(i)], &f, 4);
    else
      v[static_cast<size_t>(i)] = i;
  }
  const char* what = f32 ? "fp32" : "int32";
  alloc.upload(io, 0, v.data(), kWords * 4);
  const BufRange r{io.buf, 0, kWords * 4};
  run_one_workgroup(ctx, kernels, k, r);
  alloc.download(io, 0, v.data(), kWords * 4);
  std::set<int32_t> seen;
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    const int32_t* e = &v[128 + 9 * lane];
    if (e[0] != 4)
      return fmt::format("a 16 x 8 {} accumulator holds {} elements in lane {}, not 4", what, e[0],
                         lane);
    for (int i = 1; i <= 4; ++i) seen.insert(e[i]);
  }
  if (seen.size() != 128 || *seen.begin() != 0 || *seen.rbegin() != 127)
    return fmt::format("a 16 x 8 {} accumulator's lanes hold {} distinct elements, not 128", what,
                       seen.size());
  return "";
}

}  // namespace vkllm::vk
