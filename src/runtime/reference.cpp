#include "runtime/reference.h"

#include <cstring>

namespace vkllm {

std::unique_ptr<ReferenceModel> load_reference_model(const HfCheckpoint& ckpt, int max_ctx) {
  auto r = std::make_unique<ReferenceModel>();
  r->lowered = lower_model(ckpt.desc(), max_ctx);
  const Program& p = r->lowered.program;
  r->weights.data.resize(p.tensors.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (p.tensors[i].kind != TensorKind::Weight) continue;
    std::vector<float> f = read_weight_f32(ckpt, r->lowered, static_cast<int32_t>(i));
    auto& bytes = r->weights.data[i];
    bytes.resize(f.size() * sizeof(float));
    std::memcpy(bytes.data(), f.data(), bytes.size());
  }
  return r;
}

}  // namespace vkllm
