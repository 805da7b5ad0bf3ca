// Gemma 3 (Gemma3ForCausalLM, text): config parsing (layer_types / sliding_window_pattern, both
// rope shapes, linear rope scaling, the embedding scale in the checkpoint's dtype, refusals by
// key), the CPU reference's geglu and sliding-window attention against independent naive loops,
// and the tiny-gemma3 twin: its lowered forward (four norms a layer as 1 + w, the scaled
// embedding, windowed layers with their own rotary table) and its exported forward; the sliding
// layers' caches as rings (ir/kv_ring.h) on the CPU: the bits of full caches, and what a rewind
// may keep.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "artifact/reader.h"
#include "backend/cpu/cpu_hook.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/half.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "export/lower.h"
#include "export/recipe.h"
#include "hf/checkpoint.h"
#include "hf/synth.h"
#include "ir/kv_ring.h"
#include "runtime/reference.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using nlohmann::json;

// (A named namespace: the folder's tests build as one unity source.)
namespace gemma3_test {
namespace {

using testutil::nmse;

// google/gemma-3-1b-it's config.json key set (transformers 4.50).
json gemma_cfg() {
  return json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
}

ModelDesc parse(const json& c) {
  return parse_hf_config(c, json(), "config.json");
}

std::string refusal(const json& c) {
  try {
    parse(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Gemma3Config, HubConfigEveryDetail) {
  const ModelDesc m = parse(gemma_cfg());
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_TRUE(m.gemma_norms);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_DOUBLE_EQ(m.attn_scale, 1.0 / 16);
  // sqrt(1152) = 33.941..., as torch.tensor(...) (fp32) cast to bfloat16: 34.
  EXPECT_EQ(m.embed_scale, 34.0);
  ASSERT_EQ(m.layer_window.size(), 26u);
  for (int l = 0; l < 26; ++l) EXPECT_EQ(m.layer_win(l), (l + 1) % 6 == 0 ? 0 : 512) << l;
  EXPECT_EQ(m.sliding_window, 0);  // (Mistral's whole-model window stays off)
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(m.rope.type, "default");
  EXPECT_EQ(m.rope_local.theta, 1e4);
  EXPECT_EQ(m.rope_local.rotary_dim, 256);
  // The description round-trips through the artifact's JSON.
  const ModelDesc r = ModelDesc::from_json(m.to_json());
  EXPECT_EQ(r.to_json(), m.to_json());
  // fp32 checkpoint: the fp32 value.
  json c = gemma_cfg();
  c["torch_dtype"] = "float32";
  EXPECT_EQ(parse(c).embed_scale, static_cast<double>(std::sqrt(1152.0f)));
  // Every 6th global: the public parameter count of gemma-3-1b with its preset.
  EXPECT_EQ(synth_param_count(find_synth_preset("gemma-3-1b")), 999885952u);
  const ModelDesc p = parse(synth_config_json(find_synth_preset("gemma-3-1b")));
  EXPECT_EQ(p.layer_window, m.layer_window);
}

// transformers 5's shape: layer_types and rope_parameters keyed by layer type (Gemma 3 4B and
// larger: linear scaling, factor 8, on the global layers).
TEST(Gemma3Config, Transformers5RopeParametersAndLayerTypes) {
  json c = gemma_cfg();
  c.erase("rope_theta");
  c.erase("rope_local_base_freq");
  c.erase("rope_scaling");
  c.erase("sliding_window_pattern");
  c["num_hidden_layers"] = 4;
  c["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
  c["rope_parameters"] = json::parse(R"({
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})");
  const ModelDesc m = parse(c);
  EXPECT_EQ(m.layer_window, (std::vector<int>{512, 0, 0, 512}));
  EXPECT_EQ(m.rope.type, "linear");
  EXPECT_EQ(m.rope.factor, 8.0);
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(m.rope_local.theta, 1e4);
  // Linear scaling divides transformers' default frequencies by the factor (fp32).
  const std::vector<float> f = rope_inv_freq(m.rope);
  for (int i = 0; i < 128; i += 17) {
    const float base = std::pow(1e6f, static_cast<float>(2 * i) / 256.0f);
    EXPECT_EQ(f[static_cast<size_t>(i)], (1.0f / base) / 8.0f) << i;
  }
  // The classic shape's rope_scaling block gives the same global table.
  json k = gemma_cfg();
  k["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_EQ(rope_inv_freq(parse(k).rope), f);
  EXPECT_EQ(rope_inv_freq(parse(k).rope_local), rope_inv_freq(m.rope_local));
}

TEST(Gemma3Config, RefusesWhatItDoesNotImplementInOneLine) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"layer_types", {"sliding_attention", "chunked_attention"}}, {"num_hidden_layers", 2}},
       "config.json: 'layer_types' holds \"chunked_attention\": expected sliding_attention or "
       "full_attention"},
      {{{"layer_types", {"sliding_attention"}}},
       "config.json: key 'layer_types' must be a list of 26 (num_hidden_layers) layer types"},
      {{{"final_logit_softcapping", true}},
       "config.json: 'final_logit_softcapping' must be a number >= 0 or null (got true)"},
      {{{"attn_logit_softcapping", 50.0}},
       "config.json: 'attn_logit_softcapping' is not supported (the lowering does not implement "
       "it)"},
      {{{"hidden_activation", "gelu"}},
       "config.json: hidden_activation \"gelu\" is not supported (only gelu_pytorch_tanh)"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}}}},
       "config.json rope_scaling: rope type 'yarn' is not supported (default, linear, llama3, "
       "longrope)"},
      {{{"rope_scaling",
         {{"rope_type", "llama3"},
          {"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 8192}}}},
       "config.json: rope type 'llama3' is not supported for Gemma 3 (default, linear)"},
      {{{"use_bidirectional_attention", true}},
       "config.json: 'use_bidirectional_attention': true is not supported"},
      {{{"sliding_window", 0}}, "config.json: key 'sliding_window' = 0 is out of range"},
      {{{"no_rope_layer_interval", 4}},
       "config.json: 'no_rope_layer_interval' is not supported for Gemma3ForCausalLM"},
  };
  for (const auto& [patch, want] : cases) {
    json c = gemma_cfg();
    c.update(patch);
    const std::string got = refusal(c);
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
    EXPECT_EQ(got.substr(0, want.size()), want) << patch.dump();
  }
}

// PyTorch's gelu(approximate="tanh") in double, against the fp32 kernel.
TEST(Gemma3Kernels, GegluIsTanhGeluTimesUp) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-12, 12);
  std::vector<float> g(4096), u(g.size()), y(g.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = d(rng), u[i] = d(rng) / 4;
  g[0] = 0, g[1] = -40, g[2] = 40;  // saturated tanh
  cpu::geglu(g.data(), u.data(), static_cast<int64_t>(g.size()), y.data());
  const double pi = 3.14159265358979323846;
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double want =
        0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x))) * double(u[i]);
    ASSERT_NEAR(y[i], want, 1e-5 * (1 + std::fabs(want))) << "x=" << x;
  }
  std::vector<float> s(3);
  cpu::scale(g.data(), 3, 8.0f, s.data());
  EXPECT_EQ(s, (std::vector<float>{0, -320, 320}));
}

