// vkllm's folder in the user's cache directory, shared by the selftest's verdicts (vk_verdict.h)
// and the pipeline cache (vk_pipeline_cache.h).
#pragma once
#include <string>

namespace vkllm::vk {

// $XDG_CACHE_HOME/vkllm, else $HOME/.cache/vkllm, else /tmp/.cache/vkllm (the XDG base
// directory rule; both variables are the user's, documented in docs/portability.md and
// docs/vulkan.md).
std::string cache_root();

// Creates `dir` and its missing parents (mode 0755). Returns "" when it exists afterwards, else
// one line saying which folder could not be made and why.
std::string make_dirs(const std::string& dir);

}  // namespace vkllm::vk
