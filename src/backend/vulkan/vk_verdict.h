// What `vkllm selftest` found on one device and driver (src/selftest): the optional kernel paths
// that gave wrong results there. The verdict is cached per device, driver and vkllm version under
// the user's cache directory; every Context opened on that device afterwards turns those paths
// off (the portable variant runs instead) and says so once on stderr. A user's own switch wins:
// VKLLM_NO_INT_DOT / VKLLM_NO_COOPMAT / VKLLM_NO_FUSION set to 0 or 1 decide that path whatever
// the verdict says; VKLLM_IGNORE_SELFTEST=1 ignores the verdict altogether.
#pragma once
#include <optional>
#include <string>

#include "backend/vulkan/vk_context.h"

namespace vkllm::vk {

struct Verdict {
  bool int_dot_wrong = false;  // the int8 dot-product (OpSDotAccSat) kernels
  bool coopmat_wrong = false;  // the cooperative-matrix prefill GEMM
  bool fusion_wrong = false;   // the decode step's fused runs
  // The device's subgroups are not what it reports (vk_probe.h): every kernel would be wrong, so
  // opening the device fails with one clear line.
  bool subgroups_wrong = false;
  bool any() const { return int_dot_wrong || coopmat_wrong || fusion_wrong || subgroups_wrong; }
};

// $XDG_CACHE_HOME/vkllm/selftest/<device>-<driver>-<version>.json (else ~/.cache/...): the file
// of this device, driver and vkllm version.
std::string verdict_path(const DeviceInfo& d);

// The cached verdict of the device, if `vkllm selftest` ran on it (a malformed file is ignored).
std::optional<Verdict> read_verdict(const DeviceInfo& d);

// Writes the verdict with the selftest's report beside it (report: a JSON object's text),
// atomically; returns the path. Throws Error when the cache directory cannot be written.
std::string write_verdict(const DeviceInfo& d, const Verdict& v, const std::string& report_json);

// Applies the cached verdict to the options of a Context being opened on `d` (see the top).
void apply_verdict(const DeviceInfo& d, VulkanOptions& opt);

}  // namespace vkllm::vk
