// Test-only: the CPU interpreter with a hook called after every op has written its output (before
// an F16 output is rounded), so that a test can damage one kernel's result the way a subtly wrong
// GPU kernel would (tests/runtime/test_perturb.cpp, docs/gates.md). The library never sets one.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/executor.h"

namespace vkllm {

struct CpuOpState {
  const Program& program;
  const WeightSource& weights;
  size_t op_index;  // into program.ops
  int T, pos;       // this forward's token count and first position
  // Activations and KV caches by tensor id, fp32 (weights: empty). The op's output may be changed
  // in place, and so may a cache; an argmax output's value is the token the forward returns.
  std::vector<std::vector<float>>& buffers;
  const int32_t* ids;  // this forward's T token ids
};
using CpuOpHook = std::function<void(CpuOpState&)>;

std::unique_ptr<Executor> make_cpu_executor_with_hook(const Program& program,
                                                      const WeightSource& weights, CpuOpHook hook);

}  // namespace vkllm
