// A Hugging Face model directory: config, generation config, (sharded) safetensors, tokenizer
// files.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf/model_desc.h"
#include "hf/safetensors.h"

namespace vkllm {

class HfCheckpoint {
 public:
  explicit HfCheckpoint(const std::string& dir);  // throws Error with one clear line

  const std::string& dir() const { return dir_; }
  const ModelDesc& desc() const { return desc_; }
  const nlohmann::json& config() const { return config_; }
  const nlohmann::json& generation_config() const { return gen_config_; }  // null if absent
  std::string tokenizer_json_path() const { return dir_ + "/tokenizer.json"; }
  std::string tokenizer_config_path() const { return dir_ + "/tokenizer_config.json"; }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error naming the missing tensor (and the expected shape) when absent or mis-shaped.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& expect_shape) const;
  const std::map<std::string, const TensorView*>& tensors() const { return tensors_; }

 private:
  std::string dir_;
  nlohmann::json config_, gen_config_;
  ModelDesc desc_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> tensors_;
};

// Reads and parses a JSON file; throws Error naming the file.
nlohmann::json read_json_file(const std::string& path);

// model.safetensors.index.json: which shard holds each tensor.
struct SafetensorsIndex {
  std::vector<std::string> shards;                // plain file names, unique, in first-seen order
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
};
// Validates the parsed index (`where` names the file in errors): a "weight_map" object of
// tensor -> plain file name (no '/', no '..').
SafetensorsIndex parse_safetensors_index(const nlohmann::json& index, const std::string& where);

}  // namespace vkllm
