#include "backend/vulkan/vk_cache_dir.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace vkllm::vk {

std::string cache_root() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/vkllm";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/vkllm";
}

std::string make_dirs(const std::string& dir) {
  if (dir.empty()) return "no folder named";
  // Each prefix ending before a '/' (past the first character: not the root), then the whole.
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    const std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      return fmt::format("cannot create {}: {}", part, std::strerror(errno));
    if (at == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return fmt::format("{} is not a folder", dir);
  return "";
}

}  // namespace vkllm::vk
