// Shared by the libFuzzer targets. The contract every parser of untrusted bytes keeps: it returns
// normally or throws vkllm::Error (one clear line). Anything else is a finding: another exception
// (libFuzzer reports the abort of an uncaught one), a sanitizer report, a leak, a crash, a
// timeout, or an allocation beyond -malloc_limit_mb. Properties a target checks on top use
// VKLLM_FUZZ_CHECK, which aborts with the failed condition.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

#define VKLLM_FUZZ_CHECK(cond)                                                           \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace vkllm::fuzz {

// Splits the input into `n` parts at NUL bytes (the last part keeps any further NULs): targets
// that read several files take them from one input this way.
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t n) {
  std::vector<std::string> parts;
  std::string_view s(reinterpret_cast<const char*>(data), size);
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t z = s.find('\0');
    if (z == std::string_view::npos) break;
    parts.emplace_back(s.substr(0, z));
    s.remove_prefix(z + 1);
  }
  parts.emplace_back(s);
  parts.resize(n);
  return parts;
}

}  // namespace vkllm::fuzz
