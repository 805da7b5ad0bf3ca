#include "ir/op_schema.h"

#include <cfloat>
#include <cmath>

namespace vkllm {

int64_t OpCheck::act(int32_t i) const {
  const TensorDecl& t = T(i);
  if (t.kind != TensorKind::Activation || (t.dtype != DType::F32 && t.dtype != DType::F16))
    bad("{} must be an f32/f16 activation", t.name);
  if (!defined_[i]) bad("reads {} before any op computes it", t.name);
  return t.shape[1];
}

void OpCheck::out_act(int32_t o, int64_t rows, int64_t width) const {
  const TensorDecl& t = T(o);
  if ((t.dtype != DType::F32 && t.dtype != DType::F16) || t.shape[0] != rows || t.shape[1] != width)
    bad("output {} must be an f32/f16 activation [{}, {}]", t.name, rows, width);
}

void OpCheck::weight(int32_t i, std::initializer_list<DType> dts,
                     const std::vector<int64_t>& shape) const {
  const TensorDecl& t = T(i);
  bool ok = false;
  for (DType d : dts) ok = ok || t.dtype == d;
  if (t.kind != TensorKind::Weight || !ok)
    bad("{} must be a weight of another dtype (has {})", t.name, dtype_name(t.dtype));
  if (t.shape != shape) bad("weight {} has the wrong shape", t.name);
}

const std::vector<int64_t>& OpCheck::shape2(int32_t i) const {
  if (T(i).kind != TensorKind::Weight || T(i).shape.size() != 2)
    bad("{} must be a 2-D weight", T(i).name);
  return T(i).shape;
}

int64_t OpCheck::iattr(const Op& o, const char* k, int64_t lo, int64_t hi) const {
  auto it = o.attrs.find(k);
  if (it == o.attrs.end() || !it->is_number_integer())
    bad("attribute {} is missing or not an integer", k);
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) bad("attribute {} = {} is out of range", k, v);
  return v;
}

double OpCheck::fattr(const Op& o, const char* k) const {
  auto it = o.attrs.find(k);
  if (it == o.attrs.end() || !it->is_number()) bad("attribute {} is missing or not a number", k);
  // Interpreters read it as a float: out of float range the conversion is undefined.
  const double v = it->get<double>();
  if (!(std::fabs(v) <= FLT_MAX)) bad("attribute {} = {} is not a finite float", k, v);
  return v;
}

void OpCheck::same_rows(int32_t a, int32_t b) const {
  if (rows(a) != rows(b)) bad("{} and {} have different row counts", T(a).name, T(b).name);
}

