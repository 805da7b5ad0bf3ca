#include "hf/model_desc.h"

#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/json_int.h"

namespace vkllm {

using nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama:
      return "llama";
    case Arch::Qwen3:
      return "qwen3";
    case Arch::Phi3:
      return "phi3";
  }
  return "?";
}

namespace {

const json* find(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int get_int(const json& j, const char* key, const std::string& where, int lo, int hi) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing key '{}'", where, key);
  if (!v->is_number_integer()) fail("{}: key '{}' must be an integer", where, key);
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) fail("{}: key '{}' = {} is out of range [{}, {}]", where, key, x, lo, hi);
  return static_cast<int>(x);
}

double get_num(const json& j, const char* key, const std::string& where, double lo, double hi) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing key '{}'", where, key);
  if (!v->is_number()) fail("{}: key '{}' must be a number", where, key);
  double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    fail("{}: key '{}' = {} is out of range [{}, {}]", where, key, x, lo, hi);
  return x;
}

std::vector<double> get_num_list(const json& j, const char* key, const std::string& where, size_t n,
                                 double lo, double hi) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing key '{}'", where, key);
  if (!v->is_array() || v->size() != n)
    fail("{}: key '{}' must be a list of {} numbers", where, key, n);
  std::vector<double> out;
  for (auto& e : *v) {
    if (!e.is_number()) fail("{}: key '{}' must hold numbers", where, key);
    const double x = e.get<double>();
    if (!(x >= lo && x <= hi))
      fail("{}: key '{}' holds {}, out of range [{}, {}]", where, key, x, lo, hi);
    out.push_back(x);
  }
  return out;
}

std::vector<int> ids_of(const json* v) {
  std::vector<int> out;
  if (!v) return out;
  if (v->is_number_integer()) out.push_back(v->get<int>());
  if (v->is_array())
    for (auto& e : *v)
      if (e.is_number_integer()) out.push_back(e.get<int>());
  return out;
}

// Config keys whose effect the lowering does not implement: refused with one line naming the key
// when set to anything but the plain value (null, false, or what every layer does anyway).
// Reads max_position_embeddings and n_layers from m; sets m.sliding_window, m.use_rope and
// m.final_softcap.
void refuse_unimplemented(const json& c, ModelDesc& m, const std::string& where) {
  const bool gemma = m.hf_class == "Gemma3ForCausalLM";
  for (const char* key : {"attn_logit_softcapping", "query_pre_attn_scalar",
                          "sliding_window_pattern", "num_local_experts", "num_experts"}) {
    const std::string k = key;
    if (gemma && (k == "query_pre_attn_scalar" || k == "sliding_window_pattern")) continue;
    const json* v = find(c, key);
    if (v && !(v->is_number() && v->get<double>() == 0))
      fail("{}: '{}' is not supported (the lowering does not implement it)", where, key);
  }
  for (const char* key : {"use_sliding_window", "rope_interleaved"})
    if (const json* v = find(c, key); v && !(v->is_boolean() && !v->get<bool>()))
      fail("{}: '{}': {} is not supported", where, key, v->dump());
  if (const json* v = find(c, "use_bidirectional_attention");
      v && !(v->is_boolean() && !v->get<bool>()))
    fail("{}: 'use_bidirectional_attention': {} is not supported", where, v->dump());
  if (const json* v = find(c, "final_logit_softcapping"); v && !v->is_null()) {
    if (!v->is_number() || !(v->get<double>() >= 0) || !std::isfinite(v->get<double>()))
      fail("{}: 'final_logit_softcapping' must be a number >= 0 or null (got {})", where,
           v->dump());
    m.final_softcap = v->get<double>();
  }
  const bool window_off = find(c, "use_sliding_window") != nullptr;  // present: false, checked
  // A window at least max_position_embeddings long (Phi-4-mini's) never cuts anything off.
  // (Gemma: sliding_window and layer_types are per layer, parse_gemma3.)
  if (const json* v = find(c, "sliding_window"); v && !window_off && !gemma) {
    const int w = get_int(c, "sliding_window", where, 1, 1 << 30);
    if (w < m.max_pos) m.sliding_window = w;
  }
  if (const json* lt = find(c, "layer_types"); lt && !gemma) {
    if (!lt->is_array()) fail("{}: key 'layer_types' must be a list", where);
    for (const json& t : *lt)
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        fail("{}: 'layer_types' holds {}: only full_attention layers are supported", where,
             t.dump());
  }
  const bool smollm3 = m.hf_class == "SmolLM3ForCausalLM";
  for (const char* key : {"no_rope_layers", "no_rope_layer_interval"})
    if (!smollm3 && find(c, key)) fail("{}: '{}' is not supported for {}", where, key, m.hf_class);
  if (!smollm3) return;
  // SmolLM3Config: no_rope_layers[i] = 1 when layer i uses rope; absent, every
  // no_rope_layer_interval-th layer (default 4) has none.
  if (const json* v = find(c, "no_rope_layers")) {
    if (!v->is_array() || v->size() != static_cast<size_t>(m.n_layers))
      fail("{}: key 'no_rope_layers' must be a list of {} (num_hidden_layers) 0/1 values", where,
           m.n_layers);
    for (const json& e : *v) {
      if (!e.is_number_integer() || (e.get<int64_t>() != 0 && e.get<int64_t>() != 1))
        fail("{}: key 'no_rope_layers' must hold only 0 and 1 (got {})", where, e.dump());
      m.use_rope.push_back(e.get<int>());
    }
  } else {
    const int every = find(c, "no_rope_layer_interval")
                          ? get_int(c, "no_rope_layer_interval", where, 1, 1 << 20)
                          : 4;
    for (int l = 0; l < m.n_layers; ++l) m.use_rope.push_back((l + 1) % every != 0 ? 1 : 0);
  }
}

