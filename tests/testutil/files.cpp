#include "testutil/files.h"

#include <fstream>
#include <sstream>

namespace vkllm::test {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace vkllm::test
