// `vkllm verify`: checks that an artifact loads (the load check of Model::open, artifact/load.h)
// and delivers what its recipe promises (every op delegated to the
// GPU backend, the op families the recipe needs, fp16 storage, the size limit).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "artifact/reader.h"

namespace vkllm {

struct VerifyOptions {
  std::string recipe;     // expected recipe; empty: the one recorded in the artifact
  uint64_t max_size = 0;  // bytes; 0: no limit
};

struct VerifyReport {
  bool ok = true;
  std::vector<std::string> reasons;  // why it failed, one line each
  nlohmann::json summary;            // recipe, sizes, op family counts, backends
};

VerifyReport verify_artifact(const ArtifactReader& r, const VerifyOptions& o);

// "770MiB", "1.5GiB", "800MB", "123456" -> bytes. K/M/G and KiB/MiB/GiB are powers of 1024,
// KB/MB/GB powers of 1000. Throws Error on anything else.
uint64_t parse_size(const std::string& s);

}  // namespace vkllm
