#include "testutil/tiny_checkpoint.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "core/mapped_file.h"
#include "hf/safetensors.h"
#include "hf/synth.h"
#include "tokenizer/utf8.h"

namespace vkllm::testutil {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto d = fs::temp_directory_path() / ("vkllm-test-" + tag + "-" + std::to_string(::getpid()) +
                                        "-" + std::to_string(counter++));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

namespace {

struct TokenlessTwin {
  std::string root, dir;
  explicit TokenlessTwin(const std::string& preset)
      : root(temp_dir("twin")), dir(root + "/" + preset) {
    SynthOptions so;
    so.preset = preset;
    so.out_dir = dir;
    so.no_tokenizer = true;
    synth_write(so);
    write_text_file(dir + "/tokenizer.json", tiny_tokenizer_json());
  }
  ~TokenlessTwin() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

}  // namespace

const std::string& tokenless_twin(const std::string& preset) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TokenlessTwin>> twins;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = twins[preset];
  if (!t) t = std::make_unique<TokenlessTwin>(preset);
  return t->dir;
}

std::string sha256_file_hex(const std::string& path) {
  MappedFile m(path);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(m.data(), m.size(), md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

namespace {
struct Rng {
  uint64_t s;
  double uniform() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
  }
};

TensorToWrite bf16_tensor(const std::string& name, std::vector<int64_t> shape, Rng& rng,
                          double scale, double bias = 0) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  TensorToWrite t{name, StDType::BF16, shape, std::vector<uint8_t>(static_cast<size_t>(n) * 2)};
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h = f32_to_bf16(static_cast<float>(bias + scale * (2 * rng.uniform() - 1)));
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}
}  // namespace

std::string write_tiny_checkpoint(const std::string& dir, Arch arch, bool tied, uint64_t seed) {
  fs::create_directories(dir);
  const int V = 300, D = 64, L = 2, H = 4, KV = 2, hd = 16, F = 96;
  json c = {{"hidden_size", D},
            {"num_hidden_layers", L},
            {"num_attention_heads", H},
            {"num_key_value_heads", KV},
            {"intermediate_size", F},
            {"vocab_size", V},
            {"max_position_embeddings", 4096},
            {"rms_norm_eps", 1e-5},
            {"tie_word_embeddings", tied},
            {"hidden_act", "silu"},
            {"bos_token_id", 1},
            {"eos_token_id", 2}};
  if (arch == Arch::Llama) {
    c["architectures"] = {"LlamaForCausalLM"};
    c["rope_theta"] = 500000.0;
    c["head_dim"] = hd;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
  } else if (arch == Arch::Qwen3) {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["rope_theta"] = 1000000.0;
    c["head_dim"] = hd;
  } else {
    c["architectures"] = {"Phi3ForCausalLM"};
    c["hidden_size"] = H * hd;  // Phi-3 derives head_dim from hidden / heads
    c["rope_theta"] = 10000.0;
    c["partial_rotary_factor"] = 0.75;
    c["original_max_position_embeddings"] = 32;
    std::vector<double> s, l;
    for (int i = 0; i < 6; ++i) {
      s.push_back(1.0 + 0.1 * i);
      l.push_back(2.0 + 0.5 * i);
    }
    c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", s}, {"long_factor", l}};
  }
  const int Dm = c["hidden_size"].get<int>();
  std::ofstream(dir + "/config.json") << c.dump(2);
  Rng rng{seed};
  std::vector<TensorToWrite> ts;
  ts.push_back(bf16_tensor("model.embed_tokens.weight", {V, Dm}, rng, 1.0));
  const double ws = 1.0 / std::sqrt(static_cast<double>(Dm));
  for (int l = 0; l < L; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back(bf16_tensor(p + "input_layernorm.weight", {Dm}, rng, 0.2, 1.0));
    ts.push_back(bf16_tensor(p + "post_attention_layernorm.weight", {Dm}, rng, 0.2, 1.0));
    if (arch == Arch::Phi3) {
      ts.push_back(bf16_tensor(p + "self_attn.qkv_proj.weight", {(H + 2 * KV) * hd, Dm}, rng, ws));
      ts.push_back(bf16_tensor(p + "mlp.gate_up_proj.weight", {2 * F, Dm}, rng, ws));
    } else {
      ts.push_back(bf16_tensor(p + "self_attn.q_proj.weight", {H * hd, Dm}, rng, ws));
      ts.push_back(bf16_tensor(p + "self_attn.k_proj.weight", {KV * hd, Dm}, rng, ws));
      ts.push_back(bf16_tensor(p + "self_attn.v_proj.weight", {KV * hd, Dm}, rng, ws));
      ts.push_back(bf16_tensor(p + "mlp.gate_proj.weight", {F, Dm}, rng, ws));
      ts.push_back(bf16_tensor(p + "mlp.up_proj.weight", {F, Dm}, rng, ws));
    }
    if (arch == Arch::Qwen3) {
      ts.push_back(bf16_tensor(p + "self_attn.q_norm.weight", {hd}, rng, 0.2, 1.0));
      ts.push_back(bf16_tensor(p + "self_attn.k_norm.weight", {hd}, rng, 0.2, 1.0));
    }
    ts.push_back(bf16_tensor(p + "self_attn.o_proj.weight", {Dm, H * hd}, rng, ws));
    ts.push_back(bf16_tensor(p + "mlp.down_proj.weight", {Dm, F}, rng, 1.0 / std::sqrt(double(F))));
  }
  ts.push_back(bf16_tensor("model.norm.weight", {Dm}, rng, 0.2, 1.0));
  if (!tied) ts.push_back(bf16_tensor("lm_head.weight", {V, Dm}, rng, ws * 4));
  write_safetensors(dir + "/model.safetensors", ts, {{"format", "pt"}});
  return dir;
}

std::string tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, utf8::byte_to_char()[static_cast<size_t>(b)]);
    vocab[s] = b;
  }
  nlohmann::json added = nlohmann::json::array();
  for (int id : {256, 257})
    added.push_back({{"id", id}, {"content", id == 256 ? "<s>" : "</s>"}, {"special", true}});
  return nlohmann::json{
      {"version", "1.0"},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}}
      .dump();
}

std::string tiny_tokenizer_config_json() {
  return R"({"bos_token": "<s>", "eos_token": "</s>"})";
}

}  // namespace vkllm::testutil
