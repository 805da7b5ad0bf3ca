// The SPIR-V modules compiled from shaders/*.comp at build time (generated spirv_embedded.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace vkllm::vk {

struct ShaderBlob {
  const char*
      name;  // file stem plus variant suffix: "linear", "linear_f16", "linear_8da4w_idot"...
  const uint32_t* code;
  size_t words;
};

std::span<const ShaderBlob> all_shaders();
const ShaderBlob* find_shader(std::string_view name);  // nullptr if absent

}  // namespace vkllm::vk
