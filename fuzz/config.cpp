// fuzz_config: config.json, then a NUL, then generation_config.json (optional), as the exporter
// reads them: parse_hf_config -> ModelDesc. An accepted description must round-trip through the
// artifact's JSON form, give finite rotary tables, and lower and plan under every recipe into a
// program the artifact checker accepts (`export --plan` does exactly this from config.json).
#include <cmath>
#include <nlohmann/json.hpp>

#include "artifact/writer.h"
#include "export/recipe.h"
#include "fuzz_util.h"
#include "hf/model_desc.h"

using namespace vkllm;
using nlohmann::json;

namespace {

void check_rope(const ModelDesc& m) {
  VKLLM_FUZZ_CHECK(std::isfinite(m.rope.attention_factor) && m.rope.attention_factor > 0);
  for (bool lf : {false, true}) {
    if (lf && m.rope.type != "longrope") break;
    for (float f : rope_inv_freq(m.rope, lf)) VKLLM_FUZZ_CHECK(std::isfinite(f) && f > 0);
  }
}

void plan_all(const ModelDesc& m, uint8_t pick) {
  // Lowering is quadratic in the layer count (tensor names are looked up linearly); the checks
  // here do not need deep models.
  if (m.n_layers > 8) return;
  const auto& names = recipe_names();
  RecipeOptions o;
  o.recipe = names[pick % names.size()];
  o.max_context = 1 + pick % 64;
  const LoweredModel lm = lower_model(m, std::min(o.max_context, m.max_pos));
  ExportPlan plan = plan_export(lm, o);
  std::vector<int32_t> order;
  for (const WeightJob& j : plan.jobs)
    for (int32_t t : j.outputs()) order.push_back(t);
  ArtifactContent c;
  c.desc = plan.desc;
  c.recipe = plan.recipe;
  c.program = plan.program;
  VKLLM_FUZZ_CHECK(planned_artifact_size(c, order) > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_parts(data, size, 2);
  const json cfg = json::parse(parts[0], nullptr, false);
  json gen = parts[1].empty() ? json() : json::parse(parts[1], nullptr, false);
  if (cfg.is_discarded()) return 0;  // not JSON: read_json_file rejects it before
  if (gen.is_discarded()) gen = json();
  ModelDesc m;
  try {
    m = parse_hf_config(cfg, gen, "config.json");
  } catch (const Error&) {
    return 0;
  }
  // What the exporter accepted, the artifact reader must accept back unchanged.
  try {
    VKLLM_FUZZ_CHECK(ModelDesc::from_json(m.to_json()).to_json() == m.to_json());
  } catch (const Error& e) {
    std::fprintf(stderr, "accepted config does not round-trip: %s\n", e.what());
    std::abort();
  }
  check_rope(m);
  try {
    plan_all(m, size ? data[size - 1] : 0);
  } catch (const Error&) {
  }
  return 0;
}
