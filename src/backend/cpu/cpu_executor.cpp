// The CPU reference interpreter: walks the program op by op with the scalar kernels.
// Activations live in fp32 vectors; tensors declared F16 are rounded through fp16 on store so
// that the CPU mirrors the GPU's fp16 storage exactly.
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_hook.h"
#include "backend/cpu/kernels.h"
#include "backend/executor.h"
#include "core/error.h"
#include "core/half.h"

namespace vkllm {

namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const Program& p, const WeightSource& w, CpuOpHook hook = {})
      : p_(p), w_(w), buf_(p.tensors.size()), hook_(std::move(hook)) {
    p_.validate();
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const TensorDecl& t = p.tensors[i];
      if (t.kind == TensorKind::KVCache) {
        if (t.dtype != DType::F32 && t.dtype != DType::F16)
          fail("program: KV cache {} must be f32 or f16", t.name);
        buf_[i].assign(static_cast<size_t>(t.shape[0] * t.shape[1]), 0.0f);
      }
      if (t.kind == TensorKind::Weight) {
        auto bytes = w_.weight(p_, static_cast<int32_t>(i));
        if (bytes.size() != t.nbytes)
          fail("weight {}: {} bytes, expected {}", t.name, bytes.size(), t.nbytes);
      }
    }
  }

  const char* name() const override { return "cpu"; }

  int32_t forward(const int32_t* ids, int T, int pos, float* logits_out) override {
    if (T < 1) fail("forward needs at least one token");
    if (pos < 0 || pos + T > p_.max_ctx)
      fail("context overflow: positions {}..{} exceed the context length {}", pos, pos + T - 1,
           p_.max_ctx);
    T_ = T;
    pos_ = pos;
    ids_.assign(ids, ids + T);
    for (k_ = 0; k_ < p_.ops.size(); ++k_) run(p_.ops[k_]);
    const auto& lg = buf_[p_.logits];
    if (logits_out) std::memcpy(logits_out, lg.data(), lg.size() * sizeof(float));
    return next_;
  }

 private:
  int64_t rows(int32_t t) const { return p_.tensors[t].shape[0] < 0 ? T_ : p_.tensors[t].shape[0]; }
  int64_t width(int32_t t) const { return p_.tensors[t].shape.back(); }
  const TensorDecl& decl(int32_t t) const { return p_.tensors[t]; }
  template <typename T>
  const T* wptr(int32_t t) const {
    return reinterpret_cast<const T*>(w_.weight(p_, t).data());
  }
  const float* in(int32_t t) const {
    if (decl(t).kind == TensorKind::Weight) return wptr<float>(t);
    return buf_[t].data();
  }
  float* out(int32_t t) {
    buf_[t].resize(static_cast<size_t>(rows(t) * width(t)));
    return buf_[t].data();
  }
  int64_t attr_i(const Op& op, const char* k) const { return op.attrs.at(k).get<int64_t>(); }
  float attr_f(const Op& op, const char* k) const { return op.attrs.at(k).get<float>(); }
  void need(bool ok, const Op& op, const char* what) const {
    if (!ok) fail("program: op {} {}", op.family, what);
  }

  // The test-only hook (cpu_hook.h), after the op wrote its output and before F16 rounding.
  void after_op(const Op& op) {
    if (!hook_) return;
    CpuOpState st{p_, w_, k_, T_, pos_, buf_, ids_.data()};
    hook_(st);
    if (op.family == "argmax") {
      const float t = buf_[op.outputs[0]].at(0);
      if (!(t >= 0 && t < static_cast<float>(width(op.inputs[0]))))
        fail("cpu hook: argmax set to {}, outside the logits", t);
      next_ = static_cast<int32_t>(t);
    }
  }

  void run(const Op& op) {
    const auto& I = op.inputs;
    const int32_t o = op.outputs[0];
    const std::string& f = op.family;
    if (f == "embedding" || f == "embedding_q4") {
      const TensorDecl& tab = decl(I[1]);
      const int64_t V = tab.shape[0], D = tab.shape[1];
      need(width(o) == D, op, "output width mismatch");
      if (f == "embedding_q4") {
        const int64_t G = attr_i(op, "group");
        need(G > 0 && D % G == 0 && decl(I[2]).shape == std::vector<int64_t>{V, D / G}, op,
             "bad q4 scales");
        cpu::embedding_q4(ids_.data(), T_, wptr<uint8_t>(I[1]), wptr<float>(I[2]), V, D, G, out(o));
      } else if (tab.dtype == DType::F16) {
        cpu::embedding_f16(ids_.data(), T_, wptr<uint16_t>(I[1]), V, D, out(o));
      } else {
        cpu::embedding_f32(ids_.data(), T_, wptr<float>(I[1]), V, D, out(o));
      }
    } else if (f == "rms_norm") {
      const int64_t N = width(I[0]), G = attr_i(op, "group");
      need(G > 0 && N % G == 0 && decl(I[1]).shape == std::vector<int64_t>{G}, op, "bad group");
      cpu::rms_norm(in(I[0]), static_cast<int>(rows(I[0])), N, in(I[1]), G, attr_f(op, "eps"),
                    out(o));
    } else if (f == "linear" || f == "linear_q4w" || f == "linear_8da4w") {
      const TensorDecl& W = decl(I[1]);
      const int64_t K = width(I[0]), N = W.shape[0];
      const int T = static_cast<int>(rows(I[0]));
      need(W.shape.size() == 2 && W.shape[1] == K && width(o) == N, op, "shape mismatch");
      if (f == "linear") {
        if (W.dtype == DType::F16)
          cpu::linear_f16(in(I[0]), T, K, wptr<uint16_t>(I[1]), N, out(o));
        else
          cpu::linear_f32(in(I[0]), T, K, wptr<float>(I[1]), N, out(o));
      } else {
        const int64_t G = attr_i(op, "group");
        need(G > 0 && K % G == 0 && decl(I[2]).shape == std::vector<int64_t>{N, K / G}, op,
             "bad scales");
        if (f == "linear_q4w") {
          cpu::linear_q4w(in(I[0]), T, K, wptr<uint8_t>(I[1]), wptr<float>(I[2]), N, G, out(o));
        } else {
          need(decl(I[3]).shape == std::vector<int64_t>{N, K / G}, op, "bad weight sums");
          cpu::linear_8da4w(in(I[0]), T, K, wptr<uint8_t>(I[1]), wptr<float>(I[2]),
                            wptr<int32_t>(I[3]), N, G, out(o));
        }
      }
    } else if (f == "rope") {
      const int H = static_cast<int>(attr_i(op, "n_heads")),
                hd = static_cast<int>(attr_i(op, "head_dim"));
      const int R = static_cast<int>(attr_i(op, "rotary_dim"));
      need(int64_t(H) * hd == width(I[0]) && R <= hd && R % 2 == 0 && decl(I[1]).shape[0] == R / 2,
           op, "bad shape");
      int32_t table = I[1];
      if (I.size() == 3 && pos_ + T_ > attr_i(op, "original_max_pos")) table = I[2];
      cpu::rope(in(I[0]), T_, H, hd, R, in(table), pos_, attr_f(op, "attention_factor"), out(o));
    } else if (f == "attention") {
      const int H = static_cast<int>(attr_i(op, "n_heads")),
                Hkv = static_cast<int>(attr_i(op, "n_kv_heads"));
      const int hd = static_cast<int>(attr_i(op, "head_dim"));
      need(Hkv > 0 && H % Hkv == 0 && width(I[0]) == int64_t(H) * hd &&
               width(I[1]) == int64_t(Hkv) * hd && width(I[3]) == int64_t(Hkv) * hd,
           op, "bad shape");
      cpu::attention(in(I[0]), in(I[1]), in(I[2]), T_, pos_, buf_[I[3]].data(), buf_[I[4]].data(),
                     decl(I[3]).dtype == DType::F16, H, Hkv, hd, attr_f(op, "scale"), out(o));
    } else if (f == "swiglu") {
      cpu::swiglu(in(I[0]), in(I[1]), rows(I[0]) * width(I[0]), out(o));
    } else if (f == "add") {
      cpu::add(in(I[0]), in(I[1]), rows(I[0]) * width(I[0]), out(o));
    } else if (f == "last_row") {
      const int64_t N = width(I[0]);
      const float* src = in(I[0]) + (rows(I[0]) - 1) * N;
      std::memcpy(out(o), src, static_cast<size_t>(N) * sizeof(float));
    } else if (f == "argmax") {
      next_ = cpu::argmax(in(I[0]), width(I[0]));
      out(o)[0] = static_cast<float>(next_);
      after_op(op);
      return;
    } else {
      fail("cpu backend: op family '{}' is not implemented", f);
    }
    after_op(op);
    if (decl(o).dtype == DType::F16)
      for (float& v : buf_[o]) v = round_f16(v);
  }

  const Program& p_;
  const WeightSource& w_;
  std::vector<std::vector<float>> buf_;
  std::vector<int32_t> ids_;
  int T_ = 0, pos_ = 0;
  size_t k_ = 0;
  int32_t next_ = 0;
  CpuOpHook hook_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const Program& program, const WeightSource& weights) {
  return std::make_unique<CpuExecutor>(program, weights);
}

std::unique_ptr<Executor> make_cpu_executor_with_hook(const Program& program,
                                                      const WeightSource& weights, CpuOpHook hook) {
  return std::make_unique<CpuExecutor>(program, weights, std::move(hook));
}

}  // namespace vkllm
