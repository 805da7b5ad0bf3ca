// Small file helpers shared by the test fixtures.
#pragma once
#include <string>

namespace vkllm::test {

// The whole file as bytes; "" when it cannot be opened.
std::string read_file(const std::string& path);

}  // namespace vkllm::test
