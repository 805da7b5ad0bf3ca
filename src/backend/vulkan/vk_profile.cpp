#include "backend/vulkan/vk_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <utility>

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

}  // namespace vkllm::vk