// The sliding-window mask: query position p sees keys p-W+1..p. Against a naive double-precision
// attention that builds its own key list per query; one-shot prefill, chunked prefill crossing the
// window edge, and decode steps, at positions below, at and past the window.
TEST(Gemma3Kernels, SlidingWindowAttentionAgainstNaive) {
  const int H = 4, Hkv = 2, hd = 16, W = 5, N = 17;
  const float scale = 0.3f;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> q(static_cast<size_t>(N * H * hd)), k(static_cast<size_t>(N * Hkv * hd)),
      v(k.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = d(rng);
  // naive[p, h, i]
  std::vector<double> naive(q.size());
  for (int p = 0; p < N; ++p)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / Hkv);
      std::vector<int> keys;
      for (int j = 0; j <= p; ++j)
        if (p - j < W) keys.push_back(j);
      EXPECT_EQ(keys.size(), static_cast<size_t>(std::min(p + 1, W)));
      std::vector<double> s;
      double mx = -1e300;
      for (int j : keys) {
        double dot = 0;
        for (int i = 0; i < hd; ++i)
          dot += double(q[(p * H + h) * hd + i]) * k[(j * Hkv + kvh) * hd + i];
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (size_t a = 0; a < keys.size(); ++a)
          o += s[a] / sum * v[(keys[a] * Hkv + kvh) * hd + i];
        naive[static_cast<size_t>((p * H + h) * hd + i)] = o;
      }
    }
  // Chunkings of the N positions: all at once, a chunk ending below the window then one crossing
  // it, one token at a time.
  const std::vector<std::vector<int>> chunkings = {{N}, {3, 4, 10}, std::vector<int>(N, 1)};
  for (const auto& chunks : chunkings) {
    std::vector<float> kc(k.size()), vc(v.size()), o(q.size());
    int pos = 0;
    for (int T : chunks) {
      cpu::attention(q.data() + pos * H * hd, k.data() + pos * Hkv * hd, v.data() + pos * Hkv * hd,
                     T, pos, kc.data(), vc.data(), false, H, Hkv, hd, scale,
                     o.data() + pos * H * hd, W);
      pos += T;
    }
    ASSERT_EQ(pos, N);
    for (size_t i = 0; i < o.size(); ++i)
      ASSERT_NEAR(o[i], naive[i], 1e-5) << "chunks " << chunks.size() << " element " << i;
  }
  // Below the window the output is full causal attention's; past it, it differs.
  std::vector<float> kc(k.size()), vc(v.size()), full(q.size()), win(q.size());
  cpu::attention(q.data(), k.data(), v.data(), N, 0, kc.data(), vc.data(), false, H, Hkv, hd, scale,
                 full.data());
  cpu::attention(q.data(), k.data(), v.data(), N, 0, kc.data(), vc.data(), false, H, Hkv, hd, scale,
                 win.data(), W);
  const size_t row = H * hd;
  EXPECT_TRUE(std::equal(full.begin(), full.begin() + W * row, win.begin()));
  EXPECT_FALSE(
      std::equal(full.begin() + W * row, full.begin() + (W + 1) * row, win.begin() + W * row));
}

