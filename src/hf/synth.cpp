// vkllm synth: deterministic synthetic Hugging Face checkpoints. See docs/synth.md for the
// generator, the scale rules and why the bytes are identical on every machine.
#include "hf/synth.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/half.h"
#include "core/mapped_file.h"

namespace vkllm {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Presets

const std::vector<SynthPreset>& synth_presets() {
  // Tiny twins keep the real vocabulary rows, head_dim and (where cheap) head counts.
  // tiny-phi4mini must keep hidden_size / num_attention_heads == 128: transformers' Phi3Config
  // checks the 48 longrope factors against hidden_size // num_attention_heads * 0.75 / 2.
  static const std::vector<SynthPreset> presets = {
      {"tiny-qwen3", "qwen3", "Qwen/Qwen3-0.6B", "qwen3", true, 128, 4, 16, 8, 128, 256, 151936},
      {"tiny-llama3.2", "llama3.2", "unsloth/Llama-3.2-1B-Instruct", "llama", true, 128, 4, 32, 8,
       64, 256, 128256},
      {"tiny-phi4mini", "phi4mini", "microsoft/Phi-4-mini-instruct", "phi3", true, 128, 2, 1, 1,
       128, 256, 200064},
      // Llama-architecture classes: Mistral v0.2 (sliding_window null, untied; the Llama 2
      // SentencePiece tokenizer stands in for Mistral's, both 32000 ids) and SmolLM3 (every 4th
      // layer without rotary embedding; the Llama 3.2 tokenizer stands in for SmolLM3's 128256).
      {"tiny-mistral", "llama2", "mistralai/Mistral-7B-Instruct-v0.2", "mistral", true, 256, 2, 2,
       1, 128, 512, 32000, true},
      {"tiny-smollm3", "llama3.2", "HuggingFaceTB/SmolLM3-3B", "smollm3", true, 128, 4, 1, 1, 128,
       256, 128256},
      // Qwen2.5: Llama's forward with q/k/v projection biases, no head_dim key (hidden_size /
      // num_attention_heads); the Qwen3 tokenizer stands in for Qwen2.5's (the same byte-level
      // BPE and 151936 rows).
      {"tiny-qwen2.5", "qwen3", "Qwen/Qwen2.5-0.5B-Instruct", "qwen2", true, 128, 2, 2, 1, 64, 256,
       151936},
      // Gemma 3 (text): head_dim 256 kept, hidden 64 (sqrt(64) = 8, the embedding scale, is exact
      // in bf16 and fp32 alike), 4 layers alternating sliding-window (window 8) and global.
      {"tiny-gemma3", "gemma3", "google/gemma-3-1b-it", "gemma3", true, 64, 4, 2, 1, 256, 128,
       262144},
      {"qwen3-0.6b", "qwen3", "Qwen/Qwen3-0.6B", "qwen3", false, 1024, 28, 16, 8, 128, 3072,
       151936},
      {"llama-3.2-1b", "llama3.2", "unsloth/Llama-3.2-1B-Instruct", "llama", false, 2048, 16, 32, 8,
       64, 8192, 128256},
      {"phi-4-mini", "phi4mini", "microsoft/Phi-4-mini-instruct", "phi3", false, 3072, 32, 24, 8,
       128, 8192, 200064},
      {"qwen2.5-0.5b", "qwen3", "Qwen/Qwen2.5-0.5B-Instruct", "qwen2", false, 896, 24, 14, 2, 64,
       4864, 151936},
      {"gemma-3-1b", "gemma3", "google/gemma-3-1b-it", "gemma3", false, 1152, 26, 4, 1, 256, 6912,
       262144},
      // The sizes people run, 1.5B-8B (full shapes; the 8B's rope scaling is Llama 3.2's).
      {"qwen2.5-1.5b", "qwen3", "Qwen/Qwen2.5-1.5B-Instruct", "qwen2", false, 1536, 28, 12, 2, 128,
       8960, 151936},
      {"qwen3-1.7b", "qwen3", "Qwen/Qwen3-1.7B", "qwen3", false, 2048, 28, 16, 8, 128, 6144,
       151936},
      {"llama-3.2-3b", "llama3.2", "unsloth/Llama-3.2-3B-Instruct", "llama", false, 3072, 28, 24, 8,
       128, 8192, 128256},
      {"smollm3-3b", "llama3.2", "HuggingFaceTB/SmolLM3-3B", "smollm3", false, 2048, 36, 16, 4, 128,
       11008, 128256},
      {"qwen3-4b", "qwen3", "Qwen/Qwen3-4B", "qwen3", false, 2560, 36, 32, 8, 128, 9728, 151936},
      {"llama-3.1-8b", "llama3.2", "unsloth/Llama-3.1-8B-Instruct", "llama", false, 4096, 32, 32, 8,
       128, 14336, 128256, true},
  };
  return presets;
}

const SynthPreset& find_synth_preset(const std::string& name) {
  std::string names;
  for (auto& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("unknown synth preset '{}' (presets: {})", name, names);
}

// ---------------------------------------------------------------------------------------------
// config.json / generation_config.json: the key sets of the public Hub files.

static const std::vector<double> kPhi4LongFactor = {
    1,           1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897,  1.956131817,
    2.187582649, 2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023,
    4.785517845, 5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372,
    10.4687158,  11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807,
    22.90118105, 25.61086418, 28.64115884, 32.03,       32.1,        32.13,       32.23,
    32.6,        32.61,       32.64,       32.66,       32.7,        32.71,       32.93,
    32.97,       33.28,       33.49,       33.5,        44.16,       47.77};

json synth_config_json(const SynthPreset& p) {
  json c;
  c["architectures"] = json::array();
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["hidden_act"] = "silu";
  c["hidden_size"] = p.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = p.intermediate;
  c["num_attention_heads"] = p.heads;
  c["num_hidden_layers"] = p.layers;
  c["num_key_value_heads"] = p.kv_heads;
  c["tie_word_embeddings"] = !p.untied;
  c["torch_dtype"] = "bfloat16";
  c["use_cache"] = true;
  c["vocab_size"] = p.vocab;
  if (p.arch == "qwen3") {
    c["architectures"].push_back("Qwen3ForCausalLM");
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151645;
    c["head_dim"] = p.head_dim;
    c["max_position_embeddings"] = 40960;
    c["max_window_layers"] = p.layers;
    c["model_type"] = "qwen3";
    c["rms_norm_eps"] = 1e-06;
    c["rope_scaling"] = nullptr;
    c["rope_theta"] = 1000000;
    c["sliding_window"] = nullptr;
    c["transformers_version"] = "4.51.0";
    c["use_sliding_window"] = false;
  } else if (p.arch == "llama") {
    c["architectures"].push_back("LlamaForCausalLM");
    c["bos_token_id"] = 128000;
    c["eos_token_id"] = 128009;
    c["head_dim"] = p.head_dim;
    c["max_position_embeddings"] = 131072;
    c["mlp_bias"] = false;
    c["model_type"] = "llama";
    c["pad_token_id"] = 128004;
    c["pretraining_tp"] = 1;
    c["rms_norm_eps"] = 1e-05;
    c["rope_scaling"] = {{"factor", 32.0},
                         {"high_freq_factor", 4.0},
                         {"low_freq_factor", 1.0},
                         {"original_max_position_embeddings", 8192},
                         {"rope_type", "llama3"}};
    c["rope_theta"] = 500000.0;
    c["transformers_version"] = "4.52.0.dev0";
    c["unsloth_fixed"] = true;
  } else if (p.arch == "qwen2") {  // Qwen2.5-0.5B-Instruct: no head_dim key
    c.erase("attention_bias");
    c["architectures"].push_back("Qwen2ForCausalLM");
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151645;
    c["max_position_embeddings"] = 32768;
    c["max_window_layers"] = p.tiny ? p.layers : 21;
    c["model_type"] = "qwen2";
    c["rms_norm_eps"] = 1e-06;
    c["rope_theta"] = 1000000.0;
    c["sliding_window"] = 32768;
    c["transformers_version"] = "4.43.1";
    c["use_sliding_window"] = false;
  } else if (p.arch == "gemma3") {  // gemma-3-1b-it (Gemma3ForCausalLM, model_type gemma3_text)
    c.erase("hidden_act");
    c["architectures"].push_back("Gemma3ForCausalLM");
    c["attn_logit_softcapping"] = nullptr;
    c["bos_token_id"] = 2;
    c["cache_implementation"] = "hybrid";
    c["eos_token_id"] = {1, 106};
    c["final_logit_softcapping"] = nullptr;
    c["head_dim"] = p.head_dim;
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["max_position_embeddings"] = 32768;
    c["model_type"] = "gemma3_text";
    c["pad_token_id"] = 0;
    c["query_pre_attn_scalar"] = 256;
    c["rms_norm_eps"] = 1e-06;
    c["rope_local_base_freq"] = 10000;
    c["rope_scaling"] = nullptr;
    c["rope_theta"] = 1000000;
    if (p.tiny) {  // the later key set: layer_types; a window the tests' prompts cross
      json types = json::array();
      for (int l = 0; l < p.layers; ++l)
        types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
      c["layer_types"] = types;
      c["sliding_window"] = 8;
    } else {  // the Hub file: every 6th layer global
      c["sliding_window"] = 512;
      c["sliding_window_pattern"] = 6;
    }
    c["transformers_version"] = "4.50.0.dev0";
  } else if (p.arch == "mistral") {  // Mistral-7B-Instruct-v0.2: no head_dim key
    c.erase("attention_bias");
    c["architectures"].push_back("MistralForCausalLM");
    c["bos_token_id"] = 1;
    c["eos_token_id"] = 2;
    c["max_position_embeddings"] = 32768;
    c["model_type"] = "mistral";
    c["rms_norm_eps"] = 1e-05;
    c["rope_theta"] = 1000000.0;
    c["sliding_window"] = nullptr;
    c["transformers_version"] = "4.36.0";
  } else if (p.arch == "smollm3") {  // SmolLM3-3B: no head_dim key
    c["architectures"].push_back("SmolLM3ForCausalLM");
    c["bos_token_id"] = nullptr;
    c["eos_token_id"] = 128012;
    json types = json::array(), nope = json::array();
    for (int l = 0; l < p.layers; ++l) {
      types.push_back("full_attention");
      nope.push_back((l + 1) % 4 != 0 ? 1 : 0);
    }
    c["layer_types"] = types;
    c["max_position_embeddings"] = 65536;
    c["max_window_layers"] = p.layers;
    c["mlp_bias"] = false;
    c["model_type"] = "smollm3";
    c["no_rope_layer_interval"] = 4;
    c["no_rope_layers"] = nope;
    c["pad_token_id"] = 128004;
    c["pretraining_tp"] = 2;
    c["rms_norm_eps"] = 1e-06;
    c["rope_scaling"] = nullptr;
    c["rope_theta"] = 5000000.0;
    c["sliding_window"] = nullptr;
    c["transformers_version"] = "4.54.0.dev0";
    c["use_cache"] = false;
    c["use_sliding_window"] = false;
  } else {  // phi3: no head_dim key, transformers derives it as hidden_size / num_attention_heads
    c["_name_or_path"] = "Phi-4-mini-instruct";
    c["architectures"].push_back("Phi3ForCausalLM");
    c["auto_map"] = {{"AutoConfig", "configuration_phi3.Phi3Config"},
                     {"AutoModelForCausalLM", "modeling_phi3.Phi3ForCausalLM"},
                     {"AutoTokenizer", "Xenova/gpt-4o"}};
    c["bos_token_id"] = 199999;
    c["embd_pdrop"] = 0.0;
    c["eos_token_id"] = 199999;
    c["full_attn_mod"] = 1;
    c["interpolate_factor"] = 1;
    c["lm_head_bias"] = false;
    c["max_position_embeddings"] = 131072;
    c["mlp_bias"] = false;
    c["model_type"] = "phi3";
    c["original_max_position_embeddings"] = 4096;
    c["pad_token_id"] = 199999;
    c["partial_rotary_factor"] = 0.75;
    c["resid_pdrop"] = 0.0;
    c["rms_norm_eps"] = 1e-05;
    json lf = json::array();
    for (double f : kPhi4LongFactor) {
      if (f == 1.0)
        lf.push_back(1);  // the Hub file writes the first factor as the integer 1
      else
        lf.push_back(f);
    }
    c["rope_scaling"] = {
        {"long_factor", lf}, {"short_factor", std::vector<double>(48, 1.0)}, {"type", "longrope"}};
    c["rope_theta"] = 10000.0;
    c["sliding_window"] = 262144;
    c["transformers_version"] = "4.45.0";
  }
  return c;
}

json synth_generation_config_json(const SynthPreset& p) {
  if (p.arch == "qwen3")
    return {{"bos_token_id", 151643},
            {"do_sample", true},
            {"eos_token_id", {151645, 151643}},
            {"pad_token_id", 151643},
            {"temperature", 0.6},
            {"top_k", 20},
            {"top_p", 0.95},
            {"transformers_version", "4.51.0"}};
  if (p.arch == "qwen2")
    return {{"bos_token_id", 151643},
            {"do_sample", true},
            {"eos_token_id", {151645, 151643}},
            {"pad_token_id", 151643},
            {"repetition_penalty", 1.1},
            {"temperature", 0.7},
            {"top_k", 20},
            {"top_p", 0.8},
            {"transformers_version", "4.37.0"}};
  if (p.arch == "gemma3")
    return {{"bos_token_id", 2}, {"cache_implementation", "hybrid"},
            {"do_sample", true}, {"eos_token_id", {1, 106}},
            {"pad_token_id", 0}, {"top_k", 64},
            {"top_p", 0.95},     {"transformers_version", "4.50.0.dev0"}};
  if (p.arch == "mistral")
    return {{"_from_model_config", true},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"transformers_version", "4.36.0"}};
  if (p.arch == "smollm3")
    return {{"_from_model_config", true},
            {"bos_token_id", 128000},
            {"eos_token_id", 128012},
            {"pad_token_id", 128004},
            {"transformers_version", "4.54.0.dev0"}};
  if (p.arch == "llama")
    return {{"bos_token_id", 128000},
            {"do_sample", true},
            {"eos_token_id", {128001, 128008, 128009}},
            {"max_length", 131072},
            {"pad_token_id", 128004},
            {"temperature", 0.6},
            {"top_p", 0.9},
            {"transformers_version", "4.52.0.dev0"}};
  return {{"_from_model_config", true},
          {"bos_token_id", 199999},
          {"eos_token_id", {200020, 199999}},
          {"pad_token_id", 199999},
          {"transformers_version", "4.45.0"}};
}

// ---------------------------------------------------------------------------------------------
// Tensors

int64_t SynthTensor::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<SynthTensor> synth_tensors(const SynthPreset& p) {
  const int64_t D = p.hidden, I = p.intermediate, hd = p.head_dim;
  const int64_t q = p.heads * hd, kv = p.kv_heads * hd;
  std::vector<SynthTensor> t;
  t.push_back({"model.embed_tokens.weight", {p.vocab, D}});
  for (int l = 0; l < p.layers; ++l) {
    const std::string L = "model.layers." + std::to_string(l) + ".";
    if (p.arch == "phi3") {
      t.push_back({L + "self_attn.o_proj.weight", {D, q}});
      t.push_back({L + "self_attn.qkv_proj.weight", {q + 2 * kv, D}});
      t.push_back({L + "mlp.gate_up_proj.weight", {2 * I, D}});
      t.push_back({L + "mlp.down_proj.weight", {D, I}});
    } else {
      t.push_back({L + "self_attn.q_proj.weight", {q, D}});
      if (p.arch == "qwen2") t.push_back({L + "self_attn.q_proj.bias", {q}});
      t.push_back({L + "self_attn.k_proj.weight", {kv, D}});
      if (p.arch == "qwen2") t.push_back({L + "self_attn.k_proj.bias", {kv}});
      t.push_back({L + "self_attn.v_proj.weight", {kv, D}});
      if (p.arch == "qwen2") t.push_back({L + "self_attn.v_proj.bias", {kv}});
      t.push_back({L + "self_attn.o_proj.weight", {D, q}});
      if (p.arch == "qwen3" || p.arch == "gemma3") {
        t.push_back({L + "self_attn.q_norm.weight", {hd}});
        t.push_back({L + "self_attn.k_norm.weight", {hd}});
      }
      t.push_back({L + "mlp.gate_proj.weight", {I, D}});
      t.push_back({L + "mlp.up_proj.weight", {I, D}});
      t.push_back({L + "mlp.down_proj.weight", {D, I}});
    }
    t.push_back({L + "input_layernorm.weight", {D}});
    t.push_back({L + "post_attention_layernorm.weight", {D}});
    if (p.arch == "gemma3") {
      t.push_back({L + "pre_feedforward_layernorm.weight", {D}});
      t.push_back({L + "post_feedforward_layernorm.weight", {D}});
    }
  }
  t.push_back({"model.norm.weight", {D}});
  if (p.untied) t.push_back({"lm_head.weight", {p.vocab, D}});
  return t;
}

uint64_t synth_param_count(const SynthPreset& p) {
  uint64_t n = 0;
  for (auto& t : synth_tensors(p)) n += static_cast<uint64_t>(t.numel());
  return n;
}

// ---------------------------------------------------------------------------------------------
// The generator. Integer-only up to one exactly rounded float operation per element, so the
// bytes do not depend on the machine, the compiler's libm or the number of threads.

namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

uint64_t mix64(uint64_t z) {  // splitmix64 output function
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Irwin-Hall(4) on 16-bit uniforms, centred: an integer in [-131070, 131070] with mean 0 and
// standard deviation sqrt((2^32 - 1) / 3) = 37837.23, bell-shaped, no tails beyond 3.46 sigma.
constexpr int32_t kIhHalfRange = 131070;
inline int32_t irwin_hall(uint64_t r) {
  return static_cast<int32_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) +
                              (r >> 48)) -
         kIhHalfRange;
}
// 10 * 37837.23: weight = (kNormDen + c) / kNormDen = 1 + 0.1 * (c / sigma).
constexpr int32_t kNormDen = 378372;

