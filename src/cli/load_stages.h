// The load's stages as `vkllm bench --output json` and `vkllm run`'s vkllm-stats line report them.
#pragma once
#include <nlohmann/json.hpp>

#include "vkllm/vkllm.h"

namespace vkllm::cli {

// Milliseconds: "open" (Model::open) and "session" (the executor: its pipelines and buffers); of
// the open, "tokenizer" (the tokenizer and chat template, parsed and checked), on Vulkan "device"
// (opened, its probes included) and "weights" (uploaded), and "artifact" the rest (the file
// mapped, its header, metadata and program checked; a checkpoint's weights read and lowered);
// "pipelines": the time in vkCreateComputePipelines so far (the device's and the session's).
nlohmann::json load_stages_json(const Model& model, double open_ms, double session_ms);
// What the Vulkan pipeline cache did (enabled, bytes loaded and saved, pipelines, hits, why a file
// was ignored); null on the CPU backend.
nlohmann::json pipeline_cache_json(const Model& model);

}  // namespace vkllm::cli