// The rotary embedding of rope_scaling / rope_parameters block rs (null: none), `theta` where the
// block has no rope_theta. rwhere names the block in errors.
RopeDesc parse_rope(const json& c, const json* rs, const std::string& rwhere,
                    const std::string& where, const ModelDesc& m, double theta) {
  const json empty = json::object();
  const json& rj = rs ? *rs : empty;
  if (!rj.is_object()) fail("{}: must be an object", rwhere);
  RopeDesc r;
  r.theta = find(rj, "rope_theta") ? get_num(rj, "rope_theta", rwhere, 1, 1e12) : theta;
  double partial = 1.0;
  if (find(rj, "partial_rotary_factor"))
    partial = get_num(rj, "partial_rotary_factor", rwhere, 0, 1);
  else if (find(c, "partial_rotary_factor"))
    partial = get_num(c, "partial_rotary_factor", where, 0, 1);
  r.rotary_dim = static_cast<int>(m.head_dim * partial);
  if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0)
    fail("{}: rotary dimension {} must be even and >= 2", where, r.rotary_dim);
  std::string type = "default";
  if (const json* t = find(rj, "rope_type"))
    type = t->get<std::string>();
  else if (const json* t2 = find(rj, "type"))
    type = t2->get<std::string>();
  r.type = type;
  if (type == "default") {
  } else if (type == "linear") {  // positions divided by factor: inv_freq / factor
    r.factor = get_num(rj, "factor", rwhere, 1e-6, 1e6);
  } else if (type == "llama3") {
    r.factor = get_num(rj, "factor", rwhere, 1, 1e6);
    r.low_freq_factor = get_num(rj, "low_freq_factor", rwhere, 1e-6, 1e6);
    r.high_freq_factor = get_num(rj, "high_freq_factor", rwhere, 1e-6, 1e6);
    if (r.high_freq_factor <= r.low_freq_factor)
      fail("{}: high_freq_factor must exceed low_freq_factor", rwhere);
    r.original_max_pos = get_int(rj, "original_max_position_embeddings", rwhere, 1, 1 << 24);
  } else if (type == "longrope") {
    size_t n = static_cast<size_t>(r.rotary_dim / 2);
    // The rotary tables divide by these (in fp32): bounded, so that every frequency stays finite
    // and positive (found by fuzz_config: 1e308 gave a frequency of 0).
    r.short_factor = get_num_list(rj, "short_factor", rwhere, n, 1e-6, 1e6);
    r.long_factor = get_num_list(rj, "long_factor", rwhere, n, 1e-6, 1e6);
    double factor;
    if (find(c, "original_max_position_embeddings")) {
      r.original_max_pos = get_int(c, "original_max_position_embeddings", where, 1, 1 << 24);
      factor = static_cast<double>(m.max_pos) / r.original_max_pos;
    } else if (find(rj, "original_max_position_embeddings")) {
      r.original_max_pos = get_int(rj, "original_max_position_embeddings", rwhere, 1, 1 << 24);
      factor = static_cast<double>(m.max_pos) / r.original_max_pos;
    } else {
      r.original_max_pos = m.max_pos;
      factor = find(rj, "factor") ? get_num(rj, "factor", rwhere, 0, 1e6) : 1.0;
    }
    r.factor = factor;
    if (find(rj, "attention_factor"))
      r.attention_factor = get_num(rj, "attention_factor", rwhere, 0, 1e3);
    else
      r.attention_factor =
          factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(r.original_max_pos));
  } else {
    fail("{}: rope type '{}' is not supported (default, linear, llama3, longrope)", rwhere, type);
  }

  return r;
}

