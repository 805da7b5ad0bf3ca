// LoRA adapters written by the tests themselves (peft's layout: adapter_config.json +
// adapter_model.safetensors with base_model.model.<module>.lora_{A,B}.weight), and the merge an
// obviously correct dense fp64 loop makes of them, written as an fp32 checkpoint.
#pragma once
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "hf/safetensors.h"

namespace vkllm::testing {

struct TestLoraModule {
  std::string module;     // model.layers.0.self_attn.q_proj
  std::string hf_tensor;  // the base tensor it changes
  int64_t row_begin = 0, out = 0, in = 0;
  int r = 4;
  double scaling = 0;        // what the merge must use (alpha / r or alpha / sqrt r, times S)
  std::vector<double> a, b;  // [r, in], [out, r] (the values as stored)
};

inline void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream(path) << j.dump(2) << "\n";
}

// Fills a and b with seeded normal values (non-zero), rounded as `dtype` stores them, and writes
// the adapter with config `cfg`.
inline void write_test_adapter(const std::string& dir, const nlohmann::ordered_json& cfg,
                               std::vector<TestLoraModule>& mods, uint32_t seed,
                               StDType dtype = StDType::F32) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<TensorToWrite> ts;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape, std::vector<double>& v,
                    double sd) {
    const int64_t n = shape[0] * shape[1];
    v.resize(static_cast<size_t>(n));
    TensorToWrite t{name, dtype, shape,
                    std::vector<uint8_t>(static_cast<size_t>(n) * st_dtype_size(dtype))};
    for (int64_t i = 0; i < n; ++i) {
      float f = static_cast<float>(sd * nd(rng));
      if (dtype == StDType::F32) {
        std::memcpy(t.bytes.data() + 4 * i, &f, 4);
      } else {
        const uint16_t h = dtype == StDType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        f = dtype == StDType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      v[static_cast<size_t>(i)] = f;
    }
    ts.push_back(std::move(t));
  };
  for (auto& m : mods) {
    const std::string p = "base_model.model." + m.module;
    tensor(p + ".lora_A.weight", {m.r, m.in}, m.a, 1.0 / std::sqrt(double(m.in)));
    tensor(p + ".lora_B.weight", {m.out, m.r}, m.b, 0.4 / std::sqrt(double(m.r)));
  }
  write_safetensors(dir + "/adapter_model.safetensors", ts);
  write_json(dir + "/adapter_config.json", cfg);
}

// A peft-like adapter_config.json.
inline nlohmann::ordered_json test_lora_config(int r, double alpha,
                                               nlohmann::ordered_json targets) {
  return {{"base_model_name_or_path", "test/base"},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"lora_alpha", alpha},
          {"lora_dropout", 0.0},
          {"modules_to_save", nullptr},
          {"peft_type", "LORA"},
          {"r", r},
          {"rank_pattern", nlohmann::ordered_json::object()},
          {"target_modules", targets},
          {"task_type", "CAUSAL_LM"},
          {"use_dora", false},
          {"use_rslora", false}};
}

// Writes to merged_dir the base checkpoint (base_dir/model.safetensors) with every module's
// delta added in fp64: W[row_begin + i][j] += scaling * sum_k B[i][k] A[k][j]; all tensors F32.
inline void write_dense_merge(const std::string& base_dir, const std::string& merged_dir,
                              const std::vector<TestLoraModule>& mods) {
  std::filesystem::create_directories(merged_dir);
  SafetensorsFile base(base_dir + "/model.safetensors");
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : base.tensors()) {
    std::vector<float> f = t.to_f32();
    std::vector<double> w(f.begin(), f.end());
    for (const auto& m : mods) {
      if (m.hf_tensor != name) continue;
      for (int64_t i = 0; i < m.out; ++i)
        for (int64_t j = 0; j < m.in; ++j) {
          double s = 0;
          for (int k = 0; k < m.r; ++k) s += m.b[i * m.r + k] * m.a[k * m.in + j];
          w[(m.row_begin + i) * m.in + j] += m.scaling * s;
        }
    }
    TensorToWrite o{name, StDType::F32, t.shape, std::vector<uint8_t>(w.size() * 4)};
    for (size_t i = 0; i < w.size(); ++i) {
      const float v = static_cast<float>(w[i]);
      std::memcpy(o.bytes.data() + 4 * i, &v, 4);
    }
    out.push_back(std::move(o));
  }
  write_safetensors(merged_dir + "/model.safetensors", out);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    if (std::filesystem::exists(base_dir + "/" + f))
      std::filesystem::copy_file(base_dir + "/" + f, merged_dir + "/" + f,
                                 std::filesystem::copy_options::overwrite_existing);
}

}  // namespace vkllm::testing
