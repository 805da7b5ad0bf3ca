#include "artifact/program_check.h"

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace vkllm {

namespace {

class Checker {
 public:
  explicit Checker(const Program& p) : p_(p), defined_(p.tensors.size(), false) {}

  void run() {
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      const TensorDecl& t = p_.tensors[i];
      if (t.kind != TensorKind::Activation) defined_[i] = true;
      if (t.kind == TensorKind::KVCache && (t.shape.size() != 2 || t.shape[0] != p_.max_ctx ||
                                            (t.dtype != DType::F32 && t.dtype != DType::F16)))
        fail("program: KV cache {} must be f32/f16 [max_ctx={}, width]", t.name, p_.max_ctx);
      if (t.kind == TensorKind::Activation &&
          (t.shape.size() != 2 || (t.shape[0] != -1 && t.shape[0] != 1)))
        fail("program: activation {} must have shape [T or 1, width]", t.name);
    }
    const TensorDecl& ids = p_.tensors[p_.input_ids];
    if (ids.shape != std::vector<int64_t>{-1}) fail("program: input_ids must have shape [T]");
    for (size_t k = 0; k < p_.ops.size(); ++k) {
      k_ = k;
      op(p_.ops[k]);
      for (auto o : p_.ops[k].outputs) {
        if (defined_[o]) bad("writes {} a second time", p_.tensors[o].name);
        defined_[o] = true;
      }
    }
    const TensorDecl& lg = p_.tensors[p_.logits];
    if (lg.kind != TensorKind::Activation || lg.dtype != DType::F32 || lg.shape[0] != 1 ||
        !defined_[p_.logits])
      fail("program: logits must be an f32 activation [1, vocab] computed by the program");
    bool argmax_ok = false;
    for (const Op& o : p_.ops)
      if (o.family == "argmax" && o.outputs[0] == p_.next_token && o.inputs[0] == p_.logits)
        argmax_ok = true;
    if (!argmax_ok) fail("program: next_token must be the argmax of the logits");
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    fail("program: op {} ({}): {}", k_, p_.ops[k_].family,
         fmt::format(f, std::forward<Args>(args)...));
  }
  const TensorDecl& T(int32_t i) const { return p_.tensors[i]; }
  bool is_float(DType d) const { return d == DType::F32 || d == DType::F16; }
  // A float activation that an earlier op computed; returns its width.
  int64_t act(int32_t i) const {
    const TensorDecl& t = T(i);
    if (t.kind != TensorKind::Activation || !is_float(t.dtype))
      bad("{} must be an f32/f16 activation", t.name);
    if (!defined_[i]) bad("reads {} before any op computes it", t.name);
    return t.shape[1];
  }
  void out_act(int32_t o, int64_t rows, int64_t width) const {
    const TensorDecl& t = T(o);
    if (!is_float(t.dtype) || t.shape[0] != rows || t.shape[1] != width)
      bad("output {} must be an f32/f16 activation [{}, {}]", t.name, rows, width);
  }
  void weight(int32_t i, std::initializer_list<DType> dts,
              const std::vector<int64_t>& shape) const {
    const TensorDecl& t = T(i);
    bool ok = false;
    for (DType d : dts) ok = ok || t.dtype == d;
    if (t.kind != TensorKind::Weight || !ok)
      bad("{} must be a weight of another dtype (has {})", t.name, dtype_name(t.dtype));
    if (t.shape != shape) bad("weight {} has the wrong shape", t.name);
  }
  const std::vector<int64_t>& shape2(int32_t i) const {
    if (T(i).kind != TensorKind::Weight || T(i).shape.size() != 2)
      bad("{} must be a 2-D weight", T(i).name);
    return T(i).shape;
  }
  int64_t iattr(const Op& o, const char* k, int64_t lo, int64_t hi) const {
    auto it = o.attrs.find(k);
    if (it == o.attrs.end() || !it->is_number_integer())
      bad("attribute {} is missing or not an integer", k);
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) bad("attribute {} = {} is out of range", k, v);
    return v;
  }
  double fattr(const Op& o, const char* k) const {
    auto it = o.attrs.find(k);
    if (it == o.attrs.end() || !it->is_number()) bad("attribute {} is missing or not a number", k);
    // Interpreters read it as a float: out of float range the conversion is undefined.
    const double v = it->get<double>();
    if (!(std::fabs(v) <= FLT_MAX)) bad("attribute {} = {} is not a finite float", k, v);
    return v;
  }
  int64_t rows(int32_t i) const { return T(i).shape[0]; }
  void same_rows(int32_t a, int32_t b) const {
    if (rows(a) != rows(b)) bad("{} and {} have different row counts", T(a).name, T(b).name);
  }

  void op(const Op& o) {
    const auto& I = o.inputs;
    const int32_t out = o.outputs[0];
    const std::string& f = o.family;
    const int64_t big = int64_t(1) << 32;
    if (f == "embedding" || f == "embedding_q4") {
      if (I[0] != p_.input_ids) bad("the ids input must be the program's input_ids");
      const auto& s = shape2(I[1]);
      if (f == "embedding") {
        weight(I[1], {DType::F32, DType::F16}, s);
      } else {
        const int64_t G = iattr(o, "group", 1, s[1]);
        if (s[1] % G) bad("group {} does not divide the width {}", G, s[1]);
        weight(I[1], {DType::Q4}, s);
        weight(I[2], {DType::F32}, {s[0], s[1] / G});
      }
      out_act(out, -1, s[1]);
    } else if (f == "rms_norm") {
      const int64_t N = act(I[0]), G = iattr(o, "group", 1, N);
      if (N % G) bad("group {} does not divide the width {}", G, N);
      weight(I[1], {DType::F32}, {G});
      fattr(o, "eps");
      out_act(out, rows(I[0]), N);
    } else if (f == "linear" || f == "linear_q4w" || f == "linear_8da4w") {
      const int64_t K = act(I[0]);
      const auto& s = shape2(I[1]);
      if (s[1] != K) bad("weight {} has {} columns, the input has {}", T(I[1]).name, s[1], K);
      if (f == "linear") {
        weight(I[1], {DType::F32, DType::F16}, s);
      } else {
        const int64_t G = iattr(o, "group", 1, K);
        if (K % G) bad("group {} does not divide the width {}", G, K);
        weight(I[1], {DType::Q4}, s);
        weight(I[2], {DType::F32}, {s[0], K / G});
        if (f == "linear_8da4w") weight(I[3], {DType::I32}, {s[0], K / G});
      }
      out_act(out, rows(I[0]), s[0]);
    } else if (f == "rope") {
      const int64_t W = act(I[0]);
      const int64_t H = iattr(o, "n_heads", 1, W), hd = iattr(o, "head_dim", 1, W);
      const int64_t R = iattr(o, "rotary_dim", 2, hd);
      if (H * hd != W || R % 2)
        bad("n_heads * head_dim must equal the width and rotary_dim must be even");
      fattr(o, "attention_factor");
      weight(I[1], {DType::F32}, {R / 2});
      if (I.size() == 3) {
        weight(I[2], {DType::F32}, {R / 2});
        iattr(o, "original_max_pos", 0, big);
      }
      out_act(out, rows(I[0]), W);
    } else if (f == "attention") {
      const int64_t qw = act(I[0]), kw = act(I[1]), vw = act(I[2]);
      const int64_t H = iattr(o, "n_heads", 1, qw), Hkv = iattr(o, "n_kv_heads", 1, H);
      const int64_t hd = iattr(o, "head_dim", 1, qw);
      fattr(o, "scale");
      if (H % Hkv || H * hd != qw || Hkv * hd != kw || vw != kw)
        bad("head counts do not match the q/k/v widths");
      same_rows(I[0], I[1]);
      same_rows(I[0], I[2]);
      for (int c : {3, 4})
        if (T(I[c]).kind != TensorKind::KVCache || T(I[c]).shape[1] != kw)
          bad("{} must be a KV cache of width {}", T(I[c]).name, kw);
      if (I[3] == I[4]) bad("the k and v caches must differ");
      out_act(out, rows(I[0]), qw);
    } else if (f == "swiglu" || f == "add") {
      const int64_t a = act(I[0]), b = act(I[1]);
      if (a != b) bad("inputs have different widths");
      same_rows(I[0], I[1]);
      out_act(out, rows(I[0]), a);
    } else if (f == "last_row") {
      out_act(out, 1, act(I[0]));
    } else if (f == "argmax") {
      act(I[0]);
      if (rows(I[0]) != 1) bad("the logits must have one row");
      const TensorDecl& t = T(out);
      if (t.dtype != DType::I32 || t.shape[0] != 1 || t.shape.back() != 1)
        bad("output must be i32 [1, 1]");
    } else {
      bad("unknown op family");
    }
  }

  const Program& p_;
  std::vector<bool> defined_;
  size_t k_ = 0;
};

}  // namespace

void check_program_semantics(const Program& p) {
  p.validate();
  Checker(p).run();
}

}  // namespace vkllm
