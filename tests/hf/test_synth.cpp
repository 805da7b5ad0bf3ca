// vkllm synth: byte determinism (sha256), HF layout (names, shapes, dtype, config -> ModelDesc),
// sharding, weight statistics and the CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "core/mapped_file.h"
#include "hf/checkpoint.h"
#include "hf/synth.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string sha256_file(const std::string& path) {
  return testutil::sha256_file_hex(path);
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / fmt::format("vkllm_test_synth_{}_{}", ::getpid(), tag);
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string sub(const std::string& s) const { return (path / s).string(); }
};

SynthResult synth(const std::string& preset, const std::string& dir, uint64_t seed = 0,
                  int threads = 0, uint64_t shard = 2000000000ull) {
  SynthOptions o;
  o.preset = preset;
  o.out_dir = dir;
  o.seed = seed;
  o.no_tokenizer = true;
  o.threads = threads;
  o.max_shard_bytes = shard;
  return synth_write(o);
}

const char* kTwins[] = {"tiny-qwen3", "tiny-llama3.2", "tiny-phi4mini"};

// The Hugging Face tensor names of each family, written out independently of synth.cpp.
std::set<std::string> expected_names(const std::string& arch, int layers) {
  std::set<std::string> s = {"model.embed_tokens.weight", "model.norm.weight"};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::string> per = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                    "self_attn.o_proj.weight", "mlp.down_proj.weight"};
    if (arch == "phi3") {
      per.insert(per.end(), {"self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"});
    } else {
      per.insert(per.end(),
                 {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "mlp.gate_proj.weight", "mlp.up_proj.weight"});
      if (arch == "qwen3")
        per.insert(per.end(), {"self_attn.q_norm.weight", "self_attn.k_norm.weight"});
    }
    for (auto& n : per) s.insert(p + n);
  }
  return s;
}

