// Errors: vkllm::Error (public, include/vkllm/vkllm.h) and the fail() helper.
#pragma once
#include <fmt/format.h>

#include <string>

#include "vkllm/vkllm.h"

namespace vkllm {

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Checked arithmetic for sizes read from untrusted files.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out);
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out);

}  // namespace vkllm