namespace {

const std::string& twin_dir() {
  return testutil::tokenless_twin("tiny-gemma3");
}

// 11 tokens: past the twin's window of 8.
const std::vector<int32_t> kPrompt = {5, 17, 299, 0, 42, 262143, 7, 100, 3, 2, 11};

std::vector<float> forward_logits(Executor& e, int vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  e.forward(kPrompt.data(), static_cast<int>(kPrompt.size()), 0, logits.data());
  return logits;
}

}  // namespace

// The lowered forward: its ops read the checkpoint as transformers' Gemma3 does.
TEST(Gemma3Twin, LoweredForwardReadsTheCheckpointAsGemma) {
  HfCheckpoint ck(twin_dir());
  const ModelDesc& m = ck.desc();
  EXPECT_EQ(m.hf_class, "Gemma3ForCausalLM");
  EXPECT_EQ(m.layer_window, (std::vector<int>{8, 0, 8, 0}));
  EXPECT_EQ(m.embed_scale, 8.0);
  auto ref = load_reference_model(ck, 64);
  const Program& p = ref->lowered.program;
  int norms = 0, windows = 0, scales = 0, geglus = 0;
  for (const Op& op : p.ops) {
    if (op.family == "rms_norm") {
      // Every norm weight is 1 + w of its checkpoint tensor, summed in fp32.
      const TensorDecl& t = p.tensors[op.inputs[1]];
      const int64_t n = t.shape[0];
      std::vector<float> w(static_cast<size_t>(n));
      ck.get(t.name, {n}).read_f32(0, n, w.data());
      const auto& bytes = ref->weights.data[op.inputs[1]];
      ASSERT_EQ(bytes.size(), static_cast<size_t>(n) * 4);
      std::vector<float> got(static_cast<size_t>(n));
      std::memcpy(got.data(), bytes.data(), bytes.size());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 1.0f + w[i]) << t.name;
      ++norms;
    }
    if (op.family == "attention") {
      const std::string& name = p.tensors[op.outputs[0]].name;
      const int layer = std::stoi(name.substr(1));
      EXPECT_DOUBLE_EQ(op.attrs.at("scale").get<double>(), 1.0 / 16);
      EXPECT_EQ(op.attrs.contains("window"), layer % 2 == 0) << name;
      if (op.attrs.contains("window")) {
        EXPECT_EQ(op.attrs.at("window"), 8);
        ++windows;
      }
    }
    if (op.family == "rope") {
      const int layer = std::stoi(p.tensors[op.outputs[0]].name.substr(1));
      EXPECT_EQ(p.tensors[op.inputs[1]].name,
                layer % 2 == 0 ? "rope.inv_freq_local" : "rope.inv_freq");
    }
    if (op.family == "scale") {
      EXPECT_EQ(op.attrs.at("factor"), 8.0);
      ++scales;
    }
    geglus += op.family == "geglu";
    EXPECT_NE(op.family, "swiglu");
  }
  EXPECT_EQ(norms, 6 * 4 + 1);  // input, q, k, post-attention, pre- and post-feed-forward; final
  EXPECT_EQ(windows, 2);
  EXPECT_EQ(scales, 1);
  EXPECT_EQ(geglus, 4);
  EXPECT_EQ(p.ops[1].family, "scale");  // right after the embedding; the tied head reads the table
  // A context within the window: no window attributes (nothing to cut), the local tables kept.
  const LoweredModel small = lower_model(m, 8);
  int local = 0;
  for (const Op& op : small.program.ops) {
    EXPECT_FALSE(op.attrs.contains("window")) << op.family;
    local +=
        op.family == "rope" && small.program.tensors[op.inputs[1]].name == "rope.inv_freq_local";
  }
  EXPECT_EQ(local, 4);  // q and k of layers 0 and 2
  EXPECT_EQ(lower_model(m, 9).program.ops.size(), p.ops.size());
  // The window changes the logits once the prompt is past it (a lowering that ignored it, or
  // the local rotary table, would not).
  const int vocab = m.vocab;
  const std::vector<float> with = forward_logits(*ref->make_executor(), vocab);
  for (Op& op : ref->lowered.program.ops) op.attrs.erase("window");
  const double e = nmse(with, forward_logits(*ref->make_executor(), vocab));
  std::printf("[gemma3] logits NMSE with vs without the window: %.3g\n", e);
  EXPECT_GT(e, 1e-3);
}