// Target logit standard deviation of the tied output projection (see docs/synth.md).
constexpr double kLogitStd = 6.0;
// Standard deviation of the attention projections' biases (Qwen2).
constexpr double kBiasStd = 0.5;

enum class Kind { Norm, Normal };
struct Rule {
  Kind kind;
  float step = 0;    // weight = float(c) * step for Kind::Normal
  int32_t base = 1;  // Kind::Norm: weight = (base * kNormDen + c) / kNormDen
};

Rule rule_for(const SynthPreset& p, const SynthTensor& t) {
  const std::string& n = t.name;
  auto ends = [&](const char* s) {
    const std::string suf(s);
    return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
  };
  const double ih_sigma = std::sqrt(4294967295.0 / 3.0);  // IEEE sqrt: exactly rounded
  // Qwen2's q/k/v biases: half the unit-RMS projection's scale, so they move the attention.
  if (ends("_proj.bias")) return {Kind::Normal, static_cast<float>(kBiasStd / ih_sigma)};
  // Gemma's norms scale by 1 + w: w near 0, the final norm's near 5 (a gain of ~6 on the unit-RMS
  // state, for the logit scale with the embedding below).
  if (t.shape.size() == 1 && p.arch == "gemma3")
    return {Kind::Norm, 0, n == "model.norm.weight" ? 5 : 0};
  if (t.shape.size() == 1) return {Kind::Norm};
  // Gemma multiplies the embedding by sqrt(hidden): rows of RMS 1 / sqrt(hidden) enter the residual
  // stream at RMS 1; with the final norm's gain of ~6 the tied head's logits have a std of ~6.
  if (p.arch == "gemma3" && ends("embed_tokens.weight"))
    return {Kind::Normal, static_cast<float>(1.0 / std::sqrt(double(p.hidden)) / ih_sigma)};
  const double sigma_e = kLogitStd / std::sqrt(static_cast<double>(p.hidden));
  const double fan_in = static_cast<double>(t.shape[1]);
  double sd;
  // Residual updates of RMS ~ rho * sigma_e: the embedding's share of the final hidden state
  // stays small enough that the tied output projection does not just repeat the input token.
  const double rho = 1.5 * std::sqrt(2.0 * p.hidden / p.layers);
  if (ends("embed_tokens.weight") || n == "lm_head.weight")  // untied: the same logit scale
    sd = sigma_e;
  else if (ends("o_proj.weight"))
    sd = rho * sigma_e / std::sqrt(fan_in);
  else if (ends("down_proj.weight"))
    sd = 1.5 * rho * sigma_e / std::sqrt(fan_in);
  else
    sd = 1.0 / std::sqrt(fan_in);  // q/k/v/qkv, gate/up/gate_up: unit-RMS outputs
  return {Kind::Normal, static_cast<float>(sd / ih_sigma)};
}

}  // namespace

