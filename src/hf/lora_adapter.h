// A PEFT / Unsloth LoRA adapter folder: adapter_config.json + adapter_model.safetensors
// (docs/lora.md). Reading and validating only; the merge into base weights is src/export/lora.h.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hf/model_desc.h"
#include "hf/safetensors.h"

namespace vkllm {

// The fields of adapter_config.json that decide the merge. Everything else peft writes
// (lora_dropout, task_type, init_lora_weights, ...) does not change merged weights.
struct LoraConfig {
  std::string base_model;  // base_model_name_or_path ("" when absent)
  std::string revision;    // revision of the base ("" when absent)
  int r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;      // scaling alpha / sqrt(r) instead of alpha / r
  bool fan_in_fan_out = false;  // recorded; meaningless for nn.Linear (peft resets it there)
  // target_modules: a regular expression matched against the whole module name, or a list of
  // names each matching a module name exactly or as its last dotted components.
  bool target_is_regex = false;
  std::string target_regex;
  std::vector<std::string> target_names;
  bool exclude_is_regex = false;  // exclude_modules, the same two forms
  std::string exclude_regex;
  std::vector<std::string> exclude_names;
  // rank_pattern / alpha_pattern in file order (the first pattern that matches wins).
  std::vector<std::pair<std::string, int>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  bool layers_set = false;  // layers_to_transform given (an int or a non-empty list)
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;
};

// Parses adapter_config.json (`where` names it in errors). Refuses, with one line saying why,
// what cannot be merged into plain weights: peft_type other than LORA, use_dora,
// modules_to_save, bias other than "none", lora_bias, trainable tokens, layer replication,
// target_parameters, activated LoRA (alora_invocation_tokens).
LoraConfig parse_lora_config(const nlohmann::ordered_json& j, const std::string& where);

// peft's check_target_module_exists for one module name (a name as named_modules() gives it,
// model.layers.0.self_attn.q_proj): exclude_modules, then target_modules (a regex matches the
// whole name; a listed name matches it exactly or as its last components, and only then
// layers_to_transform / layers_pattern filter by the layer index).
bool lora_targets(const LoraConfig& c, const std::string& module);
// target_modules is the shorthand "all-linear" (every Linear but the output head).
bool lora_all_linear(const LoraConfig& c);
// A module name is `name` or ends with "." + name.
bool lora_name_matches(const std::string& module, const std::string& name);
// r and alpha of one module: the first rank_pattern / alpha_pattern key p (file order) with
// re.match(r"(.*\.)?(p)$", module), else r / lora_alpha. *from_pattern: a pattern decided.
int lora_module_rank(const LoraConfig& c, const std::string& module, bool* from_pattern = nullptr);
double lora_module_alpha(const LoraConfig& c, const std::string& module);

// The module names of the base that peft's matching sees (named_modules() of the
// *ForCausalLM), with the Linear ones marked. Exposed for tests.
struct BaseModule {
  std::string name;
  bool linear = false;
  std::string hf_tensor;  // Linear: its checkpoint tensor
  int64_t row_begin = 0, out = 0, in = 0;
  bool split_of_fused = false;  // q/k/v or gate/up of a base that stores them fused
};
std::vector<BaseModule> lora_base_modules(const ModelDesc& d);

class LoraAdapter {
 public:
  // Opens dir/adapter_config.json and dir/adapter_model.safetensors (a pickle
  // adapter_model.bin alone is refused). Throws Error with one clear line.
  explicit LoraAdapter(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const LoraConfig& config() const { return config_; }
  const std::map<std::string, TensorView>& tensors() const { return st_->tensors(); }
  // The adapter's files, relative to dir (what the artifact records hashes of).
  static const std::vector<std::string>& file_names();

 private:
  std::string dir_;
  LoraConfig config_;
  std::unique_ptr<SafetensorsFile> st_;
};

}  // namespace vkllm