// Gemma3ForCausalLM (text): sandwich norms as x * (1 + w), GeGLU, the scaled embedding,
// query_pre_attn_scalar, sliding-window layers beside global ones (layer_types, or every
// sliding_window_pattern-th layer global), each kind with its own rotary base.
void parse_gemma3(const json& c, ModelDesc& m, const std::string& where) {
  m.qk_norm = true;
  for (const char* key : {"hidden_activation", "hidden_act"})
    if (const json* a = find(c, key);
        a && (!a->is_string() || a->get<std::string>() != "gelu_pytorch_tanh"))
      fail("{}: {} {} is not supported (only gelu_pytorch_tanh)", where, key, a->dump());
  const double qpas = find(c, "query_pre_attn_scalar")
                          ? get_num(c, "query_pre_attn_scalar", where, 1e-6, 1e9)
                          : 256.0;
  m.attn_scale = std::pow(qpas, -0.5);
  // Gemma3TextScaledWordEmbedding: torch.tensor(hidden ** 0.5) (fp32), cast to the weights' dtype.
  const float s32 = static_cast<float>(std::sqrt(static_cast<double>(m.hidden)));
  std::string dtype = "float32";
  for (const char* key : {"dtype", "torch_dtype"})
    if (const json* d = find(c, key); d && d->is_string()) {
      dtype = d->get<std::string>();
      break;
    }
  m.embed_scale = dtype == "bfloat16"  ? bf16_to_f32(f32_to_bf16(s32))
                  : dtype == "float16" ? round_f16(s32)
                                       : s32;
  const int W = find(c, "sliding_window") ? get_int(c, "sliding_window", where, 1, 1 << 30) : 4096;
  std::vector<int> sliding;
  if (const json* lt = find(c, "layer_types")) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(m.n_layers))
      fail("{}: key 'layer_types' must be a list of {} (num_hidden_layers) layer types", where,
           m.n_layers);
    for (const json& t : *lt) {
      const std::string v = t.is_string() ? t.get<std::string>() : "";
      if (v != "sliding_attention" && v != "full_attention")
        fail("{}: 'layer_types' holds {}: expected sliding_attention or full_attention", where,
             t.dump());
      sliding.push_back(v == "sliding_attention");
    }
  } else {
    const int every = find(c, "sliding_window_pattern")
                          ? get_int(c, "sliding_window_pattern", where, 1, 1 << 20)
                          : 6;
    for (int l = 0; l < m.n_layers; ++l) sliding.push_back((l + 1) % every != 0);
  }
  for (int s : sliding) m.layer_window.push_back(s ? W : 0);
  // Rotary tables: transformers 5 keys rope_parameters by layer type; the classic shape has
  // rope_theta (+ rope_scaling) for the global layers and rope_local_base_freq for the others.
  const json* rp = find(c, "rope_parameters");
  const bool keyed = rp && rp->is_object() &&
                     (rp->contains("full_attention") || rp->contains("sliding_attention"));
  const double theta = find(c, "rope_theta") ? get_num(c, "rope_theta", where, 1, 1e12) : 1e6;
  const double local =
      find(c, "rope_local_base_freq") ? get_num(c, "rope_local_base_freq", where, 1, 1e12) : 1e4;
  if (keyed) {
    m.rope = parse_rope(c, find(*rp, "full_attention"), where + " rope_parameters.full_attention",
                        where, m, theta);
    m.rope_local = parse_rope(c, find(*rp, "sliding_attention"),
                              where + " rope_parameters.sliding_attention", where, m, local);
  } else {
    const json* rs = rp ? rp : find(c, "rope_scaling");
    m.rope = parse_rope(c, rs,
                        where + (rp   ? " rope_parameters"
                                 : rs ? " rope_scaling"
                                      : ""),
                        where, m, theta);
    m.rope_local = parse_rope(c, nullptr, where, where, m, local);
  }
  for (const RopeDesc* r : {&m.rope, &m.rope_local})
    if (r->type != "default" && r->type != "linear")
      fail("{}: rope type '{}' is not supported for Gemma 3 (default, linear)", where, r->type);
}

