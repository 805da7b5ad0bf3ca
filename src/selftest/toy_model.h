// Hand-built two-layer toy transformers with random weights, one for each storage combination of
// the linears, embedding, activations and KV cache (and Qwen3's q/k norms, Phi-4-mini's partial
// rotary and long rope, Qwen2's q/k/v biases): small programs that use every op family the exporter
// emits, so that the Vulkan backend can be checked against the CPU reference without a checkpoint.
// The op and fusion tests (tests/backend_vulkan) and `vkllm selftest` build them from this one
// definition.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ir/program.h"

namespace vkllm::toy {

// The linear families: fp32, fp16, int4 weight-only, int8 dynamic activations x int4 weights.
enum class Lin { F32, F16, Q4W, A8W4 };
enum class Emb { F32, F16, Q4 };

struct ToyConfig {
  Lin lin = Lin::F32;
  Emb emb = Emb::F32;
  DType act = DType::F32, cache = DType::F32;
  bool qk_norm = false, partial_long_rope = false;
  int max_ctx = 48;
  int64_t ffn = 96;  // the FFN width: the down projection's K (1024: its decode rows in parts)
  const char* parts = nullptr;  // VKLLM_MATVEC_PARTS while the executors are made
  int64_t width = 64;           // the residual width: every norm's K (kWidth by default)
  // The head dim (kHeadDim by default): a multiple of 32 takes the cooperative-matrix prefill
  // attention where the device has it.
  int64_t head_dim = 16;
  bool qkv_bias = false;  // Qwen2: a bias_add after each of the q, k and v projections
  // Gemma 3's sliding-window layers: layer 0's attention sees only this many keys (its window
  // attribute), layer 1's every key (0: both global).
  int window = 0;
  // Gemma 3's norms and MLP: the attention's and the MLP's outputs normed before their residual
  // adds (four norms a layer), GeGLU in place of SwiGLU.
  bool gemma = false;
};

// Weights held in memory, by tensor id.
class MemWeights : public WeightSource {
 public:
  std::map<int32_t, std::vector<uint8_t>> data;
  std::span<const uint8_t> weight(const Program&, int32_t t) const override {
    const auto& v = data.at(t);
    return {v.data(), v.size()};
  }
};

struct Toy {
  Program p;
  MemWeights w;
};

// The toys' shapes: vocabulary, width, heads, kv heads, head dim, quantization group.
inline constexpr int64_t kVocab = 97, kWidth = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16,
                         kGroup = 32;

// The toy of `cfg` with weights drawn from `seed` (validated).
Toy build_toy(const ToyConfig& cfg, unsigned seed);

// The recipe a toy configuration stands for (its agreement bounds are that recipe's).
const char* toy_recipe(const ToyConfig& cfg);

// Random values in [lo, hi), never exactly zero.
std::vector<float> rand_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f);
template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
inline std::vector<uint8_t> bytes_f32(const std::vector<float>& v) {
  return bytes_of(v);
}
std::vector<uint8_t> bytes_f16(const std::vector<float>& v);  // rounds to fp16

}  // namespace vkllm::toy
