// The forward pass of every family, written once as program construction. Family differences are
// fields of ModelDesc: Qwen3's per-head q/k norm, Phi-3's fused projections (split here into row
// ranges of the checkpoint tensor), partial rotary / longrope tables, SmolLM3's layers without
// rotary embedding, Qwen2's q/k/v projection biases, Gemma 3's norms as x * (1 + w) (four a
// layer), GeGLU, scaled embedding, query_pre_attn_scalar and sliding-window layers with their own
// rotary base.
#include "export/lower.h"

#include <cmath>

#include "core/error.h"
#include "hf/checkpoint.h"

namespace vkllm {

namespace {

class Builder {
 public:
  explicit Builder(LoweredModel& m) : m_(m) {}

  int32_t weight(const std::string& name, std::vector<int64_t> shape, WeightOrigin origin) {
    TensorDecl t{name, DType::F32, TensorKind::Weight, shape, 0, dtype_nbytes(DType::F32, shape)};
    int32_t i = m_.program.add_tensor(t);
    m_.origin.resize(m_.program.tensors.size());
    m_.origin[i] = std::move(origin);
    return i;
  }
  // A checkpoint tensor used whole.
  int32_t hf(const std::string& name, std::vector<int64_t> shape) {
    return weight(name, shape, WeightOrigin{name, 0, -1, shape, {}});
  }
  // A norm weight: Gemma's x * (1 + w) as an ordinary RMSNorm with the stored weight 1 + w (the
  // fp32 sum transformers computes, so exact).
  int32_t norm(const std::string& name, int64_t n, bool add_one) {
    return weight(name, {n}, WeightOrigin{name, 0, -1, {n}, {}, add_one ? 1.0f : 0.0f});
  }
  // Rows [begin, begin+count) of a fused checkpoint tensor of shape full.
  int32_t hf_rows(const std::string& name, const std::string& hf_name, std::vector<int64_t> full,
                  int64_t begin, int64_t count) {
    return weight(name, {count, full[1]}, WeightOrigin{hf_name, begin, count, full, {}});
  }
  int32_t act(const std::string& name, int64_t width, int64_t rows = -1) {
    return m_.program.add_tensor({name, DType::F32, TensorKind::Activation, {rows, width}, 0, 0});
  }
  int32_t op(const std::string& family, std::vector<int32_t> in, int32_t out,
             nlohmann::json attrs = nlohmann::json::object()) {
    m_.program.ops.push_back(
        Op{family, std::move(in), {out}, std::move(attrs), BackendKind::Vulkan});
    return out;
  }