ModelDesc parse_config(const json& c, const json& gen, const std::string& where) {
  if (!c.is_object()) fail("{}: config is not a JSON object", where);
  ModelDesc m;
  const json* archs = find(c, "architectures");
  if (!archs || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail("{}: missing key 'architectures'", where);
  m.hf_class = (*archs)[0].get<std::string>();
  // Mistral, SmolLM3 and Qwen2 have Llama's tensors (SmolLM3: no rotary embedding on some
  // layers; Qwen2: biases on q_proj, k_proj and v_proj).
  if (m.hf_class == "LlamaForCausalLM" || m.hf_class == "MistralForCausalLM" ||
      m.hf_class == "SmolLM3ForCausalLM" || m.hf_class == "Qwen2ForCausalLM" ||
      m.hf_class == "Gemma3ForCausalLM")
    m.arch = Arch::Llama;
  else if (m.hf_class == "Qwen3ForCausalLM")
    m.arch = Arch::Qwen3;
  else if (m.hf_class == "Phi3ForCausalLM")
    m.arch = Arch::Phi3;
  else
    fail(
        "{}: unsupported architecture '{}' (supported: LlamaForCausalLM, MistralForCausalLM, "
        "SmolLM3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
        "Gemma3ForCausalLM)",
        where, m.hf_class);

  m.hidden = get_int(c, "hidden_size", where, 1, 1 << 16);
  m.n_layers = get_int(c, "num_hidden_layers", where, 1, 1024);
  m.n_heads = get_int(c, "num_attention_heads", where, 1, 1024);
  m.n_kv_heads = find(c, "num_key_value_heads") ? get_int(c, "num_key_value_heads", where, 1, 1024)
                                                : m.n_heads;
  if (m.n_heads % m.n_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, m.n_heads,
         m.n_kv_heads);
  if (find(c, "head_dim"))
    m.head_dim = get_int(c, "head_dim", where, 2, 1024);
  else {
    if (m.hidden % m.n_heads != 0)
      fail("{}: hidden_size is not a multiple of num_attention_heads", where);
    m.head_dim = m.hidden / m.n_heads;
  }
  if (m.head_dim % 2 != 0) fail("{}: head_dim {} must be even", where, m.head_dim);
  m.intermediate = get_int(c, "intermediate_size", where, 1, 1 << 20);
  m.vocab = get_int(c, "vocab_size", where, 1, 1 << 24);
  m.max_pos = get_int(c, "max_position_embeddings", where, 1, 1 << 24);
  m.rms_eps = get_num(c, "rms_norm_eps", where, 0, 1);
  m.tied_embeddings =
      find(c, "tie_word_embeddings") ? find(c, "tie_word_embeddings")->get<bool>() : false;
  for (const char* bias_key : {"attention_bias", "mlp_bias"}) {
    const json* b = find(c, bias_key);
    if (b && b->is_boolean() && b->get<bool>())
      fail("{}: '{}': true is not supported", where, bias_key);
  }
  m.gemma_norms = m.hf_class == "Gemma3ForCausalLM";
  if (const json* act = find(c, "hidden_act");
      !m.gemma_norms && act && act->is_string() && act->get<std::string>() != "silu")
    fail("{}: hidden_act '{}' is not supported (only silu)", where, act->get<std::string>());
  refuse_unimplemented(c, m, where);
  m.qk_norm = m.arch == Arch::Qwen3 || m.gemma_norms;
  m.fused_qkv = m.fused_gate_up = m.arch == Arch::Phi3;
  m.qkv_bias = m.hf_class == "Qwen2ForCausalLM";  // Qwen2Attention: nn.Linear(bias=True) for q/k/v

  // RoPE: classic top-level keys, or the transformers 5.x rope_parameters block (for Gemma 3
  // keyed by layer type: parse_gemma3).
  if (m.gemma_norms) {
    parse_gemma3(c, m, where);
  } else {
    const json* rp = find(c, "rope_parameters");
    const json* rs = rp ? rp : find(c, "rope_scaling");
    m.rope = parse_rope(c, rs,
                        where + (rp   ? " rope_parameters"
                                 : rs ? " rope_scaling"
                                      : ""),
                        where, m,
                        find(c, "rope_theta") ? get_num(c, "rope_theta", where, 1, 1e12) : 1e4);
  }

  // Token ids: generation_config wins over config.
  m.bos_id = -1;
  auto bos = ids_of(find(gen, "bos_token_id"));
  if (bos.empty()) bos = ids_of(find(c, "bos_token_id"));
  if (!bos.empty()) m.bos_id = bos[0];
  m.eos_ids = ids_of(find(gen, "eos_token_id"));
  if (m.eos_ids.empty()) m.eos_ids = ids_of(find(c, "eos_token_id"));
  return m;
}

}  // namespace

