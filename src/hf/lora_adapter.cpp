// adapter_config.json and peft's module selection rules (check_target_module_exists,
// get_pattern_key; docs/lora.md). Regular expressions are PCRE2, as everywhere in vkllm, with a
// match limit: the patterns come from an untrusted file.
#include "hf/lora_adapter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"

namespace vkllm {

using ojson = nlohmann::ordered_json;

namespace {

constexpr int kMaxRank = 1 << 16;

bool present(const ojson& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

int64_t int_of(const ojson& v, const std::string& what, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) fail("{} = {} is out of range", what, v.dump());
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    fail("{} must be an integer (got {})", what, v.dump());
  }
  if (x < lo || x > hi) fail("{} = {} is out of range [{}, {}]", what, x, lo, hi);
  return x;
}

double number_of(const ojson& v, const std::string& what) {
  if (!v.is_number()) fail("{} must be a number (got {})", what, v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail("{} must be finite", what);
  return x;
}

bool bool_of(const ojson& j, const char* key, const std::string& where) {
  if (!present(j, key)) return false;
  if (!j[key].is_boolean())
    fail("{}: {} must be true or false (got {})", where, key, j[key].dump());
  return j[key].get<bool>();
}

std::string string_of(const ojson& j, const char* key, const std::string& where) {
  if (!present(j, key)) return "";
  if (!j[key].is_string()) fail("{}: {} must be a string (got {})", where, key, j[key].dump());
  return j[key].get<std::string>();
}

// A string (regex) or a list of names; `key` names the field in errors.
void names_or_regex(const ojson& v, const std::string& where, const char* key, bool* is_regex,
                    std::string* regex, std::vector<std::string>* names) {
  if (v.is_string()) {
    *is_regex = true;
    *regex = v.get<std::string>();
    return;
  }
  if (!v.is_array()) fail("{}: {} must be a string (a regex) or a list of names", where, key);
  for (const auto& e : v) {
    if (!e.is_string() || e.get<std::string>().empty())
      fail("{}: {} must list non-empty module names (got {})", where, key, e.dump());
    names->push_back(e.get<std::string>());
  }
}

// One compiled pattern. Python's re.match / re.fullmatch map to PCRE2_ANCHORED /
// PCRE2_ANCHORED | PCRE2_ENDANCHORED at match time.
class Pattern {
 public:
  Pattern(const std::string& pattern, const std::string& where) : where_(where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &err,
                          &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: regular expression '{}' does not compile at offset {}: {}", where, pattern, off,
           reinterpret_cast<char*>(msg));
    }
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
    ctx_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(ctx_, 1000000);
    pcre2_set_depth_limit(ctx_, 10000);
  }
  ~Pattern() {
    pcre2_match_context_free(ctx_);
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // Matches at the start (and, with full, through the end); *group1 receives capture 1.
  bool match(const std::string& s, bool full, std::string* group1 = nullptr) const {
    const uint32_t opts = PCRE2_ANCHORED | (full ? PCRE2_ENDANCHORED : 0);
    const int rc =
        pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, opts, data_, ctx_);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("{}: matching '{}' failed: {}", where_, s, reinterpret_cast<char*>(msg));
    }
    if (group1) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
      *group1 = rc > 1 && ov[2] != PCRE2_UNSET ? s.substr(ov[2], ov[3] - ov[2]) : "";
    }
    return true;
  }

 private:
  std::string where_;
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
  pcre2_match_context* ctx_ = nullptr;
};

bool ends_with_component(const std::string& key, const std::string& name) {
  return key.size() > name.size() &&
         key.compare(key.size() - name.size(), name.size(), name) == 0 &&
         key[key.size() - name.size() - 1] == '.';
}

