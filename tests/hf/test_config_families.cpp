// Llama-architecture classes (Mistral, SmolLM2, SmolLM3, Qwen2) and the config keys the lowering
// does not implement: accepted where the model is the plain forward, refused with one line naming
// the key where it is not.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "export/lower.h"
#include "hf/model_desc.h"

using namespace vkllm;
using nlohmann::json;

namespace {

// mistralai/Mistral-7B-Instruct-v0.2's config.json key set.
json mistral_cfg() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0",
    "use_cache": true, "vocab_size": 32000})");
}

// HuggingFaceTB/SmolLM2-1.7B-Instruct's config.json key set (LlamaForCausalLM).
json smollm2_cfg() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "is_llama_config": true, "max_position_embeddings": 8192, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 24,
    "num_key_value_heads": 32, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_interleaved": false, "rope_scaling": null, "rope_theta": 130000,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
    "use_cache": true, "vocab_size": 49152})");
}

// HuggingFaceTB/SmolLM3-3B's config.json key set, 8 layers instead of 36.
json smollm3_cfg() {
  json c = json::parse(R"({
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 65536,
    "max_window_layers": 28, "mlp_bias": false, "model_type": "smollm3",
    "no_rope_layer_interval": 4, "num_attention_heads": 16, "num_hidden_layers": 8,
    "num_key_value_heads": 4, "pad_token_id": 128004, "pretraining_tp": 2, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 5000000.0, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": false,
    "use_sliding_window": false, "vocab_size": 128256})");
  c["no_rope_layers"] = {1, 1, 1, 0, 1, 1, 1, 0};
  c["layer_types"] = std::vector<std::string>(8, "full_attention");
  return c;
}

// Qwen/Qwen2.5-0.5B-Instruct's config.json key set, 2 layers instead of 24.
json qwen25_cfg() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