ModelDesc parse_hf_config(const json& c, const json& gen, const std::string& where) {
  try {
    return parse_config(c, gen, where);
  } catch (const json::exception& e) {
    // A key of the wrong JSON type (e.g. "tie_word_embeddings": "yes", "rope_type": 3).
    fail("{}: malformed config: {}", where, e.what());
  }
}

std::vector<float> rope_inv_freq(const RopeDesc& r, bool long_factors) {
  const int half = r.rotary_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32
    float expo = static_cast<float>(2 * i) / static_cast<float>(r.rotary_dim);
    float base_pow = std::pow(static_cast<float>(r.theta), expo);
    if (r.type == "longrope") {
      float ext = static_cast<float>(long_factors ? r.long_factor[i] : r.short_factor[i]);
      inv[i] = 1.0f / (ext * base_pow);
    } else {
      inv[i] = 1.0f / base_pow;
    }
  }
  if (r.type == "linear")  // transformers: inv_freq /= factor
    for (auto& f : inv) f /= static_cast<float>(r.factor);
  if (r.type == "llama3") {
    const double pi = 3.14159265358979323846;
    double low_wavelen = r.original_max_pos / r.low_freq_factor;
    double high_wavelen = r.original_max_pos / r.high_freq_factor;
    for (auto& f : inv) {
      float wavelen = static_cast<float>(2 * pi) / f;
      float adj = wavelen > low_wavelen ? f / static_cast<float>(r.factor) : f;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) {
        float smooth = (static_cast<float>(r.original_max_pos) / wavelen -
                        static_cast<float>(r.low_freq_factor)) /
                       static_cast<float>(r.high_freq_factor - r.low_freq_factor);
        adj = (1 - smooth) * adj / static_cast<float>(r.factor) + smooth * adj;
      }
      f = adj;
    }
  }
  return inv;
}