namespace {

constexpr int64_t kBig = int64_t(1) << 32;

void check_embedding(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  if (I[0] != c.program().input_ids) c.bad("the ids input must be the program's input_ids");
  const auto& s = c.shape2(I[1]);
  if (o.family == "embedding") {
    c.weight(I[1], {DType::F32, DType::F16}, s);
  } else {
    const int64_t G = c.iattr(o, "group", 1, s[1]);
    if (s[1] % G) c.bad("group {} does not divide the width {}", G, s[1]);
    c.weight(I[1], {DType::Q4}, s);
    c.weight(I[2], {DType::F32}, {s[0], s[1] / G});
  }
  c.out_act(o.outputs[0], -1, s[1]);
}

void check_rms_norm(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  const int64_t N = c.act(I[0]), G = c.iattr(o, "group", 1, N);
  if (N % G) c.bad("group {} does not divide the width {}", G, N);
  c.weight(I[1], {DType::F32}, {G});
  c.fattr(o, "eps");
  c.out_act(o.outputs[0], c.rows(I[0]), N);
}

void check_linear(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  const int64_t K = c.act(I[0]);
  const auto& s = c.shape2(I[1]);
  if (s[1] != K) c.bad("weight {} has {} columns, the input has {}", c.T(I[1]).name, s[1], K);
  if (o.family == "linear") {
    c.weight(I[1], {DType::F32, DType::F16}, s);
  } else {
    const int64_t G = c.iattr(o, "group", 1, K);
    if (K % G) c.bad("group {} does not divide the width {}", G, K);
    c.weight(I[1], {DType::Q4}, s);
    c.weight(I[2], {DType::F32}, {s[0], K / G});
    if (o.family == "linear_8da4w") c.weight(I[3], {DType::I32}, {s[0], K / G});
  }
  c.out_act(o.outputs[0], c.rows(I[0]), s[0]);
}

void check_rope(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  const int64_t W = c.act(I[0]);
  const int64_t H = c.iattr(o, "n_heads", 1, W), hd = c.iattr(o, "head_dim", 1, W);
  const int64_t R = c.iattr(o, "rotary_dim", 2, hd);
  if (H * hd != W || R % 2)
    c.bad("n_heads * head_dim must equal the width and rotary_dim must be even");
  c.fattr(o, "attention_factor");
  c.weight(I[1], {DType::F32}, {R / 2});
  if (I.size() == 3) {
    c.weight(I[2], {DType::F32}, {R / 2});
    c.iattr(o, "original_max_pos", 0, kBig);
  }
  c.out_act(o.outputs[0], c.rows(I[0]), W);
}

void check_attention(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  const int64_t qw = c.act(I[0]), kw = c.act(I[1]), vw = c.act(I[2]);
  const int64_t H = c.iattr(o, "n_heads", 1, qw), Hkv = c.iattr(o, "n_kv_heads", 1, H);
  const int64_t hd = c.iattr(o, "head_dim", 1, qw);
  c.fattr(o, "scale");
  if (o.attrs.contains("window")) c.iattr(o, "window", 1, kBig);
  if (H % Hkv || H * hd != qw || Hkv * hd != kw || vw != kw)
    c.bad("head counts do not match the q/k/v widths");
  c.same_rows(I[0], I[1]);
  c.same_rows(I[0], I[2]);
  for (int k : {3, 4})
    if (c.T(I[k]).kind != TensorKind::KVCache || c.T(I[k]).shape[1] != kw)
      c.bad("{} must be a KV cache of width {}", c.T(I[k]).name, kw);
  if (I[3] == I[4]) c.bad("the k and v caches must differ");
  c.out_act(o.outputs[0], c.rows(I[0]), qw);
}

void check_elementwise(const OpCheck& c, const Op& o) {  // swiglu, geglu, add
  const auto& I = o.inputs;
  const int64_t a = c.act(I[0]), b = c.act(I[1]);
  if (a != b) c.bad("inputs have different widths");
  c.same_rows(I[0], I[1]);
  c.out_act(o.outputs[0], c.rows(I[0]), a);
}

void check_bias_add(const OpCheck& c, const Op& o) {
  const auto& I = o.inputs;
  const int64_t N = c.act(I[0]);
  c.weight(I[1], {DType::F32}, {N});
  c.out_act(o.outputs[0], c.rows(I[0]), N);
}

void check_scale(const OpCheck& c, const Op& o) {
  c.fattr(o, "factor");
  c.out_act(o.outputs[0], c.rows(o.inputs[0]), c.act(o.inputs[0]));
}

void check_softcap(const OpCheck& c, const Op& o) {
  if (!(c.fattr(o, "cap") > 0)) c.bad("attribute cap must be positive");
  c.out_act(o.outputs[0], c.rows(o.inputs[0]), c.act(o.inputs[0]));
}

void check_last_row(const OpCheck& c, const Op& o) {
  c.out_act(o.outputs[0], 1, c.act(o.inputs[0]));
}

void check_argmax(const OpCheck& c, const Op& o) {
  c.act(o.inputs[0]);
  if (c.rows(o.inputs[0]) != 1) c.bad("the logits must have one row");
  const TensorDecl& t = c.T(o.outputs[0]);
  if (t.dtype != DType::I32 || t.shape[0] != 1 || t.shape.back() != 1)
    c.bad("output must be i32 [1, 1]");
}

// family, inputs (min, max), outputs, docs/ir.md's columns, the rule.
constexpr OpSchema kSchemas[] = {
    {"embedding", 2, 2, 1, "ids I32[T], table F32/F16 [V,D]", "y [T,D]", "",
     "`y[t] = table[ids[t]]` (ids out of range: error)", check_embedding},
    {"embedding_q4", 3, 3, 1, "ids, table Q4 [V,D], scales F32 [V, D/G]", "y [T,D]", "`group` G",
     "`y[t,j] = q[ids[t],j] * s[ids[t], j/G]`", check_embedding},
    {"rms_norm", 2, 2, 1, "x [T,N], w F32 [G]", "y [T,N]", "`eps`, `group` G (N % G == 0)",
     "each group of G consecutive elements: `y = x / sqrt(mean(x^2) + eps) * w` (G = N: a normal "
     "RMSNorm; G = head_dim: Qwen3's per-head q/k norm)",
     check_rms_norm},
    {"linear", 2, 2, 1, "x [T,K], W F32/F16 [N,K]", "y [T,N]", "", "`y = x W^T`", check_linear},
    {"linear_q4w", 3, 3, 1, "x [T,K], Wq Q4 [N,K], s F32 [N,K/G]", "y [T,N]", "`group`",
     "int4 weight-only: `y[t,n] = sum_k x[t,k] * Wq[n,k] * s[n,k/G]`", check_linear},
    {"linear_8da4w", 4, 4, 1, "x [T,K], Wq Q4 [N,K], s F32 [N,K/G], wsum I32 [N,K/G]", "y [T,N]",
     "`group`",
     "per row t: int8 asymmetric quantization of x[t] (scale sx, zero point zp, qx); `y[t,n] = "
     "sum_g s[n,g] * sx * (sum_{k in g} qx[k]*Wq[n,k] - zp * wsum[n,g])`",
     check_linear},
    {"rope", 2, 3, 1, "x [T, H*hd], inv_freq F32 [R/2], (inv_freq_long F32 [R/2])", "y [T, H*hd]",
     "`n_heads` H, `head_dim` hd, `rotary_dim` R, `attention_factor` a, `original_max_pos` (with "
     "the long table)",
     "rotate-half on the first R dims of each head at position p = pos+t: for i < R/2, `c = "
     "cos(p*f_i)*a`, `s = sin(p*f_i)*a`, `y_i = x_i c - x_{i+R/2} s`, `y_{i+R/2} = x_{i+R/2} c + "
     "x_i s`; dims >= R copied. The long table is used for the whole forward when `pos + T > "
     "original_max_pos`.",
     check_rope},
    {"attention", 5, 5, 1, "q [T, H*hd], k [T, Hkv*hd], v [T, Hkv*hd], kcache, vcache",
     "o [T, H*hd]", "`n_heads`, `n_kv_heads`, `head_dim`, `scale`, (`window` W)",
     "first writes k, v into cache rows pos..pos+T-1 (rounded to the cache dtype), then causal "
     "grouped-query attention: head h uses kv head `h / (H/Hkv)`, query t attends to cache rows "
     "0..pos+t (with `window`: max(0, pos+t-W+1)..pos+t, Gemma's sliding-window layers), "
     "softmax(scale * q.k) v",
     check_attention},
    {"swiglu", 2, 2, 1, "gate [T,F], up [T,F]", "y [T,F]", "", "`y = gate * sigmoid(gate) * up`",
     check_elementwise},
    {"geglu", 2, 2, 1, "gate [T,F], up [T,F]", "y [T,F]", "",
     "`y = gelu_tanh(gate) * up`, `gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` "
     "(Gemma)",
     check_elementwise},
    {"scale", 1, 1, 1, "x [T,N]", "y [T,N]", "`factor` s",
     "`y = x * s` (Gemma's embedding times sqrt(hidden))", check_scale},
    {"softcap", 1, 1, 1, "x [T,N]", "y [T,N]", "`cap` c",
     "`y = c * tanh(x / c)` (the logits' final_logit_softcapping, Gemma 2 style)", check_softcap},
    {"add", 2, 2, 1, "a [T,N], b [T,N]", "y [T,N]", "", "`y = a + b`", check_elementwise},
    {"bias_add", 2, 2, 1, "x [T,N], b F32 [N]", "y [T,N]", "",
     "`y[t] = x[t] + b` (Qwen2's q/k/v projection biases)", check_bias_add},
    {"last_row", 1, 1, 1, "x [T,N]", "y [1,N]", "", "`y = x[T-1]`", check_last_row},
    {"argmax", 1, 1, 1, "logits [1,V]", "id I32 [1]", "",
     "index of the maximum (lowest index on ties)", check_argmax},
};

}  // namespace

std::span<const OpSchema> op_schemas() {
  return kSchemas;
}

const OpSchema* find_op_schema(const std::string& family) {
  for (const OpSchema& s : kSchemas)
    if (family == s.family) return &s;
  return nullptr;
}

std::string op_schema_table() {
  std::string t = "| family | inputs | outputs | attrs | semantics |\n|---|---|---|---|---|\n";
  auto cell = [](const char* text) {
    return *text ? fmt::format(" {} |", text) : std::string(" |");
  };
  for (const OpSchema& s : kSchemas)
    t += fmt::format("| `{}` |{}{}{}{}\n", s.family, cell(s.inputs_doc), cell(s.outputs_doc),
                     cell(s.attrs_doc), cell(s.semantics_doc));
  return t;
}

}  // namespace vkllm
