// Recipes: passes over the float program of lower_model that choose every weight's storage
// (fp32, fp16, int4 + scales [+ per-group sums]) and rewrite ops into the quantized op families.
// Formulas: docs/design.md section 2; what each recipe does and why: docs/artifact.md.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "export/lower.h"

namespace vkllm {

struct RecipeOptions {
  std::string recipe = "quantized-8da4w";
  int group_size = 128;      // linear int4 group (input channels)
  int embedding_bits = 4;    // -embedding recipes (only 4 is supported)
  int embedding_group = 32;  // -embedding recipes: group along the hidden dim
  int max_context = 2048;    // KV cache rows (capped by the model's max_position_embeddings)
};

struct RecipeTraits {
  bool act8 = false;    // linears: int4 weights, int8 dynamic activations (linear_8da4w)
  bool q4w = false;     // linears: int4 weights, float activations (linear_q4w)
  bool fp16 = false;    // fp16 storage of float weights, activations and KV caches
  bool emb_q4 = false;  // int4 embedding table (embedding_q4)
  bool quantized() const { return act8 || q4w; }
};

const std::vector<std::string>& recipe_names();
RecipeTraits recipe_traits(const std::string& name);  // throws Error listing the known recipes

// How to produce the bytes of one or more planned weights from one lowered (float) weight.
struct WeightJob {
  enum class Kind { Float, Int4 };
  int32_t source = -1;  // tensor index in the lowered program
  Kind kind = Kind::Float;
  DType dtype = DType::F32;              // Float: F32 or F16
  int64_t group = 0;                     // Int4
  int32_t out = -1;                      // planned tensor: the float weight or the Q4 data
  int32_t scales = -1;                   // Int4: F32 [rows, cols/group]
  int32_t sums = -1;                     // Int4 for linear_8da4w: I32 [rows, cols/group]
  std::vector<int32_t> outputs() const;  // out, scales, sums (those present), the write order
};

struct ExportPlan {
  ModelDesc desc;
  Program program;              // the final program (weight offsets unset)
  std::vector<WeightJob> jobs;  // every planned weight is an output of exactly one job
  nlohmann::json recipe;        // name, parameters and storage decisions (stored in the artifact)
};

// The effective group for a row of `cols` inputs: `group` when it divides cols, else
// gcd(group, cols) (tiny models whose widths are not multiples of 128).
int64_t effective_group(int64_t group, int64_t cols);

// Applies the recipe to a lowered model. `m.program.max_ctx` is kept.
ExportPlan plan_export(const LoweredModel& m, const RecipeOptions& o);

// Bytes of each output of `job` for source rows [row0, row0+rows) given as fp32 `src`
// (rows * cols values). out[i] receives the bytes of job.outputs()[i] for those rows.
void produce_rows(const ExportPlan& plan, const WeightJob& job, const float* src, int64_t rows,
                  int64_t cols, std::vector<std::vector<uint8_t>>& out);

}  // namespace vkllm
