// `vkllm selftest`: every kernel variant this device would use, against the CPU reference.
//
// Each variant is one toy transformer (selftest/toy_model.h: every op family, one storage
// combination) run through the gate of `vkllm verify --agree` (runtime/agreement.h): a prompt long
// enough for the tiled prefill GEMM, then greedy decode steps, the CPU reference teacher-forced
// along the device's tokens and judging each step's logits under the bounds of the recipe the toy
// stands for. Each toy runs on the device's default paths and again with each optional path turned
// off (the portable int8 dot product, prefill without cooperative matrices, the unfused program:
// neither the decode step's nor the prefill's fused runs), so a failure names the path at fault. A
// path whose variants fail while their portable twins pass is wrong on this device: the verdict is
// cached (backend/vulkan/vk_verdict.h) and later runs use the portable kernels instead. With an
// artifact, its own verify --agree decode is one more variant.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vkllm {

struct SelftestLine {
  std::string name;  // the toy (storage combination) or the artifact
  std::string path;  // "default", "portable int8 dot", "prefill without cooperative matrices",
                     // "unfused" (neither plan's fused runs), ...
  bool ok = false;
  int steps = 0, exact = 0;  // decode steps checked; those with the reference's own token
  double worst_nmse = 0, max_nmse = 0;  // the logits NMSE measured, and the recipe's bound
  std::string reason;                   // the first failure (one line), empty when ok
  double seconds = 0;
};

struct SelftestReport {
  std::string device, driver, vkllm_version;
  unsigned subgroup_size = 0;
  bool int_dot = false, coopmat = false;  // the optional paths this device has
  std::vector<SelftestLine> lines;
  std::vector<std::string> wrong;  // the paths found wrong: "int8-dot", "coopmat", "fusion"
  std::string verdict_path;        // where the verdict was cached (empty when not written)
  bool ok() const;
  nlohmann::json to_json() const;
};

struct SelftestOptions {
  std::string device;    // as --device: index or name substring; empty: the default device
  std::string artifact;  // also run this artifact's verify --agree decode (empty: none)
  int decode_steps = 12;
  bool validation = false;  // the Khronos validation layer on every variant (tests)
  bool write_verdict = true;
  std::function<void(const SelftestLine&)> on_line;  // each variant as it finishes
};

SelftestReport run_selftest(const SelftestOptions& opt);

}  // namespace vkllm