namespace {
json rope_json(const RopeDesc& rope) {
  return {{"type", rope.type},
          {"theta", rope.theta},
          {"rotary_dim", rope.rotary_dim},
          {"factor", rope.factor},
          {"low_freq_factor", rope.low_freq_factor},
          {"high_freq_factor", rope.high_freq_factor},
          {"original_max_pos", rope.original_max_pos},
          {"short_factor", rope.short_factor},
          {"long_factor", rope.long_factor},
          {"attention_factor", rope.attention_factor}};
}
RopeDesc rope_from_json(const json& r) {
  RopeDesc o;
  o.type = r.at("type").get<std::string>();
  o.theta = r.at("theta").get<double>();
  o.rotary_dim = json_int<int>(r.at("rotary_dim"), "model description: rope.rotary_dim");
  o.factor = r.at("factor").get<double>();
  o.low_freq_factor = r.at("low_freq_factor").get<double>();
  o.high_freq_factor = r.at("high_freq_factor").get<double>();
  o.original_max_pos =
      json_int<int>(r.at("original_max_pos"), "model description: rope.original_max_pos");
  o.short_factor = r.at("short_factor").get<std::vector<double>>();
  o.long_factor = r.at("long_factor").get<std::vector<double>>();
  o.attention_factor = r.at("attention_factor").get<double>();
  return o;
}
}  // namespace

json ModelDesc::to_json() const {
  json j{{"arch", arch_name(arch)},
         {"hf_class", hf_class},
         {"hidden", hidden},
         {"n_layers", n_layers},
         {"n_heads", n_heads},
         {"n_kv_heads", n_kv_heads},
         {"head_dim", head_dim},
         {"intermediate", intermediate},
         {"vocab", vocab},
         {"max_pos", max_pos},
         {"rms_eps", rms_eps},
         {"tied_embeddings", tied_embeddings},
         {"qk_norm", qk_norm},
         {"fused_qkv", fused_qkv},
         {"fused_gate_up", fused_gate_up},
         {"bos_id", bos_id},
         {"eos_ids", eos_ids},
         {"rope", rope_json(rope)}};
  // Written only where set, so the other families' descriptions stay as they were.
  if (!use_rope.empty()) j["use_rope"] = use_rope;
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
  if (qkv_bias) j["qkv_bias"] = true;
  if (gemma_norms) {
    j["gemma_norms"] = true;
    j["embed_scale"] = embed_scale;
    j["attn_scale"] = attn_scale;
    j["layer_window"] = layer_window;
    j["rope_local"] = rope_json(rope_local);
  }
  return j;
}

