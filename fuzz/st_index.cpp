// fuzz_st_index: model.safetensors.index.json as the exporter (HfCheckpoint) and the hub client
// (which shards to download) read it. Every shard name either accepts must stay inside the
// snapshot folder.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "hf/checkpoint.h"
#include "hub/cache.h"

using namespace vkllm;

namespace {
bool inside(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_discarded()) {
      SafetensorsIndex idx = parse_safetensors_index(j, "index.json");
      for (const auto& s : idx.shards) VKLLM_FUZZ_CHECK(inside(s) && s.find('/') == s.npos);
      for (const auto& [t, s] : idx.weight_map) VKLLM_FUZZ_CHECK(inside(s));
    }
  } catch (const Error&) {
  }
  try {
    for (const auto& s : hub_detail::index_shards("org/name", "index.json", text))
      VKLLM_FUZZ_CHECK(inside(s));
  } catch (const Error&) {
  }
  return 0;
}