bool listed(const std::vector<std::string>& names, const std::string& key) {
  for (const auto& n : names)
    if (n == key || ends_with_component(key, n)) return true;
  return false;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// get_pattern_key: the first pattern p (in file order) with re.match(rf"(.*\.)?({p})$", key).
template <typename V>
const V* pattern_value(const std::vector<std::pair<std::string, V>>& pats, const std::string& key,
                       const char* what) {
  for (const auto& [p, v] : pats) {
    const Pattern re("(.*\\.)?(" + p + ")$", what);
    if (re.match(key, false)) return &v;
  }
  return nullptr;
}

}  // namespace

bool lora_targets(const LoraConfig& c, const std::string& key) {
  if (c.exclude_is_regex) {
    if (Pattern(c.exclude_regex, "exclude_modules").match(key, true)) return false;
  } else if (listed(c.exclude_names, key)) {
    return false;
  }
  if (c.target_is_regex) return Pattern(c.target_regex, "target_modules").match(key, true);
  if (std::find(c.target_names.begin(), c.target_names.end(), key) != c.target_names.end())
    return true;  // an exact name is not filtered by layers_to_transform (as in peft)
  bool found = false;
  for (const auto& n : c.target_names) found = found || ends_with_component(key, n);
  if (!found || !c.layers_set) return found;
  std::string index;
  bool hit = false;
  if (c.layers_pattern.empty()) {
    hit = Pattern(R"(.*\.[^.]*\.(\d+)\.)", "layers_to_transform").match(key, false, &index);
  } else {
    for (const auto& p : c.layers_pattern)
      if ((hit = Pattern(".*\\." + p + "\\.(\\d+)\\.", "layers_pattern").match(key, false, &index)))
        break;
  }
  if (!hit || index.empty() || index.size() > 9) return false;
  const int64_t layer = std::stoll(index);
  return std::find(c.layers_to_transform.begin(), c.layers_to_transform.end(), layer) !=
         c.layers_to_transform.end();
}

bool lora_all_linear(const LoraConfig& c) {
  return c.target_is_regex && lower(c.target_regex) == "all-linear";
}

bool lora_name_matches(const std::string& module, const std::string& name) {
  return module == name || ends_with_component(module, name);
}

int lora_module_rank(const LoraConfig& c, const std::string& module, bool* from_pattern) {
  const int* p = pattern_value(c.rank_pattern, module, "rank_pattern");
  if (from_pattern) *from_pattern = p != nullptr;
  return p ? *p : c.r;
}

double lora_module_alpha(const LoraConfig& c, const std::string& module) {
  const double* p = pattern_value(c.alpha_pattern, module, "alpha_pattern");
  return p ? *p : c.lora_alpha;
}

std::vector<BaseModule> lora_base_modules(const ModelDesc& d) {
  const int64_t D = d.hidden, qw = int64_t(d.n_heads) * d.head_dim,
                kvw = int64_t(d.n_kv_heads) * d.head_dim, F = d.intermediate;
  std::vector<BaseModule> m;
  auto plain = [&](const std::string& n) { m.push_back({n, false, "", 0, 0, 0, false}); };
  auto lin = [&](const std::string& n, const std::string& t, int64_t row, int64_t out, int64_t in,
                 bool split) {
    m.push_back({n, true, t + ".weight", row, out, in, split});
  };
  plain("model");
  plain("model.embed_tokens");
  plain("model.layers");
  for (int l = 0; l < d.n_layers; ++l) {
    const std::string L = fmt::format("model.layers.{}", l);
    plain(L);
    const std::string a = L + ".self_attn", f = L + ".mlp";
    plain(a);
    if (d.fused_qkv) {
      lin(a + ".qkv_proj", a + ".qkv_proj", 0, qw + 2 * kvw, D, false);
      // The separate projections of an unfused variant (Unsloth's llama-fied Phi, vLLM's
      // packing): rows of the fused tensor. Only used when the adapter has tensors for them.
      lin(a + ".q_proj", a + ".qkv_proj", 0, qw, D, true);
      lin(a + ".k_proj", a + ".qkv_proj", qw, kvw, D, true);
      lin(a + ".v_proj", a + ".qkv_proj", qw + kvw, kvw, D, true);
    } else {
      lin(a + ".q_proj", a + ".q_proj", 0, qw, D, false);
      lin(a + ".k_proj", a + ".k_proj", 0, kvw, D, false);
      lin(a + ".v_proj", a + ".v_proj", 0, kvw, D, false);
    }
    lin(a + ".o_proj", a + ".o_proj", 0, D, qw, false);
    if (d.qk_norm) {
      plain(a + ".q_norm");
      plain(a + ".k_norm");
    }
    plain(f);
    if (d.fused_gate_up) {
      lin(f + ".gate_up_proj", f + ".gate_up_proj", 0, 2 * F, D, false);
      lin(f + ".gate_proj", f + ".gate_up_proj", 0, F, D, true);
      lin(f + ".up_proj", f + ".gate_up_proj", F, F, D, true);
    } else {
      lin(f + ".gate_proj", f + ".gate_proj", 0, F, D, false);
      lin(f + ".up_proj", f + ".up_proj", 0, F, D, false);
    }
    lin(f + ".down_proj", f + ".down_proj", 0, D, F, false);
    plain(f + ".act_fn");
    plain(L + ".input_layernorm");
    plain(L + ".post_attention_layernorm");
    if (d.arch == Arch::Phi3) {
      plain(L + ".resid_attn_dropout");
      plain(L + ".resid_mlp_dropout");
    }
  }
  plain("model.norm");
  plain("model.rotary_emb");
  plain("lm_head");
  return m;
}

