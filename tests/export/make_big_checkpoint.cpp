// Writes a full-shape synthetic checkpoint (bf16, sharded safetensors + index + config) without
// holding it in memory: used to measure the exporter's peak RSS on real model sizes.
//   vkllm_make_big_ckpt <out-dir> phi-4-mini|llama-3.2-1b
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/half.h"
#include "testutil/tiny_checkpoint.h"

using nlohmann::json;

struct T {
  std::string name;
  std::vector<int64_t> shape;
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <out-dir> phi-4-mini|llama-3.2-1b\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], preset = argv[2];
  std::filesystem::create_directories(dir);
  json cfg;
  if (preset == "phi-4-mini") {
    cfg = json::parse(
        R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "num_hidden_layers": 32,
      "num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 200064,
      "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
      "partial_rotary_factor": 0.75, "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu",
      "bos_token_id": 199999, "eos_token_id": 199999})");
    cfg["rope_scaling"] = {{"type", "longrope"},
                           {"short_factor", std::vector<double>(48, 1.0)},
                           {"long_factor", std::vector<double>(48, 2.0)}};
  } else if (preset == "llama-3.2-1b") {
    cfg = json::parse(
        R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
      "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
      "rope_theta": 500000.0, "hidden_act": "silu", "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  } else {
    std::fprintf(stderr, "unknown preset %s\n", preset.c_str());
    return 2;
  }
  const int64_t D = cfg["hidden_size"], L = cfg["num_hidden_layers"],
                H = cfg["num_attention_heads"];
  const int64_t Hkv = cfg["num_key_value_heads"], F = cfg["intermediate_size"],
                V = cfg["vocab_size"];
  const int64_t hd = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>() : D / H;
  const bool phi = preset == "phi-4-mini";
  std::vector<T> ts = {{"model.embed_tokens.weight", {V, D}}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back({p + "input_layernorm.weight", {D}});
    ts.push_back({p + "post_attention_layernorm.weight", {D}});
    if (phi) {
      ts.push_back({p + "self_attn.qkv_proj.weight", {H * hd + 2 * Hkv * hd, D}});
      ts.push_back({p + "mlp.gate_up_proj.weight", {2 * F, D}});
    } else {
      ts.push_back({p + "self_attn.q_proj.weight", {H * hd, D}});
      ts.push_back({p + "self_attn.k_proj.weight", {Hkv * hd, D}});
      ts.push_back({p + "self_attn.v_proj.weight", {Hkv * hd, D}});
      ts.push_back({p + "mlp.gate_proj.weight", {F, D}});
      ts.push_back({p + "mlp.up_proj.weight", {F, D}});
    }
    ts.push_back({p + "self_attn.o_proj.weight", {D, H * hd}});
    ts.push_back({p + "mlp.down_proj.weight", {D, F}});
  }
  ts.push_back({"model.norm.weight", {D}});
  // Shards of at most ~1 GiB, each written tensor by tensor.
  json wmap;
  uint64_t total = 0, state = 88172645463325252ull;
  size_t i = 0;
  int shard = 0;
  std::vector<uint16_t> buf;
  while (i < ts.size()) {
    size_t j = i;
    uint64_t bytes = 0;
    json hdr = json::object();
    while (j < ts.size() && (j == i || bytes < (1ull << 30))) {
      uint64_t n = 2;
      for (auto d : ts[j].shape) n *= static_cast<uint64_t>(d);
      hdr[ts[j].name] = {
          {"dtype", "BF16"}, {"shape", ts[j].shape}, {"data_offsets", {bytes, bytes + n}}};
      bytes += n;
      ++j;
    }
    const std::string name = "model-" + std::to_string(shard++) + ".safetensors";
    std::string h = hdr.dump();
    h.resize((h.size() + 7) / 8 * 8, ' ');
    std::ofstream f(dir + "/" + name, std::ios::binary);
    const uint64_t hl = h.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (size_t k = i; k < j; ++k) {
      uint64_t n = 1;
      for (auto d : ts[k].shape) n *= static_cast<uint64_t>(d);
      const bool norm = ts[k].shape.size() == 1;
      const float sc = norm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(ts[k].shape[1]));
      for (uint64_t done = 0; done < n;) {
        const uint64_t m = std::min<uint64_t>(n - done, 1 << 22);
        buf.resize(m);
        for (uint64_t e = 0; e < m; ++e) {
          state ^= state << 13;
          state ^= state >> 7;
          state ^= state << 17;
          const float u = static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f;  // [-1, 1)
          buf[e] = vkllm::f32_to_bf16((norm ? 1.0f : 0.0f) + sc * 1.7f * u);
        }
        f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(m * 2));
        done += m;
      }
      wmap[ts[k].name] = name;
    }
    total += bytes;
    i = j;
  }
  std::ofstream(dir + "/model.safetensors.index.json")
      << json{{"metadata", {{"total_size", total}}}, {"weight_map", wmap}}.dump(1);
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::ofstream(dir + "/tokenizer.json") << vkllm::testutil::tiny_tokenizer_json();
  std::printf("%s: %d shards, %.2f GB of bf16\n", dir.c_str(), shard, total / 1e9);
  return 0;
}