ModelDesc ModelDesc::from_json(const json& j) {
  try {
    ModelDesc m;
    const std::string a = j.at("arch").get<std::string>();
    bool known = false;
    for (Arch x : {Arch::Llama, Arch::Qwen3, Arch::Phi3})
      if (a == arch_name(x)) m.arch = x, known = true;
    if (!known) fail("model description: unknown arch '{}'", a);
    m.hf_class = j.at("hf_class").get<std::string>();
    m.hidden = json_int<int>(j.at("hidden"), "model description: hidden");
    m.n_layers = json_int<int>(j.at("n_layers"), "model description: n_layers");
    m.n_heads = json_int<int>(j.at("n_heads"), "model description: n_heads");
    m.n_kv_heads = json_int<int>(j.at("n_kv_heads"), "model description: n_kv_heads");
    m.head_dim = json_int<int>(j.at("head_dim"), "model description: head_dim");
    m.intermediate = json_int<int>(j.at("intermediate"), "model description: intermediate");
    m.vocab = json_int<int>(j.at("vocab"), "model description: vocab");
    m.max_pos = json_int<int>(j.at("max_pos"), "model description: max_pos");
    m.rms_eps = j.at("rms_eps").get<double>();
    m.tied_embeddings = j.at("tied_embeddings").get<bool>();
    m.qk_norm = j.at("qk_norm").get<bool>();
    m.fused_qkv = j.at("fused_qkv").get<bool>();
    m.fused_gate_up = j.at("fused_gate_up").get<bool>();
    m.bos_id = json_int<int>(j.at("bos_id"), "model description: bos_id");
    m.eos_ids = json_ints<int>(j.at("eos_ids"), "model description: eos_ids");
    m.rope = rope_from_json(j.at("rope"));
    if (j.contains("use_rope"))
      m.use_rope = json_ints<int>(j.at("use_rope"), "model description: use_rope");
    if (j.contains("sliding_window"))
      m.sliding_window = json_int<int>(j.at("sliding_window"), "model description: sliding_window");
    if (j.contains("qkv_bias")) m.qkv_bias = j.at("qkv_bias").get<bool>();
    if (j.contains("gemma_norms")) {
      m.gemma_norms = j.at("gemma_norms").get<bool>();
      m.embed_scale = j.at("embed_scale").get<double>();
      m.attn_scale = j.at("attn_scale").get<double>();
      m.layer_window = json_ints<int>(j.at("layer_window"), "model description: layer_window");
      m.rope_local = rope_from_json(j.at("rope_local"));
      if (m.layer_window.size() != static_cast<size_t>(m.n_layers))
        fail("model description: layer_window has {} entries for {} layers", m.layer_window.size(),
             m.n_layers);
      for (int w : m.layer_window)
        if (w < 0) fail("model description: layer_window holds {}", w);
      if (!(std::fabs(m.embed_scale) < 1e6) || !(m.attn_scale > 0 && m.attn_scale < 1e6) ||
          m.rope_local.rotary_dim != m.rope.rotary_dim)
        fail("model description: Gemma 3 scales or rotary tables out of range");
    }
    auto bad = [](int v, int hi) { return v < 1 || v > hi; };
    if (bad(m.hidden, 1 << 16) || bad(m.n_layers, 1024) || bad(m.n_heads, 1024) ||
        bad(m.n_kv_heads, 1024) || bad(m.head_dim, 1024) || bad(m.intermediate, 1 << 20) ||
        bad(m.vocab, 1 << 24) || bad(m.max_pos, 1 << 24) || m.n_heads % m.n_kv_heads != 0 ||
        m.rope.rotary_dim < 2 || m.rope.rotary_dim > m.head_dim || m.rope.rotary_dim % 2 != 0)
      fail("model description: dimensions out of range");
    if (!m.use_rope.empty() && m.use_rope.size() != static_cast<size_t>(m.n_layers))
      fail("model description: use_rope has {} entries for {} layers", m.use_rope.size(),
           m.n_layers);
    for (int u : m.use_rope)
      if (u != 0 && u != 1) fail("model description: use_rope holds {} (0 or 1)", u);
    if (m.sliding_window < 0) fail("model description: sliding_window is negative");
    if (m.rope.type == "longrope" &&
        (m.rope.short_factor.size() != static_cast<size_t>(m.rope.rotary_dim / 2) ||
         m.rope.long_factor.size() != m.rope.short_factor.size()))
      fail("model description: longrope factor lists have the wrong length");
    return m;
  } catch (const nlohmann::json::exception& e) {
    fail("model description: {}", e.what());
  }
}

}  // namespace vkllm
