// The normalized model description: what every later stage (exporter, engines) needs to know
// about a decoder-only transformer, whichever Hugging Face family it came from.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vkllm {

enum class Arch { Llama, Qwen3, Phi3 };
const char* arch_name(Arch a);  // "llama", "qwen3", "phi3"

struct RopeDesc {
  std::string type = "default";  // default | llama3 | longrope
  double theta = 10000.0;
  int rotary_dim = 0;  // dims of each head that rotate (head_dim * partial_rotary_factor)
  // llama3
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int original_max_pos = 0;
  // longrope
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;  // cos/sin scaling (longrope mscale)
};

struct ModelDesc {
  Arch arch = Arch::Llama;
  std::string hf_class;
  int hidden = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, intermediate = 0,
      vocab = 0;
  int max_pos = 0;
  double rms_eps = 1e-5;
  bool tied_embeddings = false;
  bool qk_norm = false;        // Qwen3: RMSNorm on each q and k head
  bool fused_qkv = false;      // Phi3: qkv_proj
  bool fused_gate_up = false;  // Phi3: gate_up_proj
  bool qkv_bias = false;       // Qwen2: q_proj, k_proj and v_proj have a bias
  RopeDesc rope;
  // Gemma 3 (Gemma3ForCausalLM), each off for the other families:
  //  gemma_norms: RMSNorm as x * (1 + w) (1 + w folded into the stored weight at export), two more
  //    norms a layer (post_attention_layernorm on the attention output before its residual add,
  //    pre_/post_feedforward_layernorm around the MLP), GeGLU (tanh GeLU) in place of SwiGLU;
  //  embed_scale: the embedding output multiplied by it (sqrt(hidden) rounded to the checkpoint's
  //    dtype; 0: none); attn_scale: the attention's softmax scale (0: head_dim^-0.5);
  //  layer_window: per layer, the sliding window W (a query at i sees keys i-W+1..i; 0: global),
  //    empty: every layer global; rope_local: the rotary tables of the windowed layers.
  bool gemma_norms = false;
  double embed_scale = 0, attn_scale = 0;
  // final_logit_softcapping (any family): the logits as c * tanh(logits / c) (0: none; the
  // program's softcap op, not stored in the artifact's description).
  double final_softcap = 0;
  std::vector<int> layer_window;
  RopeDesc rope_local;
  int layer_win(int layer) const {
    return layer_window.empty() ? 0 : layer_window[static_cast<size_t>(layer)];
  }
  // SmolLM3: per layer, 1 = rotary embedding on q and k, 0 = none (config.json no_rope_layers,
  // or derived from no_rope_layer_interval). Empty: every layer has it.
  std::vector<int> use_rope;
  // Mistral: attention sees only the last sliding_window keys (0: unlimited). Not implemented:
  // lower_model refuses a context longer than the window, where it would matter.
  int sliding_window = 0;
  bool layer_has_rope(int layer) const {
    return use_rope.empty() || use_rope[static_cast<size_t>(layer)] != 0;
  }
  int bos_id = -1;
  std::vector<int> eos_ids;

  nlohmann::json to_json() const;
  static ModelDesc from_json(const nlohmann::json& j);  // validates; throws Error
};

// Parses a Hugging Face config.json (classic rope_theta/rope_scaling or the transformers 5.x
// rope_parameters block) plus generation_config.json (may be null) into a ModelDesc.
// `where` names the file in error messages.
ModelDesc parse_hf_config(const nlohmann::json& config, const nlohmann::json& generation_config,
                          const std::string& where);

// Rotary inverse frequencies (rotary_dim/2 values), exactly as transformers computes them.
// For longrope, `long_factors` selects the long table (used when a forward reaches positions
// beyond original_max_pos).
std::vector<float> rope_inv_freq(const RopeDesc& r, bool long_factors = false);

}  // namespace vkllm
