// A vkllm::Error raised because the Vulkan device could not be opened or used (none found, no
// match for the requested device, a missing feature), as opposed to a problem of the model file:
// `vkllm run` maps it to its own exit code. The message names what is missing and how to choose
// another device.
#pragma once
#include "vkllm/vkllm.h"

namespace vkllm {

class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace vkllm
