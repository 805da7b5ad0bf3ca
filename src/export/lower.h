// Per-architecture lowering: a normalized model description -> a float program (the compiler's
// front end). Recipes (quantization, fp16) are passes over this program (src/export/recipe.*).
#pragma once
#include <string>
#include <vector>

#include "hf/model_desc.h"
#include "ir/program.h"

namespace vkllm {

class HfCheckpoint;

// Where the data of one weight tensor comes from.
struct WeightOrigin {
  std::string hf_name;     // checkpoint tensor; empty for computed constants
  int64_t row_begin = 0;   // a row range of the checkpoint tensor (fused qkv / gate_up split)
  int64_t row_count = -1;  // -1: all rows
  std::vector<int64_t> hf_shape;  // the checkpoint tensor's full expected shape
  std::vector<float> values;      // computed constants (rope inverse frequencies)
  float add = 0;  // added (in fp32) to every value read: Gemma's RMSNorm weights are 1 + w
};

struct LoweredModel {
  ModelDesc desc;
  Program program;                   // all weights F32, all linears "linear", KV cache F32
  std::vector<WeightOrigin> origin;  // indexed like program.tensors (empty for non-weights)
};

// Lowers the model; every op is assigned to the Vulkan backend. Weight offsets are unset (0).
LoweredModel lower_model(const ModelDesc& desc, int max_ctx);

// Reads one weight of a lowered model from the checkpoint as F32 (row slices applied).
std::vector<float> read_weight_f32(const HfCheckpoint& ckpt, const LoweredModel& m, int32_t tensor);

}  // namespace vkllm