 private:
  LoweredModel& m_;
};

}  // namespace

LoweredModel lower_model(const ModelDesc& d, int max_ctx) {
  if (max_ctx < 1) fail("context length must be positive");
  // Sliding-window attention is exact full attention while the context fits in the window.
  if (d.sliding_window > 0 && max_ctx > d.sliding_window)
    fail(
        "config.json 'sliding_window' = {} is smaller than the context {}: sliding-window "
        "attention is not implemented (use a context of at most {} tokens)",
        d.sliding_window, max_ctx, d.sliding_window);
  LoweredModel m;
  m.desc = d;
  Program& p = m.program;
  p.max_ctx = max_ctx;
  Builder b(m);
  const int64_t D = d.hidden, hd = d.head_dim, qw = int64_t(d.n_heads) * hd,
                kvw = int64_t(d.n_kv_heads) * hd;
  const int64_t F = d.intermediate, V = d.vocab;
  const double eps = d.rms_eps;

  p.input_ids = p.add_tensor({"ids", DType::I32, TensorKind::Input, {-1}, 0, 0});
  m.origin.resize(p.tensors.size());
  const int32_t embed = b.hf("model.embed_tokens.weight", {V, D});
  const int32_t inv_freq =
      b.weight("rope.inv_freq", {d.rope.rotary_dim / 2}, WeightOrigin{"", 0, -1, {}, {}});
  auto sf = rope_inv_freq(d.rope);
  m.origin[inv_freq].values.assign(sf.begin(), sf.end());
  std::vector<int32_t> rope_in = {-1, inv_freq};
  nlohmann::json rope_attrs = {{"head_dim", hd},
                               {"rotary_dim", d.rope.rotary_dim},
                               {"attention_factor", d.rope.attention_factor}};
  // Gemma 3's sliding-window layers rotate with their own base (rope_local).
  int32_t inv_local = -1;
  if (!d.layer_window.empty()) {
    inv_local = b.weight("rope.inv_freq_local", {d.rope.rotary_dim / 2}, WeightOrigin{});
    auto lf = rope_inv_freq(d.rope_local);
    m.origin[inv_local].values.assign(lf.begin(), lf.end());
  }
  if (d.rope.type == "longrope") {
    const int32_t inv_long =
        b.weight("rope.inv_freq_long", {d.rope.rotary_dim / 2}, WeightOrigin{});
    auto lf = rope_inv_freq(d.rope, true);
    m.origin[inv_long].values.assign(lf.begin(), lf.end());
    rope_in.push_back(inv_long);
    rope_attrs["original_max_pos"] = d.rope.original_max_pos;
  }
  auto rope_op = [&](int32_t x, int32_t out, int heads, bool local) {
    auto in = rope_in;
    in[0] = x;
    if (local) in[1] = inv_local;
    auto attrs = rope_attrs;
    attrs["n_heads"] = heads;
    return b.op("rope", in, out, attrs);
  };

  const bool gm = d.gemma_norms;
  int32_t x = b.op("embedding", {p.input_ids, embed}, b.act("x.embed", D));
  if (d.embed_scale != 0)  // Gemma: a separate op, as the table is shared with the tied head
    x = b.op("scale", {x}, b.act("x.embed_scaled", D), {{"factor", d.embed_scale}});
  for (int l = 0; l < d.n_layers; ++l) {
    // fmt rather than "literal" + std::string: g++ 12 -O2 warns falsely (-Wrestrict) on the latter.
    const std::string hfp = fmt::format("model.layers.{}.", l);
    const std::string lp = fmt::format("l{}.", l);
    // Attention block.
    // A window at least the context long never cuts a key off: such layers are plain attention
    // (which the Vulkan backend fuses), still with their own rotary table.
    const int win = d.layer_win(l) < max_ctx ? d.layer_win(l) : 0;
    const bool local = d.layer_win(l) > 0;
    int32_t h = b.op("rms_norm", {x, b.norm(hfp + "input_layernorm.weight", D, gm)},
                     b.act(lp + "attn_norm", D), {{"eps", eps}, {"group", D}});
    int32_t wq, wk, wv;
    if (d.fused_qkv) {
      const std::string n = hfp + "self_attn.qkv_proj.weight";
      std::vector<int64_t> full = {qw + 2 * kvw, D};
      wq = b.hf_rows(hfp + "self_attn.q_proj.weight", n, full, 0, qw);
      wk = b.hf_rows(hfp + "self_attn.k_proj.weight", n, full, qw, kvw);
      wv = b.hf_rows(hfp + "self_attn.v_proj.weight", n, full, qw + kvw, kvw);
    } else {
      wq = b.hf(hfp + "self_attn.q_proj.weight", {qw, D});
      wk = b.hf(hfp + "self_attn.k_proj.weight", {kvw, D});
      wv = b.hf(hfp + "self_attn.v_proj.weight", {kvw, D});
    }
    int32_t q = b.op("linear", {h, wq}, b.act(lp + "q", qw));
    int32_t k = b.op("linear", {h, wk}, b.act(lp + "k", kvw));
    int32_t v = b.op("linear", {h, wv}, b.act(lp + "v", kvw));
    if (d.qkv_bias) {  // Qwen2: after the three projections, which stay one run of linears
      q = b.op("bias_add", {q, b.hf(hfp + "self_attn.q_proj.bias", {qw})},
               b.act(lp + "q_bias", qw));
      k = b.op("bias_add", {k, b.hf(hfp + "self_attn.k_proj.bias", {kvw})},
               b.act(lp + "k_bias", kvw));
      v = b.op("bias_add", {v, b.hf(hfp + "self_attn.v_proj.bias", {kvw})},
               b.act(lp + "v_bias", kvw));
    }
    if (d.qk_norm) {
      q = b.op("rms_norm", {q, b.norm(hfp + "self_attn.q_norm.weight", hd, gm)},
               b.act(lp + "q_normed", qw), {{"eps", eps}, {"group", hd}});
      k = b.op("rms_norm", {k, b.norm(hfp + "self_attn.k_norm.weight", hd, gm)},
               b.act(lp + "k_normed", kvw), {{"eps", eps}, {"group", hd}});
    }
    if (d.layer_has_rope(l)) {  // SmolLM3 leaves some layers without rotary embedding
      q = rope_op(q, b.act(lp + "q_rot", qw), d.n_heads, local);
      k = rope_op(k, b.act(lp + "k_rot", kvw), d.n_kv_heads, local);
    }
    const int32_t kc =
        p.add_tensor({lp + "k_cache", DType::F32, TensorKind::KVCache, {max_ctx, kvw}, 0, 0});
    const int32_t vc =
        p.add_tensor({lp + "v_cache", DType::F32, TensorKind::KVCache, {max_ctx, kvw}, 0, 0});
    m.origin.resize(p.tensors.size());
    nlohmann::json attn_attrs = {
        {"n_heads", d.n_heads},
        {"n_kv_heads", d.n_kv_heads},
        {"head_dim", hd},
        {"scale", d.attn_scale > 0 ? d.attn_scale : 1.0 / std::sqrt(static_cast<double>(hd))}};
    if (win > 0) attn_attrs["window"] = win;  // Gemma's sliding-window layers
    int32_t a = b.op("attention", {q, k, v, kc, vc}, b.act(lp + "attn", qw), attn_attrs);
    int32_t o = b.op("linear", {a, b.hf(hfp + "self_attn.o_proj.weight", {D, qw})},
                     b.act(lp + "attn_out", D));
    if (gm)  // Gemma: the attention output normed before the residual add
      o = b.op("rms_norm", {o, b.norm(hfp + "post_attention_layernorm.weight", D, true)},
               b.act(lp + "attn_out_norm", D), {{"eps", eps}, {"group", D}});
    x = b.op("add", {x, o}, b.act(lp + "x.attn", D));
    // MLP block (SwiGLU; Gemma: GeGLU between pre_ and post_feedforward_layernorm).
    h = b.op("rms_norm",
             {x, b.norm(hfp + (gm ? "pre_feedforward_layernorm.weight"
                                  : "post_attention_layernorm.weight"),
                        D, gm)},
             b.act(lp + "ffn_norm", D), {{"eps", eps}, {"group", D}});
    int32_t wg, wu;
    if (d.fused_gate_up) {
      const std::string n = hfp + "mlp.gate_up_proj.weight";
      wg = b.hf_rows(hfp + "mlp.gate_proj.weight", n, {2 * F, D}, 0, F);
      wu = b.hf_rows(hfp + "mlp.up_proj.weight", n, {2 * F, D}, F, F);
    } else {
      wg = b.hf(hfp + "mlp.gate_proj.weight", {F, D});
      wu = b.hf(hfp + "mlp.up_proj.weight", {F, D});
    }
    int32_t g = b.op("linear", {h, wg}, b.act(lp + "gate", F));
    int32_t u = b.op("linear", {h, wu}, b.act(lp + "up", F));
    int32_t s = b.op(gm ? "geglu" : "swiglu", {g, u}, b.act(lp + (gm ? "geglu" : "swiglu"), F));
    int32_t dn =
        b.op("linear", {s, b.hf(hfp + "mlp.down_proj.weight", {D, F})}, b.act(lp + "ffn_out", D));
    if (gm)
      dn = b.op("rms_norm", {dn, b.norm(hfp + "post_feedforward_layernorm.weight", D, true)},
                b.act(lp + "ffn_out_norm", D), {{"eps", eps}, {"group", D}});
    x = b.op("add", {x, dn}, b.act(lp + "x.ffn", D));
  }
  int32_t last = b.op("last_row", {x}, b.act("x.last", D, 1));
  int32_t n = b.op("rms_norm", {last, b.norm("model.norm.weight", D, gm)},
                   b.act("x.final_norm", D, 1), {{"eps", eps}, {"group", D}});
  const int32_t head = d.tied_embeddings ? embed : b.hf("lm_head.weight", {V, D});
  p.logits = b.op("linear", {n, head}, b.act(d.final_softcap > 0 ? "logits.raw" : "logits", V, 1));
  if (d.final_softcap > 0)  // final_logit_softcapping
    p.logits = b.op("softcap", {p.logits}, b.act("logits", V, 1), {{"cap", d.final_softcap}});
  p.next_token = p.add_tensor({"next_token", DType::I32, TensorKind::Activation, {1, 1}, 0, 0});
  m.origin.resize(p.tensors.size());
  b.op("argmax", {p.logits}, p.next_token);
  p.validate();
  return m;
}

std::vector<float> read_weight_f32(const HfCheckpoint& ckpt, const LoweredModel& m,
                                   int32_t tensor) {
  const WeightOrigin& o = m.origin.at(static_cast<size_t>(tensor));
  if (o.hf_name.empty()) return o.values;
  const TensorView& v = ckpt.get(o.hf_name, o.hf_shape);
  const int64_t row = o.hf_shape.size() > 1 ? o.hf_shape[1] : 1;
  const int64_t rows = o.row_count < 0 ? v.numel() / row : o.row_count;
  std::vector<float> out(static_cast<size_t>(rows * row));
  v.read_f32(o.row_begin * row, rows * row, out.data());
  if (o.add != 0)
    for (float& x : out) x += o.add;
  return out;
}

}  // namespace vkllm
