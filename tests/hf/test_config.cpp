#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "hf/model_desc.h"

using namespace vkllm;
using nlohmann::json;

namespace {
json llama_cfg() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
    "rope_theta": 500000.0, "hidden_act": "silu",
    "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
}
std::string error_of(const json& c) {
  try {
    parse_hf_config(c, json(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, Llama32) {
  ModelDesc m = parse_hf_config(llama_cfg(), json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.rope.type, "llama3");
  EXPECT_EQ(m.rope.rotary_dim, 64);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.eos_ids, (std::vector<int>{128001, 128008, 128009}));
  // llama3 scaling: the highest frequency is untouched, the lowest divided by the factor.
  auto inv = rope_inv_freq(m.rope);
  ASSERT_EQ(inv.size(), 32u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  float plain_last = 1.0f / std::pow(500000.0f, 62.0f / 64.0f);
  EXPECT_NEAR(inv[31], plain_last / 32.0f, 1e-12);
  // The transformers 5.x rope_parameters block gives the same description.
  json c5 = llama_cfg();
  c5.erase("rope_theta");
  c5["rope_parameters"] = c5["rope_scaling"];
  c5["rope_parameters"]["rope_theta"] = 500000.0;
  c5.erase("rope_scaling");
  ModelDesc m5 = parse_hf_config(c5, json(), "config.json");
  EXPECT_EQ(m5.to_json(), m.to_json());
}

TEST(Config, Qwen3) {
  json c = json::parse(
      R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
    "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
    "rope_theta": 1000000, "rope_scaling": null, "attention_bias": false, "eos_token_id": 151645})");
  ModelDesc m = parse_hf_config(c, json{{"eos_token_id", {151645, 151643}}}, "config.json");
  EXPECT_EQ(m.arch, Arch::Qwen3);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.head_dim, 128);  // explicit, not hidden / heads
  EXPECT_EQ(m.rope.type, "default");
  EXPECT_EQ(m.eos_ids, (std::vector<int>{151645, 151643}));  // generation_config wins
  EXPECT_EQ(ModelDesc::from_json(m.to_json()).to_json(), m.to_json());
  json unknown = m.to_json();
  unknown["arch"] = "gpt2";
  try {
    ModelDesc::from_json(unknown);
    ADD_FAILURE() << "an unknown arch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown arch 'gpt2'"), std::string::npos) << e.what();
  }
}

TEST(Config, Phi4MiniLongrope) {
  json c = json::parse(
      R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "num_hidden_layers": 32,
    "num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 200064,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "partial_rotary_factor": 0.75, "rope_theta": 10000.0, "tie_word_embeddings": true})");
  c["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(48, 1.0)},
                       {"long_factor", std::vector<double>(48, 2.0)}};
  ModelDesc m = parse_hf_config(c, json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Phi3);
  EXPECT_TRUE(m.fused_qkv);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.rope.rotary_dim, 96);
  EXPECT_NEAR(m.rope.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
  auto s = rope_inv_freq(m.rope, false), l = rope_inv_freq(m.rope, true);
  EXPECT_FLOAT_EQ(s[5], 2.0f * l[5]);
  c["rope_scaling"]["long_factor"] = std::vector<double>(47, 1.0);
  EXPECT_NE(error_of(c).find("long_factor"), std::string::npos);
  // A factor too large for the fp32 rotary table (found by fuzz_config) is refused, not turned
  // into a frequency of 0.
  c["rope_scaling"]["long_factor"] = std::vector<double>(48, 2.0);
  c["rope_scaling"]["short_factor"][17] = 1.01e308;
  EXPECT_NE(error_of(c).find("config.json rope_scaling: key 'short_factor' holds 1.01e+308, out "
                             "of range [1e-06, "),
            std::string::npos)
      << error_of(c);
}

TEST(Config, ClearErrors) {
  json c = llama_cfg();
  c.erase("hidden_size");
  EXPECT_NE(error_of(c).find("missing key 'hidden_size'"), std::string::npos);
  c = llama_cfg();
  c["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_NE(error_of(c).find("unsupported architecture 'GPT2LMHeadModel'"), std::string::npos);
  c = llama_cfg();
  c["num_key_value_heads"] = 7;
  EXPECT_NE(error_of(c).find("not a multiple"), std::string::npos);
  c = llama_cfg();
  c["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_NE(error_of(c).find("yarn"), std::string::npos);
  c = llama_cfg();
  c["num_hidden_layers"] = -3;
  EXPECT_NE(error_of(c).find("out of range"), std::string::npos);
  c = llama_cfg();
  c["hidden_size"] = "big";
  EXPECT_NE(error_of(c).find("must be an integer"), std::string::npos);
}