double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<float>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::string run_cli(const std::string& args, int* rc) {
  const std::string cmd = std::string(VKLLM_EXE) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace

TEST(Synth, PresetsAndSizes) {
  std::set<std::string> names;
  for (auto& p : synth_presets()) names.insert(p.name);
  EXPECT_EQ(names, (std::set<std::string>{
                       "tiny-qwen3", "tiny-llama3.2", "tiny-phi4mini", "tiny-mistral",
                       "tiny-smollm3", "tiny-qwen2.5", "tiny-gemma3", "qwen3-0.6b", "llama-3.2-1b",
                       "phi-4-mini", "qwen2.5-0.5b", "gemma-3-1b", "qwen2.5-1.5b", "qwen3-1.7b",
                       "llama-3.2-3b", "smollm3-3b", "qwen3-4b", "llama-3.1-8b"}));
  // Real vocab rows and head_dim in every twin; twins stay small.
  EXPECT_EQ(find_synth_preset("tiny-qwen3").vocab, 151936);
  EXPECT_EQ(find_synth_preset("tiny-llama3.2").vocab, 128256);
  EXPECT_EQ(find_synth_preset("tiny-phi4mini").vocab, 200064);
  EXPECT_LT(synth_param_count(find_synth_preset("tiny-qwen3")) * 2, 50'000'000u);
  EXPECT_LT(synth_param_count(find_synth_preset("tiny-llama3.2")) * 2, 40'000'000u);
  EXPECT_LT(synth_param_count(find_synth_preset("tiny-phi4mini")) * 2, 55'000'000u);
  EXPECT_LT(synth_param_count(find_synth_preset("tiny-gemma3")) * 2, 40'000'000u);
  // Full shapes: the public parameter counts (tied embeddings, no lm_head tensor).
  EXPECT_EQ(synth_param_count(find_synth_preset("qwen3-0.6b")), 596049920u);
  EXPECT_EQ(synth_param_count(find_synth_preset("llama-3.2-1b")), 1235814400u);
  EXPECT_EQ(synth_param_count(find_synth_preset("phi-4-mini")), 3836021760u);
  EXPECT_EQ(synth_param_count(find_synth_preset("qwen2.5-1.5b")), 1543714304u);
  EXPECT_EQ(synth_param_count(find_synth_preset("llama-3.2-3b")), 3212749824u);
  EXPECT_EQ(synth_param_count(find_synth_preset("smollm3-3b")), 3075098624u);
  EXPECT_EQ(synth_param_count(find_synth_preset("qwen3-4b")), 4022468096u);
  // Llama-3.1-8B's lm_head is its own tensor (untied).
  EXPECT_EQ(synth_param_count(find_synth_preset("llama-3.1-8b")), 8030261248u);
  try {
    find_synth_preset("tiny-gpt2");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-qwen3"), std::string::npos) << e.what();
  }
}

TEST(Synth, TwinsLoadAsExpectedModelDesc) {
  TempDir t("desc");
  for (const char* twin : kTwins) {
    SCOPED_TRACE(twin);
    const SynthPreset& p = find_synth_preset(twin);
    synth(twin, t.sub(twin));
    HfCheckpoint ck(t.sub(twin));
    const ModelDesc& m = ck.desc();
    EXPECT_TRUE(m.tied_embeddings);
    EXPECT_EQ(m.hidden, p.hidden);
    EXPECT_EQ(m.n_layers, p.layers);
    EXPECT_EQ(m.intermediate, p.intermediate);
    EXPECT_EQ(ck.config().at("torch_dtype"), "bfloat16");
    if (std::string(twin) == "tiny-qwen3") {
      EXPECT_EQ(m.arch, Arch::Qwen3);
      EXPECT_EQ(m.hf_class, "Qwen3ForCausalLM");
      EXPECT_EQ(ck.config().at("model_type"), "qwen3");
      EXPECT_EQ(m.vocab, 151936);
      EXPECT_EQ(m.head_dim, 128);
      EXPECT_EQ(m.n_heads / m.n_kv_heads, 2);
      EXPECT_TRUE(m.qk_norm);
      EXPECT_EQ(m.rope.type, "default");
      EXPECT_EQ(m.rope.theta, 1e6);
      EXPECT_EQ(m.rope.rotary_dim, 128);
      EXPECT_EQ(m.rms_eps, 1e-6);
      EXPECT_EQ(m.bos_id, 151643);
      EXPECT_EQ(m.eos_ids, (std::vector<int>{151645, 151643}));
    } else if (std::string(twin) == "tiny-llama3.2") {
      EXPECT_EQ(m.arch, Arch::Llama);
      EXPECT_EQ(ck.config().at("model_type"), "llama");
      EXPECT_EQ(m.vocab, 128256);
      EXPECT_EQ(m.head_dim, 64);
      EXPECT_EQ(m.n_heads / m.n_kv_heads, 4);
      EXPECT_EQ(m.rope.type, "llama3");
      EXPECT_EQ(m.rope.theta, 500000.0);
      EXPECT_EQ(m.rope.factor, 32.0);
      EXPECT_EQ(m.rope.low_freq_factor, 1.0);
      EXPECT_EQ(m.rope.high_freq_factor, 4.0);
      EXPECT_EQ(m.rope.original_max_pos, 8192);
      EXPECT_EQ(m.rms_eps, 1e-5);
      EXPECT_EQ(m.bos_id, 128000);
      EXPECT_EQ(m.eos_ids, (std::vector<int>{128001, 128008, 128009}));
    } else {
      EXPECT_EQ(m.arch, Arch::Phi3);
      EXPECT_EQ(ck.config().at("model_type"), "phi3");
      EXPECT_FALSE(ck.config().contains("head_dim"));  // as the Hub file: hidden / heads
      EXPECT_EQ(m.vocab, 200064);
      EXPECT_EQ(m.head_dim, 128);
      EXPECT_TRUE(m.fused_qkv);
      EXPECT_TRUE(m.fused_gate_up);
      EXPECT_EQ(m.rope.type, "longrope");
      EXPECT_EQ(m.rope.rotary_dim, 96);
      ASSERT_EQ(m.rope.short_factor.size(), 48u);
      ASSERT_EQ(m.rope.long_factor.size(), 48u);
      EXPECT_EQ(m.rope.short_factor[17], 1.0);
      EXPECT_EQ(m.rope.long_factor[0], 1.0);
      EXPECT_EQ(m.rope.long_factor[1], 1.118320672);
      EXPECT_EQ(m.rope.long_factor[47], 47.77);
      EXPECT_EQ(m.rope.original_max_pos, 4096);
      EXPECT_NEAR(m.rope.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
      EXPECT_EQ(m.bos_id, 199999);
      EXPECT_EQ(m.eos_ids, (std::vector<int>{200020, 199999}));
    }
  }
}

TEST(Synth, ExactTensorNamesShapesAndDtype) {
  TempDir t("names");
  for (const char* twin : kTwins) {
    SCOPED_TRACE(twin);
    const SynthPreset& p = find_synth_preset(twin);
    synth(twin, t.sub(twin));
    HfCheckpoint ck(t.sub(twin));
    std::set<std::string> got;
    for (auto& [name, view] : ck.tensors()) {
      got.insert(name);
      EXPECT_EQ(view->dtype, StDType::BF16) << name;
    }
    EXPECT_EQ(got, expected_names(p.arch, p.layers));
    EXPECT_FALSE(ck.has("lm_head.weight"));  // tied
    const ModelDesc& m = ck.desc();
    const int64_t D = m.hidden, hd = m.head_dim, q = m.n_heads * hd, kv = m.n_kv_heads * hd;
    EXPECT_NO_THROW(ck.get("model.embed_tokens.weight", {m.vocab, D}));
    EXPECT_NO_THROW(ck.get("model.norm.weight", {D}));
    const std::string L = "model.layers." + std::to_string(m.n_layers - 1) + ".";
    EXPECT_NO_THROW(ck.get(L + "self_attn.o_proj.weight", {D, q}));
    EXPECT_NO_THROW(ck.get(L + "mlp.down_proj.weight", {D, m.intermediate}));
    if (m.fused_qkv) {
      EXPECT_NO_THROW(ck.get(L + "self_attn.qkv_proj.weight", {q + 2 * kv, D}));
      EXPECT_NO_THROW(ck.get(L + "mlp.gate_up_proj.weight", {2 * m.intermediate, D}));
    } else {
      EXPECT_NO_THROW(ck.get(L + "self_attn.q_proj.weight", {q, D}));
      EXPECT_NO_THROW(ck.get(L + "self_attn.k_proj.weight", {kv, D}));
      EXPECT_NO_THROW(ck.get(L + "self_attn.v_proj.weight", {kv, D}));
      EXPECT_NO_THROW(ck.get(L + "mlp.gate_proj.weight", {m.intermediate, D}));
      EXPECT_NO_THROW(ck.get(L + "mlp.up_proj.weight", {m.intermediate, D}));
    }
    if (m.qk_norm) {
      EXPECT_NO_THROW(ck.get(L + "self_attn.q_norm.weight", {hd}));
      EXPECT_NO_THROW(ck.get(L + "self_attn.k_norm.weight", {hd}));
    }
    // The safetensors metadata marks a PyTorch checkpoint, as save_pretrained does.
    SafetensorsFile st(t.sub(std::string(twin) + "/model.safetensors"));
    EXPECT_EQ(st.metadata().at("format"), "pt");
  }
}

TEST(Synth, ByteDeterminismBySha256) {
  TempDir t("det");
  for (const char* twin : kTwins) {
    SCOPED_TRACE(twin);
    synth(twin, t.sub(std::string(twin) + "_a"), 7, 1);
    synth(twin, t.sub(std::string(twin) + "_b"), 7, 3);  // another thread count
    synth(twin, t.sub(std::string(twin) + "_c"), 8, 0);
    for (const char* f : {"model.safetensors", "config.json", "generation_config.json"}) {
      const std::string a = sha256_file(t.sub(std::string(twin) + "_a/" + f));
      EXPECT_EQ(a, sha256_file(t.sub(std::string(twin) + "_b/" + f))) << f;
      const std::string c = sha256_file(t.sub(std::string(twin) + "_c/" + f));
      if (std::string(f) == "model.safetensors")
        EXPECT_NE(a, c) << "seed ignored";
      else
        EXPECT_EQ(a, c) << f << " must not depend on the seed";
    }
  }
}

// The bytes the committed transformers goldens were computed from (seed 0). Byte identity across
// machines is a requirement: if this changes on purpose, regenerate tests/goldens (docs/synth.md).
TEST(Synth, PinnedSeed0Hashes) {
  const std::map<std::string, std::string> pinned = {
      {"tiny-qwen3", "8a173c191769bc820addabe7cc0bc51083a578e51fe04adc88ddf850681fd43d"},
      {"tiny-llama3.2", "1c7195a6d657c27741f284d024b9530a6138e2f9d1dc0a27138782867d22edc5"},
      {"tiny-phi4mini", "e8d4abfad68ab60e5ddb70f971321c0fcd74e527e81aa6022a89b072936b2c08"},
  };
  TempDir t("pin");
  for (auto& [twin, hash] : pinned) {
    synth(twin, t.sub(twin));
    const std::string got = sha256_file(t.sub(twin + "/model.safetensors"));
    EXPECT_EQ(got, hash) << twin;
    // When the goldens are committed, they record the hash of the twin transformers read on the
    // GPU machine: another machine, the same bytes.
    const std::string golden = std::string(VKLLM_SOURCE_DIR) + "/tests/goldens/" + twin + ".json";
    if (fs::exists(golden)) {
      json g = read_json_file(golden);
      EXPECT_EQ(g.at("files_sha256").at("model.safetensors").get<std::string>(), got) << golden;
      EXPECT_EQ(g.at("files_sha256").at("config.json").get<std::string>(),
                sha256_file(t.sub(twin + "/config.json")))
          << golden;
    }
  }
}

TEST(Synth, StreamingWriterMatchesWriteSafetensors) {
  TempDir t("stream");
  synth("tiny-llama3.2", t.sub("a"));
  HfCheckpoint ck(t.sub("a"));
  std::vector<TensorToWrite> ts;
  for (auto& [name, v] : ck.tensors())  // sorted by name, as the safetensors library does
    ts.push_back({name, v->dtype, v->shape, std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  write_safetensors(t.sub("ref.safetensors"), ts, {{"format", "pt"}});
  EXPECT_EQ(sha256_file(t.sub("a/model.safetensors")), sha256_file(t.sub("ref.safetensors")));
}

TEST(Synth, ShardedRoundTrip) {
  TempDir t("shard");
  synth("tiny-qwen3", t.sub("one"));
  const uint64_t limit = 1'500'000;  // bytes: the embedding alone is larger and gets its own shard
  SynthResult r = synth("tiny-qwen3", t.sub("many"), 0, 0, limit);
  ASSERT_GT(r.shards, 3);
  json idx = read_json_file(t.sub("many/model.safetensors.index.json"));
  EXPECT_EQ(idx.at("metadata").at("total_size").get<uint64_t>(), r.weight_bytes);
  std::set<std::string> shard_files;
  for (auto& [name, f] : idx.at("weight_map").items()) shard_files.insert(f.get<std::string>());
  EXPECT_EQ(static_cast<int>(shard_files.size()), r.shards);
  for (auto& f : shard_files) {
    EXPECT_EQ(f.substr(f.size() - 21), fmt::format("-of-{:05d}.safetensors", r.shards));
    SafetensorsFile st(t.sub("many/" + f));
    uint64_t bytes = 0;
    for (auto& [n, v] : st.tensors()) bytes += v.nbytes;
    EXPECT_TRUE(bytes <= limit || st.tensors().size() == 1) << f << " holds " << bytes;
  }
  EXPECT_FALSE(fs::exists(t.sub("many/model.safetensors")));
  HfCheckpoint a(t.sub("one")), b(t.sub("many"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (auto& [name, va] : a.tensors()) {
    ASSERT_TRUE(b.has(name)) << name;
    const TensorView* vb = b.tensors().at(name);
    ASSERT_EQ(va->shape, vb->shape) << name;
    ASSERT_EQ(va->nbytes, vb->nbytes) << name;
    EXPECT_EQ(std::memcmp(va->data, vb->data, va->nbytes), 0) << name;
  }
}

// The scale rules of docs/synth.md, measured on the written bf16 values.
TEST(Synth, WeightStatistics) {
  TempDir t("stats");
  synth("tiny-llama3.2", t.sub("m"));
  HfCheckpoint ck(t.sub("m"));
  const double D = find_synth_preset("tiny-llama3.2").hidden, sigma_e = 6.0 / std::sqrt(D);
  auto emb = ck.tensors().at("model.embed_tokens.weight")->to_f32();
  EXPECT_NEAR(mean_of(emb), 0.0, 0.002);
  EXPECT_NEAR(std_of(emb), sigma_e, 0.005 * sigma_e);
  float mx = 0;
  for (float x : emb) mx = std::max(mx, std::fabs(x));
  EXPECT_LE(mx, 3.47 * sigma_e * 1.004);  // Irwin-Hall(4): bounded at sqrt(12) sigma
  EXPECT_GT(mx, 3.0 * sigma_e);
  auto q = ck.tensors().at("model.layers.0.self_attn.q_proj.weight")->to_f32();
  EXPECT_NEAR(std_of(q), 1.0 / std::sqrt(D), 0.02 / std::sqrt(D));
  auto o = ck.tensors().at("model.layers.1.self_attn.o_proj.weight")->to_f32();
  const double rho = 1.5 * std::sqrt(2 * D / 4);  // 4 layers
  const double o_sd = rho * sigma_e / std::sqrt(2048.0),
               d_sd = 1.5 * rho * sigma_e / std::sqrt(256.0);
  EXPECT_NEAR(std_of(o), o_sd, 0.02 * o_sd);
  auto dn = ck.tensors().at("model.layers.2.mlp.down_proj.weight")->to_f32();
  EXPECT_NEAR(std_of(dn), d_sd, 0.03 * d_sd);
  auto nw = ck.tensors().at("model.layers.3.input_layernorm.weight")->to_f32();
  for (float x : nw) {
    EXPECT_GE(x, 0.65f);
    EXPECT_LE(x, 1.35f);
  }
  EXPECT_NEAR(mean_of(nw), 1.0, 0.04);
  // Different tensors are not copies of each other.
  auto k = ck.tensors().at("model.layers.0.self_attn.k_proj.weight")->to_f32();
  EXPECT_NE(std::memcmp(q.data(), k.data(), k.size() * 4), 0);
}

TEST(Synth, TokenizerFiles) {
  TempDir t("tok");
  // A tokenizer folder given explicitly is copied byte for byte.
  fs::create_directories(t.sub("fx"));
  const std::string tj = R"({"version": "1.0", "model": {"type": "BPE"}})";
  const std::string tc = R"({"tokenizer_class": "PreTrainedTokenizerFast"})";
  std::ofstream(t.sub("fx/tokenizer.json")) << tj;
  std::ofstream(t.sub("fx/tokenizer_config.json")) << tc;
  SynthOptions o;
  o.preset = "tiny-phi4mini";
  o.out_dir = t.sub("m");
  o.tokenizer_dir = t.sub("fx");
  SynthResult r = synth_write(o);
  EXPECT_EQ(read_text_file(t.sub("m/tokenizer.json")), tj);
  EXPECT_EQ(read_text_file(t.sub("m/tokenizer_config.json")), tc);
  EXPECT_EQ(r.tokenizer_from, t.sub("fx"));
  // A folder without the files: a clear error naming it, nothing written.
  o.out_dir = t.sub("m2");
  o.tokenizer_dir = t.sub("nowhere");
  try {
    synth_write(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(t.sub("nowhere")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t.sub("m2")));
  // Default search: either the fixtures exist and are copied, or the error names the script.
  o.tokenizer_dir.clear();
  o.preset = "tiny-qwen3";
  o.out_dir = t.sub("m3");
  bool have = false;
  for (auto& c : synth_fixture_candidates("qwen3"))
    have |= fs::exists(c + "/tokenizer.json") && fs::exists(c + "/tokenizer_config.json");
  if (have) {
    EXPECT_NO_THROW(synth_write(o));
    EXPECT_TRUE(fs::exists(t.sub("m3/tokenizer.json")));
  } else {
    try {
      synth_write(o);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tools/fixtures/make_fixtures.sh"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("--no-tokenizer"), std::string::npos);
    }
  }
}

TEST(Synth, Cli) {
  TempDir t("cli");
  int rc = 0;
  std::string out = run_cli("synth --list --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  json j = json::parse(out);
  ASSERT_EQ(j.size(), 18u);
  EXPECT_EQ(j[9]["name"], "phi-4-mini");
  EXPECT_EQ(j[9]["bf16_bytes"].get<uint64_t>(), 3836021760ull * 2);
  out = run_cli("synth --list", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("llama-3.2-1b"), std::string::npos);
  out = run_cli("synth --preset tiny-bert -o " + t.sub("x"), &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("unknown synth preset 'tiny-bert'"), std::string::npos) << out;
  out = run_cli("synth --preset tiny-llama3.2 --no-tokenizer --json -o " + t.sub("m"), &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(json::parse(out).at("shards"), 1);
  // Rewriting an earlier output is fine; a folder with foreign files needs --force.
  out = run_cli("synth --preset tiny-llama3.2 --no-tokenizer -o " + t.sub("m"), &rc);
  EXPECT_EQ(rc, 0) << out;
  std::ofstream(t.sub("m/notes.txt")) << "mine";
  out = run_cli("synth --preset tiny-llama3.2 --no-tokenizer -o " + t.sub("m"), &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("notes.txt"), std::string::npos) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  // --force over an old single-file checkpoint with a sharded one: no stale model.safetensors.
  out = run_cli(
      "synth --preset tiny-llama3.2 --no-tokenizer --force --max-shard-size 4MB -o " + t.sub("m"),
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_FALSE(fs::exists(t.sub("m/model.safetensors")));
  EXPECT_TRUE(fs::exists(t.sub("m/notes.txt")));  // --force removes weight files only
  EXPECT_NO_THROW(HfCheckpoint(t.sub("m")));
  out = run_cli("synth --preset tiny-llama3.2 --no-tokenizer --max-shard-size 4XB -o " + t.sub("z"),
                &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("unknown unit"), std::string::npos) << out;
}

// The Llama-architecture twins: their classes' config keys, Llama's tensors (Mistral: its own
// lm_head), the plain forward with SmolLM3's layers without rotary embedding.
TEST(Synth, LlamaArchitectureTwins) {
  TempDir t("llamalike");
  {
    synth("tiny-mistral", t.sub("m"));
    HfCheckpoint ck(t.sub("m"));
    const ModelDesc& m = ck.desc();
    EXPECT_EQ(m.hf_class, "MistralForCausalLM");
    EXPECT_EQ(m.arch, Arch::Llama);
    EXPECT_EQ(ck.config().at("model_type"), "mistral");
    EXPECT_TRUE(ck.config().at("sliding_window").is_null());
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_EQ(m.vocab, 32000);
    EXPECT_EQ(m.head_dim, 128);
    EXPECT_EQ(m.eos_ids, (std::vector<int>{2}));
    std::set<std::string> want = expected_names("llama", m.n_layers), got;
    want.insert("lm_head.weight");
    for (auto& [name, view] : ck.tensors()) got.insert(name);
    EXPECT_EQ(got, want);
    // The untied head has the embedding's scale (logit std ~6 with unit-RMS hidden states).
    std::vector<float> head(32000u * 256u), emb(head.size());
    ck.get("lm_head.weight", {32000, 256})
        .read_f32(0, static_cast<int64_t>(head.size()), head.data());
    ck.get("model.embed_tokens.weight", {32000, 256})
        .read_f32(0, static_cast<int64_t>(emb.size()), emb.data());
    EXPECT_NEAR(std_of(head) / std_of(emb), 1.0, 0.01);
    EXPECT_NE(head, emb);
    EXPECT_LT(synth_param_count(find_synth_preset("tiny-mistral")) * 2, 40'000'000u);
  }
  {
    synth("tiny-smollm3", t.sub("s"));
    HfCheckpoint ck(t.sub("s"));
    const ModelDesc& m = ck.desc();
    EXPECT_EQ(m.hf_class, "SmolLM3ForCausalLM");
    EXPECT_EQ(ck.config().at("model_type"), "smollm3");
    EXPECT_TRUE(m.tied_embeddings);
    EXPECT_EQ(m.use_rope, (std::vector<int>{1, 1, 1, 0}));
    EXPECT_EQ(m.rope.theta, 5e6);
    EXPECT_EQ(m.head_dim, 128);
    EXPECT_EQ(m.eos_ids, (std::vector<int>{128012}));
    std::set<std::string> got;
    for (auto& [name, view] : ck.tensors()) got.insert(name);
    EXPECT_EQ(got, expected_names("llama", m.n_layers));
    EXPECT_LT(synth_param_count(find_synth_preset("tiny-smollm3")) * 2, 40'000'000u);
  }
}