void synth_fill_bf16(const SynthPreset& p, const SynthTensor& t, uint64_t seed, int64_t begin,
                     int64_t n, uint16_t* out) {
  const uint64_t key = mix64(mix64(seed ^ 0x76b6c6c6d5e3a1f7ull) ^ fnv1a64(t.name));
  const Rule r = rule_for(p, t);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = static_cast<uint64_t>(begin + i);
    const int32_t c = irwin_hall(mix64(key + (idx + 1) * kGamma));
    float v;
    if (r.kind == Kind::Norm)
      v = static_cast<float>(r.base * kNormDen + c) / static_cast<float>(kNormDen);
    else
      v = static_cast<float>(c) * r.step;
    out[i] = f32_to_bf16(v);
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

json SynthResult::to_json() const {
  return {{"out_dir", out_dir}, {"files", files},   {"weight_bytes", weight_bytes},
          {"params", params},   {"shards", shards}, {"tokenizer_from", tokenizer_from}};
}

std::vector<std::string> synth_fixture_candidates(const std::string& family) {
  std::vector<std::string> out;
  if (const char* env = std::getenv("VKLLM_FIXTURES_DIR"); env && *env)
    out.push_back((fs::path(env) / family).string());
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (!ec) starts.push_back(cwd);
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (auto& s : starts) {
    for (fs::path d = s;; d = d.parent_path()) {
      if (fs::is_directory(d / ".fixtures", ec)) {
        std::string cand = (d / ".fixtures" / family).string();
        if (std::find(out.begin(), out.end(), cand) == out.end()) out.push_back(cand);
      }
      if (d == d.root_path() || d.parent_path() == d) break;
    }
  }
  return out;
}

namespace {

struct Shard {
  std::string file;
  std::vector<size_t> tensors;  // indices into the tensor list
  uint64_t bytes = 0;
};

// HF's split: walk the state dict in order, open a new shard when the next tensor would push
// the current one past the limit (a tensor larger than the limit gets a shard of its own).
std::vector<Shard> plan_shards(const std::vector<SynthTensor>& ts, uint64_t max_bytes) {
  std::vector<Shard> shards(1);
  for (size_t i = 0; i < ts.size(); ++i) {
    const uint64_t b = static_cast<uint64_t>(ts[i].numel()) * 2;
    if (!shards.back().tensors.empty() && shards.back().bytes + b > max_bytes)
      shards.emplace_back();
    shards.back().tensors.push_back(i);
    shards.back().bytes += b;
  }
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    for (size_t i = 0; i < shards.size(); ++i)
      shards[i].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
  }
  return shards;
}

class Writer {
 public:
  Writer(const SynthPreset& p, const SynthOptions& o, uint64_t total)
      : p_(p), o_(o), total_(total) {
    threads_ = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    threads_ = std::clamp(threads_, 1, 256);
    buf_.resize(kChunk);
  }

  // One safetensors file, written as the safetensors library does: header of sorted tensor
  // names with ascending offsets, padded with spaces to 8 bytes, then the data.
  void write_shard(const std::string& path, std::vector<const SynthTensor*> ts) {
    std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->name < b->name; });
    json h = json::object();
    h["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (auto* t : ts) {
      const uint64_t b = static_cast<uint64_t>(t->numel()) * 2;
      h[t->name] = {{"dtype", "BF16"}, {"shape", t->shape}, {"data_offsets", {off, off + b}}};
      off += b;
    }
    std::string hs = h.dump();
    while ((8 + hs.size()) % 8 != 0) hs.push_back(' ');
    AtomicFile f(path);
    const uint64_t n = hs.size();
    f.write(&n, 8);
    f.write(hs.data(), hs.size());
    for (auto* t : ts) write_tensor(f, *t);
    f.commit();
  }

 private:
  static constexpr int64_t kChunk = int64_t{1} << 24;  // elements per buffer (32 MiB)

  void write_tensor(AtomicFile& f, const SynthTensor& t) {
    const int64_t n = t.numel();
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t len = std::min(kChunk, n - begin);
      const int nt = len < (int64_t{1} << 16) ? 1 : threads_;
      if (nt == 1) {
        synth_fill_bf16(p_, t, o_.seed, begin, len, buf_.data());
      } else {
        std::vector<std::thread> pool;
        const int64_t per = (len + nt - 1) / nt;
        for (int k = 0; k < nt; ++k) {
          const int64_t a = k * per, b = std::min(len, a + per);
          if (a >= b) break;
          pool.emplace_back(
              [&, a, b] { synth_fill_bf16(p_, t, o_.seed, begin + a, b - a, buf_.data() + a); });
        }
        for (auto& th : pool) th.join();
      }
      f.write(buf_.data(), static_cast<size_t>(len) * 2);
      done_ += static_cast<uint64_t>(len) * 2;
      if (o_.progress) o_.progress(done_, total_);
    }
  }

  const SynthPreset& p_;
  const SynthOptions& o_;
  uint64_t total_, done_ = 0;
  int threads_ = 1;
  std::vector<uint16_t> buf_;
};

