#include "selftest/toy_model.h"

#include <array>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/half.h"

namespace vkllm::toy {

using TK = TensorKind;

std::vector<float> rand_vec(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0f);
  }
  return v;
}

std::vector<uint8_t> bytes_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return bytes_of(h);
}

const char* toy_recipe(const ToyConfig& cfg) {
  const bool f16 = cfg.act == DType::F16 || cfg.lin == Lin::F16;
  return cfg.lin == Lin::A8W4  ? (f16 ? "quantized-8da4w-fp16" : "quantized-8da4w")
         : cfg.lin == Lin::Q4W ? "quantized-int4-weight-only"
         : f16                 ? "fp16"
                               : "non-quantized";
}

Toy build_toy(const ToyConfig& cfg, unsigned seed) {
  const int64_t D = cfg.width;
  constexpr int64_t V = kVocab, H = kHeads, Hkv = kKvHeads, G = kGroup;
  const int64_t HD = cfg.head_dim;
  Toy toy;
  Program& p = toy.p;
  p.max_ctx = cfg.max_ctx;
  std::mt19937 rng(seed);
  auto weight = [&](const std::string& name, DType dt, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes) {
    TensorDecl t{"w." + name, dt, TK::Weight, shape, 0, dtype_nbytes(dt, shape)};
    const int32_t i = p.add_tensor(t);
    toy.w.data[i] = std::move(bytes);
    return i;
  };
  auto fweight = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    size_t n = 1;
    for (auto s : shape) n *= static_cast<size_t>(s);
    return weight(name, DType::F32, shape, bytes_f32(rand_vec(rng, n, lo, hi)));
  };
  auto act = [&](const std::string& name, int64_t width, DType dt) {
    return p.add_tensor({name, dt, TK::Activation, {-1, width}, 0, 0});
  };
  auto op = [&](const std::string& f, std::vector<int32_t> in, int32_t out,
                nlohmann::json attrs = nlohmann::json::object()) {
    p.ops.push_back(Op{f, std::move(in), {out}, std::move(attrs), BackendKind::Vulkan});
    return out;
  };
  auto q4_pack = [&](int64_t N, int64_t K, float scale, const std::string& name) {
    std::uniform_int_distribution<int> d(0, 15);
    std::vector<uint8_t> q(static_cast<size_t>(N * K / 2));
    for (auto& b : q) b = static_cast<uint8_t>(d(rng) | (d(rng) << 4));
    auto s = rand_vec(rng, static_cast<size_t>(N * K / G), 0.5f * scale, 1.5f * scale);
    std::vector<int32_t> ws(static_cast<size_t>(N * K / G), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ws[n * (K / G) + k / G] += cpu::q4_get(q.data(), K, n, k);
    int32_t tq = weight(name + ".q", DType::Q4, {N, K}, q);
    int32_t ts = weight(name + ".s", DType::F32, {N, K / G}, bytes_f32(s));
    int32_t tw = weight(name + ".wsum", DType::I32, {N, K / G}, bytes_of(ws));
    return std::array<int32_t, 3>{tq, ts, tw};
  };
  auto linear = [&](int32_t x, int64_t N, int64_t K, int32_t out, const std::string& name,
                    float gain = 1.0f) {
    const float a = gain / std::sqrt(static_cast<float>(K));
    if (cfg.lin == Lin::F32 || cfg.lin == Lin::F16) {
      auto wv = rand_vec(rng, static_cast<size_t>(N * K), -1.7f * a, 1.7f * a);
      int32_t tw = cfg.lin == Lin::F16 ? weight(name, DType::F16, {N, K}, bytes_f16(wv))
                                       : weight(name, DType::F32, {N, K}, bytes_f32(wv));
      return op("linear", {x, tw}, out);
    }
    auto q = q4_pack(N, K, a / 4.0f, name);
    if (cfg.lin == Lin::Q4W) return op("linear_q4w", {x, q[0], q[1]}, out, {{"group", G}});
    return op("linear_8da4w", {x, q[0], q[1], q[2]}, out, {{"group", G}});
  };
  const DType A = cfg.act;
  p.input_ids = p.add_tensor({"ids", DType::I32, TK::Input, {-1}, 0, 0});
  int32_t x = act("x.embed", D, A);
  if (cfg.emb == Emb::Q4) {
    auto q = q4_pack(V, D, 0.15f, "embed");
    op("embedding_q4", {p.input_ids, q[0], q[1]}, x, {{"group", G}});
  } else {
    auto e = rand_vec(rng, static_cast<size_t>(V * D));
    int32_t te = cfg.emb == Emb::F16 ? weight("embed", DType::F16, {V, D}, bytes_f16(e))
                                     : weight("embed", DType::F32, {V, D}, bytes_f32(e));
    op("embedding", {p.input_ids, te}, x);
  }
  const int R = cfg.partial_long_rope ? 12 : static_cast<int>(HD);
  std::vector<float> fs(static_cast<size_t>(R / 2)), fl(fs.size());
  for (int i = 0; i < R / 2; ++i) {
    fs[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(R));
    fl[i] = fs[i] * 0.25f;
  }
  int32_t inv = weight("rope.inv_freq", DType::F32, {R / 2}, bytes_f32(fs));
  nlohmann::json rope_attrs = {
      {"head_dim", HD}, {"rotary_dim", R}, {"attention_factor", cfg.partial_long_rope ? 1.1 : 1.0}};
  std::vector<int32_t> rope_tabs = {inv};
  if (cfg.partial_long_rope) {
    rope_tabs.push_back(weight("rope.inv_freq_long", DType::F32, {R / 2}, bytes_f32(fl)));
    rope_attrs["original_max_pos"] = 12;
  }
  for (int l = 0; l < 2; ++l) {
    const std::string lp = "l" + std::to_string(l) + ".";
    int32_t h = op("rms_norm", {x, fweight(lp + "attn_norm", {D}, 0.8f, 1.2f)},
                   act(lp + "attn_norm", D, A), {{"eps", 1e-5}, {"group", D}});
    int32_t q = linear(h, H * HD, D, act(lp + "q", H * HD, A), lp + "wq", 2.0f);
    int32_t k = linear(h, Hkv * HD, D, act(lp + "k", Hkv * HD, A), lp + "wk", 2.0f);
    int32_t v = linear(h, Hkv * HD, D, act(lp + "v", Hkv * HD, A), lp + "wv");
    // Qwen2's projection biases, after the three linears as lower.cpp puts them.
    if (cfg.qkv_bias) {
      q = op("bias_add", {q, fweight(lp + "bq", {H * HD}, -0.5f, 0.5f)},
             act(lp + "q_b", H * HD, A));
      k = op("bias_add", {k, fweight(lp + "bk", {Hkv * HD}, -0.5f, 0.5f)},
             act(lp + "k_b", Hkv * HD, A));
      v = op("bias_add", {v, fweight(lp + "bv", {Hkv * HD}, -0.5f, 0.5f)},
             act(lp + "v_b", Hkv * HD, A));
    }
    if (cfg.qk_norm) {
      q = op("rms_norm", {q, fweight(lp + "q_norm", {HD}, 0.8f, 1.2f)},
             act(lp + "q_normed", H * HD, A), {{"eps", 1e-6}, {"group", HD}});
      k = op("rms_norm", {k, fweight(lp + "k_norm", {HD}, 0.8f, 1.2f)},
             act(lp + "k_normed", Hkv * HD, A), {{"eps", 1e-6}, {"group", HD}});
    }
    auto ra = rope_attrs;
    ra["n_heads"] = H;
    std::vector<int32_t> rin = {q};
    rin.insert(rin.end(), rope_tabs.begin(), rope_tabs.end());
    q = op("rope", rin, act(lp + "q_rot", H * HD, A), ra);
    ra["n_heads"] = Hkv;
    rin[0] = k;
    k = op("rope", rin, act(lp + "k_rot", Hkv * HD, A), ra);
    int32_t kc =
        p.add_tensor({lp + "k_cache", cfg.cache, TK::KVCache, {p.max_ctx, Hkv * HD}, 0, 0});
    int32_t vc =
        p.add_tensor({lp + "v_cache", cfg.cache, TK::KVCache, {p.max_ctx, Hkv * HD}, 0, 0});
    nlohmann::json attn_attrs = {{"n_heads", H},
                                 {"n_kv_heads", Hkv},
                                 {"head_dim", HD},
                                 {"scale", 1.0 / std::sqrt(double(HD))}};
    if (cfg.window > 0 && l == 0) attn_attrs["window"] = cfg.window;
    int32_t a = op("attention", {q, k, v, kc, vc}, act(lp + "attn", H * HD, A), attn_attrs);
    int32_t o = linear(a, D, H * HD, act(lp + "attn_out", D, A), lp + "wo");
    if (cfg.gemma)
      o = op("rms_norm", {o, fweight(lp + "post_attn_norm", {D}, 0.8f, 1.2f)},
             act(lp + "attn_out_norm", D, A), {{"eps", 1e-6}, {"group", D}});
    x = op("add", {x, o}, act(lp + "x.attn", D, A));
    h = op("rms_norm", {x, fweight(lp + "ffn_norm", {D}, 0.8f, 1.2f)}, act(lp + "ffn_norm", D, A),
           {{"eps", 1e-5}, {"group", D}});
    const int64_t F = cfg.ffn;
    int32_t g = linear(h, F, D, act(lp + "gate", F, A), lp + "wg");
    int32_t u = linear(h, F, D, act(lp + "up", F, A), lp + "wu");
    int32_t s = op(cfg.gemma ? "geglu" : "swiglu", {g, u}, act(lp + "glu", F, A));
    int32_t dn = linear(s, D, F, act(lp + "ffn_out", D, A), lp + "wd");
    if (cfg.gemma)
      dn = op("rms_norm", {dn, fweight(lp + "post_ffn_norm", {D}, 0.8f, 1.2f)},
              act(lp + "ffn_out_norm", D, A), {{"eps", 1e-6}, {"group", D}});
    x = op("add", {x, dn}, act(lp + "x.ffn", D, A));
  }
  int32_t last = op("last_row", {x}, p.add_tensor({"x.last", A, TK::Activation, {1, D}, 0, 0}));
  int32_t n =
      op("rms_norm", {last, fweight("final_norm", {D}, 0.8f, 1.2f)},
         p.add_tensor({"x.final", A, TK::Activation, {1, D}, 0, 0}), {{"eps", 1e-5}, {"group", D}});
  p.logits = linear(n, V, D, p.add_tensor({"logits", DType::F32, TK::Activation, {1, V}, 0, 0}),
                    "lm_head", 4.0f);
  p.next_token =
      op("argmax", {p.logits}, p.add_tensor({"next", DType::I32, TK::Activation, {1, 1}, 0, 0}));
  p.validate();
  return toy;
}

}  // namespace vkllm::toy
