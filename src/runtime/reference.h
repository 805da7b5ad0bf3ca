// The CPU reference engine straight from a Hugging Face checkpoint: lower the model, read every
// weight as fp32, interpret with the CPU backend. This is the oracle checked against transformers.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/executor.h"
#include "export/lower.h"
#include "hf/checkpoint.h"

namespace vkllm {

// Weights held in memory, one byte buffer per program tensor (empty for non-weights).
class InMemoryWeights final : public WeightSource {
 public:
  std::vector<std::vector<uint8_t>> data;
  std::span<const uint8_t> weight(const Program&, int32_t tensor) const override {
    return {data.at(static_cast<size_t>(tensor)).data(),
            data.at(static_cast<size_t>(tensor)).size()};
  }
};

struct ReferenceModel {
  LoweredModel lowered;
  InMemoryWeights weights;
  std::unique_ptr<Executor> make_executor() const {
    return make_cpu_executor(lowered.program, weights);
  }
};

std::unique_ptr<ReferenceModel> load_reference_model(const HfCheckpoint& ckpt, int max_ctx);

}  // namespace vkllm