// Python's json.dumps(indent=2, sort_keys=True) + "\n", as transformers writes configs.
std::string dump_like_hf(const json& j) {
  return j.dump(2) + "\n";
}

bool is_weight_file(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  return name.rfind("model-", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

bool is_synth_file(const std::string& name) {
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "special_tokens_map.json"})
    if (name == f) return true;
  return is_weight_file(name);
}

}  // namespace

SynthResult synth_write(const SynthOptions& o) {
  const SynthPreset& p = find_synth_preset(o.preset);
  if (o.out_dir.empty()) fail("synth: no output directory given (-o DIR)");
  if (o.max_shard_bytes < 1024) fail("synth: max shard size {} is too small", o.max_shard_bytes);

  // Tokenizer fixtures first: fail before writing anything.
  std::string tok_dir;
  if (!o.no_tokenizer) {
    std::vector<std::string> cands;
    if (!o.tokenizer_dir.empty())
      cands.push_back(o.tokenizer_dir);
    else
      cands = synth_fixture_candidates(p.family);
    for (auto& c : cands) {
      if (fs::is_regular_file(c + "/tokenizer.json") &&
          fs::is_regular_file(c + "/tokenizer_config.json")) {
        tok_dir = c;
        break;
      }
    }
    if (tok_dir.empty()) {
      if (!o.tokenizer_dir.empty())
        fail("{}: no tokenizer.json and tokenizer_config.json here (--tokenizer-dir)",
             o.tokenizer_dir);
      fail(
          "no tokenizer fixtures for family '{}' (looked for .fixtures/{}/tokenizer.json and "
          "tokenizer_config.json above the current directory and the vkllm binary{}): run "
          "tools/fixtures/make_fixtures.sh first, pass --tokenizer-dir DIR, or --no-tokenizer "
          "for a weight-only checkpoint",
          p.family, p.family, std::getenv("VKLLM_FIXTURES_DIR") ? " and $VKLLM_FIXTURES_DIR" : "");
    }
  }

  std::error_code ec;
  const fs::path dir(o.out_dir);
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("{}: exists and is not a directory", o.out_dir);
  if (fs::is_directory(dir, ec)) {
    // A folder holding only files synth writes (an earlier run) is rewritten; anything else in
    // it needs --force. Old weight files are removed first so no stale shard survives.
    std::vector<fs::path> stale;
    std::string foreign;
    for (auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file() && is_weight_file(n))
        stale.push_back(e.path());
      else if (!(e.is_regular_file() && is_synth_file(n)) && foreign.empty())
        foreign = n;
    }
    if (!foreign.empty() && !o.force)
      fail(
          "{}: directory holds '{}', which synth does not write (use --force to write there "
          "anyway)",
          o.out_dir, foreign);
    for (auto& f : stale)
      if (!fs::remove(f, ec) || ec) fail("{}: cannot remove stale weight file", f.string());
  }
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail("{}: cannot create directory: {}", o.out_dir, ec.message());

  SynthResult res;
  res.out_dir = o.out_dir;
  res.tokenizer_from = tok_dir;
  const auto tensors = synth_tensors(p);
  for (auto& t : tensors) res.weight_bytes += static_cast<uint64_t>(t.numel()) * 2;
  res.params = res.weight_bytes / 2;
  auto shards = plan_shards(tensors, o.max_shard_bytes);
  res.shards = static_cast<int>(shards.size());

  Writer w(p, o, res.weight_bytes);
  for (auto& s : shards) {
    std::vector<const SynthTensor*> ts;
    for (size_t i : s.tensors) ts.push_back(&tensors[i]);
    w.write_shard((dir / s.file).string(), ts);
    res.files.push_back(s.file);
  }
  if (shards.size() > 1) {
    json idx;
    idx["metadata"] = {{"total_size", res.weight_bytes}};
    idx["weight_map"] = json::object();
    for (auto& s : shards)
      for (size_t i : s.tensors) idx["weight_map"][tensors[i].name] = s.file;
    write_text_file((dir / "model.safetensors.index.json").string(), dump_like_hf(idx));
    res.files.push_back("model.safetensors.index.json");
  }
  write_text_file((dir / "generation_config.json").string(),
                  dump_like_hf(synth_generation_config_json(p)));
  res.files.push_back("generation_config.json");
  if (!tok_dir.empty()) {
    for (const char* name :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
      const std::string src = tok_dir + "/" + name;
      if (!fs::is_regular_file(src)) continue;  // special_tokens_map.json is optional
      std::string text = read_text_file(src);
      if (text.empty()) fail("{}: empty file", src);
      write_text_file((dir / name).string(), text);
      res.files.push_back(name);
    }
  }
  // config.json last: a directory interrupted mid-way is never mistaken for a checkpoint.
  json config = synth_config_json(p);
  if (o.final_logit_softcapping > 0) config["final_logit_softcapping"] = o.final_logit_softcapping;
  write_text_file((dir / "config.json").string(), dump_like_hf(config));
  res.files.push_back("config.json");
  return res;
}

}  // namespace vkllm
