// Small Hugging Face checkpoints written by the tests themselves (config.json, model.safetensors,
// a small tokenizer.json that loads), for the three architectures, with seeded weights scaled so
// the logits have clear margins.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "hf/safetensors.h"
#include "testutil/tiny_checkpoint.h"

namespace vkllm::testing {

struct TinySpec {
  std::string arch = "llama";  // llama | qwen3 | phi3
  bool tied = true;
  int hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, inter = 96, vocab = 160;
  int max_pos = 512;
  uint32_t seed = 1;
  // Weight scales: embedding / lm_head std, and the gain of o_proj / down_proj (std gain/sqrt(K)).
  // The defaults give peaked logits; the quality test uses realistic spreads (docs/quality.md).
  float emb_std = 1.0f, head_std = 1.0f, out_gain = 1.0f;
  StDType dtype = StDType::BF16;
};

inline std::string temp_dir(const std::string& tag) {
  auto base = std::filesystem::temp_directory_path() /
              ("vkllm-test-" + tag + "-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::random_device{}()));
  std::filesystem::create_directories(base);
  return base.string();
}

inline nlohmann::json tiny_config(const TinySpec& s) {
  nlohmann::json c = {{"hidden_size", s.hidden},
                      {"num_hidden_layers", s.layers},
                      {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.kv_heads},
                      {"head_dim", s.head_dim},
                      {"intermediate_size", s.inter},
                      {"vocab_size", s.vocab},
                      {"max_position_embeddings", s.max_pos},
                      {"rms_norm_eps", 1e-5},
                      {"tie_word_embeddings", s.tied},
                      {"hidden_act", "silu"},
                      {"bos_token_id", 1},
                      {"eos_token_id", 2}};
  if (s.arch == "llama") {
    c["architectures"] = {"LlamaForCausalLM"};
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64},
                         {"rope_type", "llama3"}};
  } else if (s.arch == "qwen3") {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["rope_theta"] = 1000000.0;
  } else {
    c["architectures"] = {"Phi3ForCausalLM"};
    c["rope_theta"] = 10000.0;
    c["partial_rotary_factor"] = 0.75;
    c["original_max_position_embeddings"] = 32;
    const int n = static_cast<int>(s.head_dim * 0.75) / 2;
    std::vector<double> sf(n), lf(n);
    for (int i = 0; i < n; ++i) {
      sf[i] = 1.0 + 0.05 * i;
      lf[i] = 1.5 + 0.3 * i;
    }
    c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", sf}, {"long_factor", lf}};
  }
  return c;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// Writes the checkpoint into dir (created) and returns dir.
inline std::string make_checkpoint(const std::string& dir, const TinySpec& s) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<TensorToWrite> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    TensorToWrite t{name, s.dtype, shape, {}};
    t.bytes.resize(static_cast<size_t>(n) * st_dtype_size(s.dtype));
    for (int64_t i = 0; i < n; ++i) {
      const float v = offset + scale * nd(rng);
      if (s.dtype == StDType::F32)
        std::memcpy(t.bytes.data() + 4 * i, &v, 4);
      else {
        const uint16_t h = s.dtype == StDType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
    }
    ts.push_back(std::move(t));
  };
  const int64_t D = s.hidden, qw = int64_t(s.heads) * s.head_dim,
                kvw = int64_t(s.kv_heads) * s.head_dim;
  const int64_t F = s.inter, V = s.vocab;
  const float sd = 1.0f / std::sqrt(static_cast<float>(D));
  add("model.embed_tokens.weight", {V, D}, s.emb_std, 0.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {D}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {D}, 0.1f, 1.0f);
    if (s.arch == "phi3") {
      add(p + "self_attn.qkv_proj.weight", {qw + 2 * kvw, D}, sd, 0.0f);
      add(p + "mlp.gate_up_proj.weight", {2 * F, D}, sd, 0.0f);
    } else {
      add(p + "self_attn.q_proj.weight", {qw, D}, sd, 0.0f);
      add(p + "self_attn.k_proj.weight", {kvw, D}, sd, 0.0f);
      add(p + "self_attn.v_proj.weight", {kvw, D}, sd, 0.0f);
      add(p + "mlp.gate_proj.weight", {F, D}, sd, 0.0f);
      add(p + "mlp.up_proj.weight", {F, D}, sd, 0.0f);
    }
    if (s.arch == "qwen3") {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.1f, 1.0f);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.1f, 1.0f);
    }
    add(p + "self_attn.o_proj.weight", {D, qw}, s.out_gain / std::sqrt(static_cast<float>(qw)),
        0.0f);
    add(p + "mlp.down_proj.weight", {D, F}, s.out_gain / std::sqrt(static_cast<float>(F)), 0.0f);
  }
  add("model.norm.weight", {D}, 0.1f, 1.0f);
  if (!s.tied) add("lm_head.weight", {V, D}, s.head_std, 0.0f);
  write_safetensors(dir + "/model.safetensors", ts);
  write_text(dir + "/config.json", tiny_config(s).dump(2));
  write_text(dir + "/tokenizer.json", testutil::tiny_tokenizer_json());
  write_text(dir + "/tokenizer_config.json", testutil::tiny_tokenizer_config_json());
  return dir;
}

// Removes a temp directory when the test ends.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) : path(temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace vkllm::testing
