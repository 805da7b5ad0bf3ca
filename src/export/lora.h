// Merging a LoRA adapter into the base weights at export (docs/lora.md):
//   W' = W + S * scaling * B A,   scaling = alpha / r  (use_rslora: alpha / sqrt(r)),
// with r and alpha per module from rank_pattern / alpha_pattern, the modules chosen by
// target_modules / exclude_modules / layers_to_transform exactly as peft chooses them, in fp32,
// row range by row range as the exporter streams the checkpoint (nothing is held whole).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf/lora_adapter.h"
#include "hf/model_desc.h"
#include "hub/hub.h"

namespace vkllm {

class HfCheckpoint;

// Where the adapter came from, recorded in the artifact.
struct LoraProvenance {
  std::string source;    // the folder or hub id as given
  std::string repo;      // hub id ("" for a folder)
  std::string revision;  // as asked ("" for a folder)
  std::string commit;    // what the revision resolved to ("" for a folder)
};

// One merged module: rows [row_begin, row_begin + out) of checkpoint tensor hf_tensor.
struct LoraDelta {
  std::string module;     // peft's module name: model.layers.0.self_attn.q_proj
  std::string hf_tensor;  // model.layers.0.self_attn.q_proj.weight (or the fused qkv_proj)
  int64_t row_begin = 0, out = 0, in = 0;
  int r = 0;
  double alpha = 0, scaling = 0;  // scaling includes the user's scale S
  const TensorView* a = nullptr;  // lora_A [r, in]
  const TensorView* b = nullptr;  // lora_B [out, r]
};

class LoraMerge {
 public:
  // Opens the adapter and plans every delta against the base; throws Error with one line when
  // the adapter does not fit the base (a target the base lacks, a shape or rank mismatch,
  // tensors for modules the config does not select, ...).
  LoraMerge(const std::string& adapter_dir, const ModelDesc& base, double scale,
            LoraProvenance prov);
  ~LoraMerge();

  // Every delta's checkpoint tensor exists with the base shape (before anything is written).
  void check_base(const HfCheckpoint& ck) const;
  // dst holds rows [row0, row0 + rows) of checkpoint tensor hf_tensor (cols values each, fp32);
  // adds the deltas that cover any of them.
  void add_rows(const std::string& hf_tensor, int64_t row0, int64_t rows, int64_t cols,
                float* dst) const;

  const std::vector<LoraDelta>& deltas() const { return deltas_; }
  const LoraAdapter& adapter() const { return *adapter_; }
  // Recorded under producer.lora in the artifact: source, revision, commit, sha256 of the
  // adapter's files, scale, r, alpha, use_rslora, modules merged.
  const nlohmann::json& metadata() const { return meta_; }

 private:
  std::unique_ptr<LoraAdapter> adapter_;
  std::vector<LoraDelta> deltas_;
  nlohmann::json meta_;
};

// `vkllm export --lora ADAPTER`: a folder, or a hub id pulled as an adapter (PullOptions::adapter).
struct LoraSource {
  std::string dir;
  LoraProvenance prov;
};
LoraSource resolve_lora_source(const std::string& arg, PullOptions po);
// The base an adapter names (base_model_name_or_path, with @revision when it records one), for
// export without BASE; throws when it names none, or a folder that is not here.
std::string lora_base_of(const std::string& adapter_dir);
// The merge of the adapter into the base folder's model (reads its config.json).
std::unique_ptr<LoraMerge> open_lora_merge(const LoraSource& src, const std::string& base_dir,
                                           double scale);
// One line for people: source, revision / commit, modules, scale, sha256 of the weights.
std::string lora_summary_line(const nlohmann::json& meta);

}  // namespace vkllm