// The artifact's CPU forward against the reference (the checkpoint's own lowering in fp32):
// exactly it for the fp32 recipe, close to it for fp16, int4 weights and the int4 embedding with
// 8da4w linears. (Every recipe, CPU against Vulkan on the same artifact: test_vulkan's
// VulkanTwins tiny-gemma3 rows.)
TEST(Gemma3Twin, ExportedForwardIsTheReferences) {
  HfCheckpoint ck(twin_dir());
  const int vocab = ck.desc().vocab;
  auto ref = load_reference_model(ck, 64);
  const std::vector<float> want = forward_logits(*ref->make_executor(), vocab);
  for (const std::string recipe :
       {"non-quantized", "fp16", "quantized-int4-weight-only", "quantized-8da4w-fp16-embedding"}) {
    SCOPED_TRACE(recipe);
    RecipeOptions o;
    o.recipe = recipe;
    o.max_context = 64;
    o.group_size = 32;
    const std::string path = twin_dir() + "-" + recipe + ".vkllm";
    export_checkpoint(twin_dir(), path, o);
    {
      ArtifactReader r(path);
      EXPECT_EQ(r.desc().layer_window, ck.desc().layer_window);
      const std::vector<float> got = forward_logits(*make_cpu_executor(r.program(), r), vocab);
      const double e = nmse(want, got);
      std::printf("[gemma3] %s artifact: logits NMSE %.3g to the reference\n", recipe.c_str(), e);
      if (recipe == "non-quantized")
        EXPECT_EQ(got, want);
      else
        EXPECT_LT(e, recipe_traits(recipe).quantized() ? 0.2 : 1e-3);
    }
    std::filesystem::remove(path);
  }
}

