#include "core/error.h"

namespace vkllm {

// Out of line: the public Error's type information and vtable live in the library.
Error::Error(const std::string& msg) : std::runtime_error(msg) {}
Error::~Error() = default;

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace vkllm
