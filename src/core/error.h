// One error type for every failure a user can act on: a single clear line.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vkllm {

// Thrown for bad input files, bad arguments, missing devices... The message is one line that
// names the file or the thing at fault; the CLI prints it as "vkllm: <message>" and exits 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Checked arithmetic for sizes read from untrusted files.
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out);
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out);

}  // namespace vkllm