// The CPU reference over the sliding layers' caches as rings of window + 4 = 12 rows (forwards
// in chunks of at most 5 tokens) gives the bits of full caches: a 23-token prompt in one forward
// (five chunks, the ring wrapped), decode steps to position 40, a 9-token forward at 41; every
// forward's logits and token equal. Then what a rewind may keep (RingState): a forward at d reads
// keys back to d - 7, which the ring still holds only while no position d - 7 + 12 or later was
// written; continuing from a kept prefix gives the full caches' bits again.
TEST(Gemma3Twin, CpuRingCachesGiveTheBitsOfFullCaches) {
  HfCheckpoint ck(twin_dir());
  const int vocab = ck.desc().vocab;
  auto ref = load_reference_model(ck, 64);
  const Program& full = ref->lowered.program;
  const Program ring = with_ring_caches(full, 4);
  uint64_t full_bytes = 0, ring_bytes = 0;
  for (size_t i = 0; i < full.tensors.size(); ++i)
    if (full.tensors[i].kind == TensorKind::KVCache) {
      full_bytes += dtype_nbytes(full.tensors[i].dtype, full.tensors[i].shape);
      ring_bytes += dtype_nbytes(ring.tensors[i].dtype, ring.tensors[i].shape);
      const bool sliding = full.tensors[i].name[1] == '0' || full.tensors[i].name[1] == '2';
      EXPECT_EQ(ring.tensors[i].shape[0], sliding ? 12 : 64) << full.tensors[i].name;
    }
  EXPECT_EQ(full_bytes, 4u * 2 * 64 * 256 * 4);
  EXPECT_EQ(ring_bytes, 2u * 2 * (64 + 12) * 256 * 4);
  EXPECT_EQ(ring_forward_tokens(ring), 5);
  EXPECT_EQ(ring_forward_tokens(full), 64);
  const Program plain = with_ring_caches(full);  // window 8 + 512 rows: none shorter than 64
  for (size_t i = 0; i < full.tensors.size(); ++i)
    EXPECT_EQ(plain.tensors[i].shape, full.tensors[i].shape) << full.tensors[i].name;

  auto a = make_cpu_executor(full, ref->weights), b = make_cpu_executor(ring, ref->weights);
  std::vector<float> la(static_cast<size_t>(vocab)), lb(la.size());
  std::vector<int32_t> prompt(23);
  for (int i = 0; i < 23; ++i) prompt[static_cast<size_t>(i)] = (i * 7919 + 13) % vocab;
  int32_t ta = a->forward(prompt.data(), 23, 0, la.data());
  int32_t tb = b->forward(prompt.data(), 23, 0, lb.data());
  ASSERT_EQ(ta, tb);
  ASSERT_EQ(la, lb) << "the prompt's logits";
  for (int pos = 23; pos < 41; ++pos) {
    ta = a->forward(&ta, 1, pos, la.data());
    tb = b->forward(&tb, 1, pos, lb.data());
    ASSERT_EQ(ta, tb) << pos;
    ASSERT_EQ(la, lb) << pos;
  }
  std::vector<int32_t> more = {ta, 1, 2, 3, 4, 5, 6, 7, 8};
  ta = a->forward(more.data(), 9, 41, la.data());
  tb = b->forward(more.data(), 9, 41, lb.data());
  ASSERT_EQ(ta, tb);
  ASSERT_EQ(la, lb) << "the forward at 41";
  // Written: positions 0..49. A forward at d keeps the ring's keys d - 7..d - 1 while
  // max(0, d - 7) >= 50 - 12: d >= 45.
  EXPECT_EQ(b->kept_positions(50), 50);
  EXPECT_EQ(b->kept_positions(45), 45);
  EXPECT_EQ(b->kept_positions(44), 0);
  EXPECT_EQ(b->kept_positions(10), 0);
  EXPECT_EQ(a->kept_positions(10), 10);  // full caches keep every prefix
  // Continuing from the kept prefix 45 (a different token there) gives the full caches' bits.
  ta = a->forward(&prompt[3], 1, 45, la.data());
  tb = b->forward(&prompt[3], 1, 45, lb.data());
  ASSERT_EQ(ta, tb);
  ASSERT_EQ(la, lb) << "after the rewind to 45";
  // A fresh start at 0 keeps what it writes.
  b->forward(prompt.data(), 5, 0, lb.data());
  EXPECT_EQ(b->kept_positions(5), 5);
  EXPECT_EQ(b->kept_positions(3), 3);
}

}  // namespace gemma3_test
