// Deterministic synthetic checkpoints in the exact Hugging Face layout (docs/synth.md).
//
// A preset names a real model's architecture (config keys, tensor names, tokenizer family) and
// its dimensions: tiny "twins" for tests and full-shape presets for benchmarks. The weights are
// bf16 values from a counter-based integer generator, so the same preset and seed give the same
// bytes on every machine, whatever the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace vkllm {

struct SynthPreset {
  std::string name;      // tiny-qwen3, qwen3-0.6b, ...
  std::string family;    // tokenizer fixture family: qwen3 | llama3.2 | phi4mini | llama2
  std::string hf_model;  // the real model it mirrors
  std::string arch;      // qwen3 | llama | phi3 | mistral | smollm3 (config.json's key set)
  bool tiny = false;
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  bool untied = false;  // an lm_head.weight of its own (tie_word_embeddings false)
};

const std::vector<SynthPreset>& synth_presets();
const SynthPreset& find_synth_preset(const std::string& name);  // throws Error listing the names

// The config.json and generation_config.json synth writes for a preset (real key sets).
nlohmann::json synth_config_json(const SynthPreset& p);
nlohmann::json synth_generation_config_json(const SynthPreset& p);

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};
// Tensors in Hugging Face state-dict (module) order.
std::vector<SynthTensor> synth_tensors(const SynthPreset& p);
uint64_t synth_param_count(const SynthPreset& p);

// Fills out[0..n) with the bf16 bits of elements [begin, begin+n) of tensor `name`.
void synth_fill_bf16(const SynthPreset& p, const SynthTensor& t, uint64_t seed, int64_t begin,
                     int64_t n, uint16_t* out);

struct SynthOptions {
  std::string preset;
  std::string out_dir;
  uint64_t seed = 0;
  std::string tokenizer_dir;  // empty: search <repo>/.fixtures/<family>/
  bool no_tokenizer = false;
  bool force = false;  // also write into a folder holding files synth does not write
  uint64_t max_shard_bytes = 2000000000ull;  // like HF's max_shard_size="2GB"
  int threads = 0;                           // 0: all cores
  double final_logit_softcapping =
      0;  // > 0: config.json's final_logit_softcapping (0: the preset's)
  // Called with (bytes written, total bytes) while weights are written; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct SynthResult {
  std::string out_dir;
  std::vector<std::string> files;  // names inside out_dir, in the order written
  uint64_t weight_bytes = 0;       // sum of tensor bytes (the index's total_size)
  uint64_t params = 0;
  int shards = 0;
  std::string tokenizer_from;  // fixture folder copied, empty with no_tokenizer
  nlohmann::json to_json() const;
};

// Writes the checkpoint; throws Error with one clear line on any problem.
SynthResult synth_write(const SynthOptions& o);

// A deterministic LoRA adapter for a preset, in peft's save_pretrained layout (adapter_config.json
// + adapter_model.safetensors, fp32 lora_A [r, in] and lora_B [out, r]), with non-zero A and B
// scaled so the merged model clearly differs from the base (docs/lora.md). The shapes come from
// the preset's config, or from base_dir/config.json (any checkpoint folder of the three families:
// the e2e matrix makes its adapters for a pulled base, twin or real, this way).
struct SynthLoraOptions {
  std::string preset;    // one of preset and base_dir
  std::string base_dir;  // a checkpoint folder: its config.json (and generation_config.json)
  std::string out_dir;
  uint64_t seed = 0;
  int r = 8;
  double lora_alpha = 16;
  bool use_rslora = false;
  std::vector<std::pair<std::string, int>> rank_pattern;  // pattern -> rank, in order
  std::vector<std::string> target_modules;                // empty: every Linear of a layer
  std::string base_model;  // base_model_name_or_path; empty: the preset's hf_model (or base_dir)
  double strength = 0.5;   // delta RMS relative to 1/sqrt(fan_in); 0: B is all zeros
};
// Writes the adapter (atomic files, the folder created); returns the files written.
std::vector<std::string> synth_lora_write(const SynthLoraOptions& o);

// Where the tokenizer fixtures of `family` are looked for when no folder is given, in order.
std::vector<std::string> synth_fixture_candidates(const std::string& family);

}  // namespace vkllm