std::string config_error(const json& c) {
  try {
    parse_hf_config(c, json(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string lower_error(const ModelDesc& d, int ctx) {
  try {
    lower_model(d, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

size_t count_ops(const LoweredModel& m, const std::string& family) {
  size_t n = 0;
  for (const Op& op : m.program.ops) n += op.family == family;
  return n;
}

}  // namespace

TEST(ConfigFamilies, MistralIsLlama) {
  const ModelDesc m = parse_hf_config(mistral_cfg(), json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_EQ(m.hf_class, "MistralForCausalLM");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.sliding_window, 0);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(ModelDesc::from_json(m.to_json()).to_json(), m.to_json());
  EXPECT_FALSE(m.to_json().contains("sliding_window"));  // other descriptions unchanged
  // sliding_window absent is the same as null.
  json c = mistral_cfg();
  c.erase("sliding_window");
  EXPECT_EQ(parse_hf_config(c, json(), "config.json").to_json(), m.to_json());
}

TEST(ConfigFamilies, MistralSlidingWindowOnlyWhereItCutsNothing) {
  json c = mistral_cfg();
  c["num_hidden_layers"] = 1;
  c["sliding_window"] = 4096;  // Mistral-7B-v0.1
  const ModelDesc m = parse_hf_config(c, json(), "config.json");
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(ModelDesc::from_json(m.to_json()).sliding_window, 4096);
  // A context within the window is full attention, exactly.
  EXPECT_EQ(lower_error(m, 4096), "(no error)");
  EXPECT_EQ(lower_error(m, 4097),
            "config.json 'sliding_window' = 4096 is smaller than the context 4097: sliding-window "
            "attention is not implemented (use a context of at most 4096 tokens)");
  // A window as long as the model's positions never cuts anything off.
  c["sliding_window"] = 32768;
  EXPECT_EQ(parse_hf_config(c, json(), "config.json").sliding_window, 0);
  c["sliding_window"] = "big";
  EXPECT_EQ(config_error(c), "config.json: key 'sliding_window' must be an integer");
  c["sliding_window"] = 0;
  EXPECT_EQ(config_error(c),
            "config.json: key 'sliding_window' = 0 is out of range [1, 1073741824]");
}

TEST(ConfigFamilies, SmolLM2Passes) {
  const ModelDesc m = parse_hf_config(smollm2_cfg(), json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_EQ(m.n_kv_heads, 32);
  EXPECT_EQ(m.rope.theta, 130000);
  EXPECT_TRUE(m.use_rope.empty());
}

TEST(ConfigFamilies, SmolLM3NoRopeLayers) {
  const ModelDesc m = parse_hf_config(smollm3_cfg(), json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_EQ(m.use_rope, (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(ModelDesc::from_json(m.to_json()).use_rope, m.use_rope);
  EXPECT_FALSE(m.layer_has_rope(3));
  EXPECT_TRUE(m.layer_has_rope(4));
  // Without the list, SmolLM3Config's rule: layer i has none when (i + 1) % interval == 0.
  json c = smollm3_cfg();
  c.erase("no_rope_layers");
  c["no_rope_layer_interval"] = 3;
  EXPECT_EQ(parse_hf_config(c, json(), "config.json").use_rope,
            (std::vector<int>{1, 1, 0, 1, 1, 0, 1, 1}));
  c.erase("no_rope_layer_interval");
  EXPECT_EQ(parse_hf_config(c, json(), "config.json").use_rope, m.use_rope);  // default 4
  // The lowering: two rope ops on each rope layer, none on the others; one attention a layer.
  json small = smollm3_cfg();
  small["hidden_size"] = 64;
  small["intermediate_size"] = 128;
  small["vocab_size"] = 300;
  const LoweredModel lm = lower_model(parse_hf_config(small, json(), "config.json"), 64);
  EXPECT_EQ(count_ops(lm, "rope"), 2u * 6);
  EXPECT_EQ(count_ops(lm, "attention"), 8u);
  // Malformed lists.
  c = smollm3_cfg();
  c["no_rope_layers"] = {1, 0};
  EXPECT_EQ(config_error(c),
            "config.json: key 'no_rope_layers' must be a list of 8 (num_hidden_layers) 0/1 values");
  c["no_rope_layers"] = {1, 1, 1, 2, 1, 1, 1, 0};
  EXPECT_EQ(config_error(c), "config.json: key 'no_rope_layers' must hold only 0 and 1 (got 2)");
}

TEST(ConfigFamilies, UnimplementedKeysAreRefusedByName) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"attn_logit_softcapping", 50.0}},
       "config.json: 'attn_logit_softcapping' is not supported (the lowering does not implement "
       "it)"},
      {{{"final_logit_softcapping", "30"}},
       "config.json: 'final_logit_softcapping' must be a number >= 0 or null (got \"30\")"},
      {{{"query_pre_attn_scalar", 256}},
       "config.json: 'query_pre_attn_scalar' is not supported (the lowering does not implement "
       "it)"},
      {{{"use_sliding_window", true}}, "config.json: 'use_sliding_window': true is not supported"},
      {{{"rope_interleaved", true}}, "config.json: 'rope_interleaved': true is not supported"},
      {{{"layer_types", {"sliding_attention", "full_attention"}}},
       "config.json: 'layer_types' holds \"sliding_attention\": only full_attention layers are "
       "supported"},
      {{{"no_rope_layers", {1, 0}}},
       "config.json: 'no_rope_layers' is not supported for MistralForCausalLM"},
      {{{"attention_bias", true}}, "config.json: 'attention_bias': true is not supported"},
      {{{"hidden_act", "gelu"}}, "config.json: hidden_act 'gelu' is not supported (only silu)"},
  };
  for (const auto& [patch, want] : cases) {
    json c = mistral_cfg();
    c.update(patch);
    EXPECT_EQ(config_error(c), want) << patch.dump();
  }
  // Their plain values pass.
  json c = mistral_cfg();
  c.update(json{{"attn_logit_softcapping", nullptr},
                {"use_sliding_window", false},
                {"rope_interleaved", false},
                {"layer_types", {"full_attention"}}});
  EXPECT_EQ(config_error(c), "(no error)");
}

TEST(ConfigFamilies, Qwen2IsLlamaWithQkvBiases) {
  const ModelDesc m = parse_hf_config(qwen25_cfg(), json(), "config.json");
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_EQ(m.hf_class, "Qwen2ForCausalLM");
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.head_dim, 64);  // hidden_size / num_attention_heads: no head_dim key
  EXPECT_EQ(m.n_kv_heads, 2);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(m.sliding_window, 0);  // use_sliding_window false: the window key is inert
  EXPECT_EQ(m.eos_ids, (std::vector<int>{151645}));
  EXPECT_EQ(ModelDesc::from_json(m.to_json()).to_json(), m.to_json());
  EXPECT_TRUE(ModelDesc::from_json(m.to_json()).qkv_bias);
  // The other families' descriptions have no qkv_bias key.
  const ModelDesc mistral = parse_hf_config(mistral_cfg(), json(), "config.json");
  EXPECT_FALSE(mistral.qkv_bias);
  EXPECT_FALSE(mistral.to_json().contains("qkv_bias"));
  // Qwen2.5-7B: untied head.
  json c = qwen25_cfg();
  c["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_hf_config(c, json(), "config.json").tied_embeddings);
  // The lowering: one bias_add after each of q_proj, k_proj, v_proj, reading [out_features] biases.
  json small = qwen25_cfg();
  small["hidden_size"] = 128;
  small["num_attention_heads"] = 2;
  small["num_key_value_heads"] = 1;
  small["intermediate_size"] = 256;
  small["vocab_size"] = 300;
  const LoweredModel lm = lower_model(parse_hf_config(small, json(), "config.json"), 64);
  EXPECT_EQ(count_ops(lm, "bias_add"), 3u * 2);
  std::map<std::string, std::vector<int64_t>> biases;
  for (const Op& op : lm.program.ops)
    if (op.family == "bias_add") {
      const TensorDecl& b = lm.program.tensors[op.inputs[1]];
      biases[b.name] = b.shape;
      // Each reads a projection's output directly.
      const int32_t x = op.inputs[0];
      bool from_linear = false;
      for (const Op& w : lm.program.ops) from_linear |= w.family == "linear" && w.outputs[0] == x;
      EXPECT_TRUE(from_linear) << b.name;
    }
  EXPECT_EQ(biases.size(), 6u);
  EXPECT_EQ(biases["model.layers.1.self_attn.q_proj.bias"], (std::vector<int64_t>{128}));
  EXPECT_EQ(biases["model.layers.1.self_attn.k_proj.bias"], (std::vector<int64_t>{64}));
  EXPECT_EQ(biases["model.layers.0.self_attn.v_proj.bias"], (std::vector<int64_t>{64}));
  EXPECT_EQ(
      count_ops(lower_model(parse_hf_config(mistral_cfg(), json(), "config.json"), 64), "bias_add"),
      0u);
}

// final_logit_softcapping c: the lm_head's output goes through one softcap op of cap c, whose
// output is the program's logits (argmax reads them); null or 0: no softcap op.
TEST(ConfigFamilies, FinalLogitSoftcappingCapsTheLogits) {
  json c = mistral_cfg();
  for (const json& none : {json(nullptr), json(0.0)}) {
    c["final_logit_softcapping"] = none;
    EXPECT_EQ(count_ops(lower_model(parse_hf_config(c, json(), "config.json"), 64), "softcap"), 0u);
  }
  c["final_logit_softcapping"] = 30.0;
  const ModelDesc d = parse_hf_config(c, json(), "config.json");
  EXPECT_EQ(d.final_softcap, 30.0);
  const LoweredModel lm = lower_model(d, 64);
  const Program& p = lm.program;
  ASSERT_EQ(count_ops(lm, "softcap"), 1u);
  const Op& cap = p.ops[p.ops.size() - 2];
  ASSERT_EQ(cap.family, "softcap");
  EXPECT_EQ(cap.attrs.at("cap").get<double>(), 30.0);
  EXPECT_EQ(cap.outputs[0], p.logits);
  EXPECT_EQ(p.tensors[p.logits].name, "logits");
  EXPECT_EQ(p.ops[p.ops.size() - 3].family, "linear");
  EXPECT_EQ(p.ops[p.ops.size() - 3].outputs[0], cap.inputs[0]);
  EXPECT_EQ(p.ops.back().family, "argmax");
  EXPECT_EQ(p.ops.back().inputs[0], p.logits);
  c["final_logit_softcapping"] = -1.0;
  EXPECT_EQ(config_error(c),
            "config.json: 'final_logit_softcapping' must be a number >= 0 or null (got -1.0)");
}

TEST(ConfigFamilies, Qwen2SlidingWindowIsRefusedByName) {
  json c = qwen25_cfg();
  c["use_sliding_window"] = true;
  EXPECT_EQ(config_error(c), "config.json: 'use_sliding_window': true is not supported");
  c["use_sliding_window"] = "yes";
  EXPECT_EQ(config_error(c), "config.json: 'use_sliding_window': \"yes\" is not supported");
  c.erase("use_sliding_window");  // absent: the window key is Mistral's, and 32768 cuts nothing
  EXPECT_EQ(parse_hf_config(c, json(), "config.json").sliding_window, 0);
}