LoraConfig parse_lora_config(const ojson& j, const std::string& where) {
  if (!j.is_object()) fail("{}: not a JSON object", where);
  LoraConfig c;
  // What cannot become plain merged weights is refused, each with its reason (docs/lora.md).
  const std::string type = string_of(j, "peft_type", where);
  if (type.empty()) fail("{}: no peft_type (not a peft adapter config)", where);
  if (type != "LORA")
    fail("{}: peft_type {} is not LORA: only LoRA adapters can be merged (docs/lora.md)", where,
         type);
  if (bool_of(j, "use_dora", where))
    fail(
        "{}: use_dora: DoRA adapters rescale every column by a learned magnitude; vkllm merges "
        "plain LoRA only",
        where);
  if (present(j, "modules_to_save") &&
      !(j["modules_to_save"].is_array() && j["modules_to_save"].empty()))
    fail(
        "{}: modules_to_save {}: the adapter replaces whole modules with trained copies, which "
        "vkllm does not merge",
        where, j["modules_to_save"].dump());
  if (present(j, "bias")) {
    const std::string bias = string_of(j, "bias", where);
    if (bias != "none")
      fail(
          "{}: bias \"{}\": the adapter trains biases, which the base models have none of; only "
          "bias \"none\" is merged",
          where, bias);
  }
  if (bool_of(j, "lora_bias", where))
    fail("{}: lora_bias: the adapter's lora_B has a bias, which vkllm does not merge", where);
  if (present(j, "trainable_token_indices"))
    fail(
        "{}: trainable_token_indices: the adapter trains embedding rows, which vkllm does not "
        "merge",
        where);
  if (present(j, "layer_replication"))
    fail("{}: layer_replication: the adapter duplicates layers, which vkllm does not support",
         where);
  if (present(j, "target_parameters") &&
      !(j["target_parameters"].is_array() && j["target_parameters"].empty()))
    fail("{}: target_parameters: LoRA on raw parameters is not supported", where);
  if (bool_of(j, "use_qalora", where))
    fail(
        "{}: use_qalora: a QA-LoRA adapter applies to group-pooled inputs and is not a plain "
        "delta of the weights",
        where);
  if (present(j, "arrow_config"))
    fail(
        "{}: arrow_config: Arrow routes between several LoRA experts per token and cannot be "
        "merged into one set of weights",
        where);
  if (present(j, "alora_invocation_tokens"))
    fail(
        "{}: alora_invocation_tokens: an activated LoRA applies only after its invocation tokens "
        "and cannot be merged into the weights",
        where);

  c.base_model = string_of(j, "base_model_name_or_path", where);
  c.revision = string_of(j, "revision", where);
  if (!present(j, "r")) fail("{}: no r (the LoRA rank)", where);
  c.r = static_cast<int>(int_of(j["r"], where + ": r", 1, kMaxRank));
  c.lora_alpha = present(j, "lora_alpha") ? number_of(j["lora_alpha"], where + ": lora_alpha")
                                          : static_cast<double>(c.r);
  c.use_rslora = bool_of(j, "use_rslora", where);
  c.fan_in_fan_out = bool_of(j, "fan_in_fan_out", where);

  if (!present(j, "target_modules"))
    fail("{}: no target_modules (which modules the adapter changes)", where);
  names_or_regex(j["target_modules"], where, "target_modules", &c.target_is_regex, &c.target_regex,
                 &c.target_names);
  if (!c.target_is_regex && c.target_names.empty()) fail("{}: target_modules is empty", where);
  if (present(j, "exclude_modules"))
    names_or_regex(j["exclude_modules"], where, "exclude_modules", &c.exclude_is_regex,
                   &c.exclude_regex, &c.exclude_names);

  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!present(j, key)) continue;
    if (!j[key].is_object()) fail("{}: {} must be an object of pattern -> value", where, key);
    for (const auto& [pat, v] : j[key].items()) {
      const std::string what = fmt::format("{}: {}[\"{}\"]", where, key, pat);
      if (pat.empty()) fail("{}: {} has an empty pattern", where, key);
      if (std::string(key) == "rank_pattern")
        c.rank_pattern.emplace_back(pat, static_cast<int>(int_of(v, what, 1, kMaxRank)));
      else
        c.alpha_pattern.emplace_back(pat, number_of(v, what));
    }
  }

  if (present(j, "layers_to_transform")) {
    const ojson& v = j["layers_to_transform"];
    const std::string what = where + ": layers_to_transform";
    if (v.is_array()) {
      for (const auto& e : v) c.layers_to_transform.push_back(int_of(e, what, 0, 1 << 20));
      c.layers_set = !c.layers_to_transform.empty();
    } else {
      c.layers_to_transform.push_back(int_of(v, what, 0, 1 << 20));
      c.layers_set = true;
    }
  }
  if (present(j, "layers_pattern")) {
    const ojson& v = j["layers_pattern"];
    if (v.is_string()) {
      if (!v.get<std::string>().empty()) c.layers_pattern.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_string()) fail("{}: layers_pattern must list strings", where);
        c.layers_pattern.push_back(e.get<std::string>());
      }
    } else {
      fail("{}: layers_pattern must be a string or a list of strings", where);
    }
  }
  return c;
}

const std::vector<std::string>& LoraAdapter::file_names() {
  static const std::vector<std::string> names = {"adapter_config.json",
                                                 "adapter_model.safetensors"};
  return names;
}

LoraAdapter::LoraAdapter(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("{}: not a directory (expected a LoRA adapter folder with adapter_config.json)", dir);
  const std::string cfg = dir + "/adapter_config.json";
  if (!fs::exists(cfg, ec))
    fail("{}: no adapter_config.json (not a peft LoRA adapter folder)", dir);
  const std::string text = read_text_file(cfg);
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const ojson::exception& e) {
    fail("{}: not valid JSON: {}", cfg, e.what());
  }
  config_ = parse_lora_config(j, cfg);
  const std::string st = dir + "/adapter_model.safetensors";
  if (!fs::exists(st, ec)) {
    if (fs::exists(dir + "/adapter_model.bin", ec))
      fail(
          "{}: only a pickle adapter (adapter_model.bin) is present; pickle files can run code "
          "and are refused. Save it as safetensors (peft: save_pretrained(safe_serialization="
          "True))",
          dir);
    fail("{}: no adapter_model.safetensors", dir);
  }
  st_ = std::make_unique<SafetensorsFile>(st);
}

}  // namespace vkllm
