// vkllm synth --lora: a deterministic twin adapter in peft's save_pretrained layout
// (docs/lora.md). Values come from a counter-based generator (splitmix64), so the bytes are the
// same on every machine.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "hf/checkpoint.h"
#include "hf/lora_adapter.h"
#include "hf/safetensors.h"
#include "hf/synth.h"

namespace vkllm {

namespace {

uint64_t splitmix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// n values uniform in [-1, 1) * amp (24-bit uniforms: exactly representable, one rounding).
std::vector<uint8_t> uniform_f32(const std::string& name, uint64_t seed, int64_t n, double amp) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  const uint64_t key = splitmix(seed ^ name_hash(name));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = static_cast<int64_t>(splitmix(key + static_cast<uint64_t>(i)) >> 40);
    const float v = static_cast<float>((static_cast<double>(u) / 8388608.0 - 1.0) * amp);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  return bytes;
}

}  // namespace

std::vector<std::string> synth_lora_write(const SynthLoraOptions& o) {
  if (o.out_dir.empty()) fail("synth: no output directory given for the adapter");
  if (o.r < 1 || o.r > 4096) fail("synth: LoRA rank {} is out of range [1, 4096]", o.r);
  if (!(o.strength >= 0 && o.strength <= 100))
    fail("synth: LoRA strength {} is out of range [0, 100]", o.strength);
  if (o.preset.empty() == o.base_dir.empty())
    fail("synth: the adapter needs exactly one of a preset and a base checkpoint folder");
  ModelDesc d;
  std::string what, default_base;
  if (!o.preset.empty()) {
    const SynthPreset& p = find_synth_preset(o.preset);
    d = parse_hf_config(synth_config_json(p), synth_generation_config_json(p), p.name + " config");
    what = p.name;
    default_base = p.hf_model;
  } else {
    const std::string cfg = o.base_dir + "/config.json";
    const std::string gen = o.base_dir + "/generation_config.json";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(cfg, ec)) fail("{}: missing config.json", o.base_dir);
    const nlohmann::json gj =
        std::filesystem::is_regular_file(gen, ec) ? read_json_file(gen) : nlohmann::json();
    d = parse_hf_config(read_json_file(cfg), gj, cfg);
    what = cfg;
    default_base = o.base_dir;
  }
  std::vector<std::string> targets = o.target_modules;
  if (targets.empty()) {
    if (d.fused_qkv)
      targets = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
    else
      targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
  nlohmann::ordered_json rp = nlohmann::ordered_json::object();
  for (const auto& [pat, rank] : o.rank_pattern) rp[pat] = rank;
  // The key set of peft's save_pretrained (LoraConfig fields that matter plus the usual rest).
  nlohmann::ordered_json cfg = {
      {"alpha_pattern", nlohmann::ordered_json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", o.base_model.empty() ? default_base : o.base_model},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", o.lora_alpha},
      {"lora_dropout", 0.0},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", o.r},
      {"rank_pattern", rp},
      {"revision", nullptr},
      {"target_modules", targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", o.use_rslora}};
  const LoraConfig c = parse_lora_config(cfg, "synth adapter config");

  std::vector<TensorToWrite> ts;
  for (const BaseModule& m : lora_base_modules(d)) {
    if (!m.linear || m.split_of_fused || m.name == "lm_head" || !lora_targets(c, m.name)) continue;
    const int r = lora_module_rank(c, m.name);
    const double alpha = lora_module_alpha(c, m.name);
    const double scaling = alpha / (c.use_rslora ? std::sqrt(double(r)) : double(r));
    // A: std 1/sqrt(in); B: so that the delta's RMS is strength / sqrt(in).
    const double a_std = 1.0 / std::sqrt(double(m.in));
    const double b_std = o.strength / (scaling * std::sqrt(double(r)));
    const std::string base = "base_model.model." + m.name;
    ts.push_back({base + ".lora_A.weight",
                  StDType::F32,
                  {r, m.in},
                  uniform_f32(base + ".lora_A", o.seed, r * m.in, a_std * std::sqrt(3.0))});
    ts.push_back({base + ".lora_B.weight",
                  StDType::F32,
                  {m.out, r},
                  uniform_f32(base + ".lora_B", o.seed, m.out * r, b_std * std::sqrt(3.0))});
  }
  if (ts.empty()) fail("synth: target_modules select no module of {}", what);
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (!std::filesystem::is_directory(o.out_dir, ec))
    fail("{}: cannot create directory: {}", o.out_dir, ec.message());
  write_safetensors(o.out_dir + "/adapter_model.safetensors", ts, {{"format", "pt"}});
  write_text_file(o.out_dir + "/adapter_config.json", cfg.dump(2) + "\n");
  return {"adapter_model.safetensors", "adapter_config.json"};
}

}  // namespace vkllm
