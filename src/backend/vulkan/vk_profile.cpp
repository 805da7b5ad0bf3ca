#include "backend/vulkan/vk_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

std::string profile_widths(const Program& p, size_t first, size_t last) {
  return fmt::format("{}<-{}", p.tensors[p.ops[last].outputs[0]].shape.back(),
                     p.tensors[p.ops[first].inputs[0]].shape.back());
}

std::string profile_key(const Program& p, size_t k, bool fused_into_next) {
  const Op& op = p.ops[k];
  const std::string family = op.family + (fused_into_next ? " (fused)" : "");
  if (op.family.rfind("linear", 0) == 0 || op.family == "rms_norm" || op.family == "swiglu" ||
      op.family == "add" || op.family == "bias_add" || op.family == "geglu" || op.family == "scale")
    return fmt::format("{} {}", family, profile_widths(p, k, k));
  return family;
}

void print_plan_profile(const Program& p, const Plan& plan, const char* what,
                        size_t activation_buffers) {
  if (!plan.runs) return;
  std::map<std::string, int> count;
  std::map<std::string, uint64_t> wbytes;  // weight bytes a step of the row reads
  for (const Step& st : plan.steps) {
    ++count[st.key];
    uint64_t b = 0;
    for (size_t k = st.first; k <= st.last; ++k)
      for (int32_t t : p.ops[k].inputs)
        if (t >= 0 && p.tensors[t].kind == TensorKind::Weight) b += p.tensors[t].nbytes;
    wbytes[st.key] = b;
  }
  std::fprintf(stderr,
               "vkllm: vulkan profile, %s: %zu kernels per %s step, %zu barriers (%zu steps, %zu "
               "activation buffers); GPU time per forward (GB/s: the step's weight bytes over "
               "its time):\n  %-44s %5s %12s %12s %8s\n",
               what, plan.dispatches, what, plan.barriers, plan.steps.size(), activation_buffers,
               "step (out<-in width)", "count", "ms", "us each", "GB/s");
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, n] : count) {
    auto it = plan.ms.find(key);
    rows.push_back({it == plan.ms.end() ? 0.0 : it->second / plan.runs, key});
  }
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [ms, key] : rows) {
    const double us = ms * 1e3 / count.at(key);
    std::fprintf(stderr, "  %-44s %5d %12.4f %12.2f %8.0f\n", key.c_str(), count.at(key), ms, us,
                 us > 0 ? static_cast<double>(wbytes.at(key)) / (us * 1e3) : 0.0);
  }
  std::fprintf(stderr, "  %-44s %5zu %12.4f   (%d forwards)\n", "total", plan.steps.size(),
               plan.total / plan.runs, plan.runs);
}

void plan_barriers(Plan& plan, bool decode) {
  std::set<VkBuffer> dirty_w, dirty_r;
  plan.barrier_before.assign(plan.steps.size(), false);
  plan.barriers = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& phases = plan.steps[i].op->phases_for(decode);
    for (size_t ph = 0; ph < phases.size(); ++ph) {
      bool need = ph > 0;  // the step's own barrier
      for (VkBuffer b : phases[ph].reads) need = need || dirty_w.count(b);
      for (VkBuffer b : phases[ph].writes) need = need || dirty_w.count(b) || dirty_r.count(b);
      if (need) {
        if (ph == 0) plan.barrier_before[i] = true;
        ++plan.barriers;
        dirty_w.clear();
        dirty_r.clear();
      }
      dirty_r.insert(phases[ph].reads.begin(), phases[ph].reads.end());
      dirty_w.insert(phases[ph].writes.begin(), phases[ph].writes.end());
    }
  }
}

void collect_plan_profile(Plan& plan, const Context& ctx, VkQueryPool queries) {
  const uint32_t nq = static_cast<uint32_t>(plan.steps.size() + 1);
  std::vector<uint64_t> ts(nq);
  VK_CHECK(vkGetQueryPoolResults(ctx.device(), queries, 0, nq, nq * 8, ts.data(), 8,
                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const double period = ctx.info().timestamp_period * 1e-6;
  for (size_t k = 0; k + 1 < nq; ++k)
    plan.ms[plan.steps[k].key] += static_cast<double>(ts[k + 1] - ts[k]) * period;
  plan.total += static_cast<double>(ts[nq - 1] - ts[0]) * period;
  ++plan.runs;
}

void record_zero_outputs(VkCommandBuffer cb, const Op& op, const std::vector<Buffer>& bufs) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                       1, &mb, 0, nullptr, 0, nullptr);
  for (int32_t t : op.outputs) vkCmdFillBuffer(cb, bufs[t].buf, 0, VK_WHOLE_SIZE, 0);
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                       1, &mb, 0, nullptr, 0, nullptr);
}

}  // namespace vkllm::vk
