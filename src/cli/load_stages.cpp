#include "cli/load_stages.h"

#include <algorithm>

#include "runtime/model_impl.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm::cli {

nlohmann::json load_stages_json(const Model& model, double open_ms, double session_ms) {
  const auto& m = ModelAccess::of(model);
  nlohmann::json s = {{"open", open_ms},
                      {"session", session_ms},
                      {"tokenizer", m.open_tokenizer_ms},
                      {"tokenizer_parse", m.tokenizer_parse_ms}};
  double backend_ms = 0;
#ifdef VKLLM_WITH_VULKAN
  if (model.info().backend == "vulkan") {
    const VulkanLoadStages ls = vulkan_load_stages(*m.loaded);
    s["device"] = ls.device_ms;
    s["weights"] = ls.weights_ms;
    s["pipelines"] = ls.pipelines.pipeline_ms;
    backend_ms = ls.device_ms + ls.weights_ms;
  }
#endif
  s["artifact"] = std::max(0.0, open_ms - backend_ms - m.open_tokenizer_ms);
  return s;
}

nlohmann::json pipeline_cache_json([[maybe_unused]] const Model& model) {
  nlohmann::json j;
#ifdef VKLLM_WITH_VULKAN
  if (model.info().backend == "vulkan") {
    const VulkanLoadStages ls = vulkan_load_stages(*ModelAccess::of(model).loaded);
    j = {{"enabled", ls.pipelines.enabled},
         {"loaded_bytes", ls.pipelines.loaded_bytes},
         {"saved_bytes", ls.pipelines.saved_bytes},
         {"pipelines", ls.pipelines.pipelines},
         {"hits", ls.pipelines.hits}};
    if (!ls.pipelines.ignored.empty()) j["ignored"] = ls.pipelines.ignored;
  }
#endif
  return j;
}

}  // namespace vkllm::cli
