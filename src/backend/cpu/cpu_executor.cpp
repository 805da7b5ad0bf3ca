// The CPU reference interpreter: walks the program op by op with the scalar kernels.
// Activations live in fp32 vectors; tensors declared F16 are rounded through fp16 on store so
// that the CPU mirrors the GPU's fp16 storage exactly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_hook.h"
#include "backend/cpu/kernels.h"
#include "backend/executor.h"
#include "core/error.h"
#include "core/half.h"
#include "ir/kv_ring.h"

namespace vkllm {

namespace {

// The interpreter over rows: row t is token ids[t] at position pos[t] of sequence seq[t], its KV
// row found through the block table (docs/ir.md "Batched forward"); the rows in out_rows go on
// past last_row. A single-sequence forward is the batch of one sequence whose caches are each
// its own declared rows, position p at row p % rows (a sliding-window layer's ring, or the whole
// context: docs/ir.md "KV caches").
class CpuInterpreter {
 public:
  // pool_rows: rows of every KVCache tensor in a block pool (batched forwards); 0: a single
  // sequence's caches of their declared rows. window_rows > 0: the rows of the window group's
  // caches, in a pool of their own (batch_cache_groups).
  CpuInterpreter(const Program& p, const WeightSource& w, int64_t pool_rows, CpuOpHook hook = {},
                 int64_t window_rows = 0)
      : p_(p), w_(w), buf_(p.tensors.size()), hook_(std::move(hook)), pool_rows_(pool_rows) {
    p_.validate();
    if (window_rows > 0) group_ = batch_cache_groups(p, 1);
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const TensorDecl& t = p.tensors[i];
      if (t.kind == TensorKind::KVCache) {
        if (t.dtype != DType::F32 && t.dtype != DType::F16)
          fail("program: KV cache {} must be f32 or f16", t.name);
        if (t.shape.size() != 2) fail("program: KV cache {} must be [rows, width]", t.name);
        const int64_t rows = pool_rows == 0                            ? t.shape[0]
                             : in_window_pool(static_cast<int32_t>(i)) ? window_rows
                                                                       : pool_rows;
        buf_[i].assign(static_cast<size_t>(rows * t.shape[1]), 0.0f);
      }
      if (t.kind == TensorKind::Weight) {
        auto bytes = w_.weight(p_, static_cast<int32_t>(i));
        if (bytes.size() != t.nbytes)
          fail("weight {}: {} bytes, expected {}", t.name, bytes.size(), t.nbytes);
      }
    }
  }

  // Runs the program over b's rows (checked by the caller); writes next_tokens and logits.
  void run_rows(const BatchForward& b, int block_tokens) {
    T_ = b.T;
    pos_ = b.pos[0];
    ids_.assign(b.ids, b.ids + b.T);
    kv_ = cpu::KvRows{b.pos, b.seq, b.block_table, b.table_stride, block_tokens, 0};
    kv_window_ = kv_;
    if (b.window_table) kv_window_.table = b.window_table;
    out_rows_.assign(b.out_rows, b.out_rows + b.n_out);
    // The long rope table applies to a sequence whose last row in this forward lies past the
    // original context (as a single forward's pos + T does).
    seq_last_.assign(static_cast<size_t>(b.n_seqs), 0);
    for (int t = 0; t < b.T; ++t)
      seq_last_[static_cast<size_t>(b.seq[t])] =
          std::max(seq_last_[static_cast<size_t>(b.seq[t])], b.pos[t]);
    for (k_ = 0; k_ < p_.ops.size(); ++k_) run(p_.ops[k_]);
    const auto& lg = buf_[p_.logits];
    const size_t V = static_cast<size_t>(width(p_.logits));
    for (int i = 0; i < b.n_out; ++i) {
      b.next_tokens[i] = next_[static_cast<size_t>(i)];
      if (b.logits)
        std::memcpy(b.logits + static_cast<size_t>(i) * V, lg.data() + static_cast<size_t>(i) * V,
                    V * sizeof(float));
    }
  }
  // Output row i's logits of the last run (empty before any).
  std::span<const float> logits_row(int i) const {
    const auto& lg = buf_[p_.logits];
    const size_t V = static_cast<size_t>(width(p_.logits));
    if (lg.size() < (static_cast<size_t>(i) + 1) * V) return {};
    return {lg.data() + static_cast<size_t>(i) * V, V};
  }

 private:
  // Activations past last_row hold one row per output row.
  int64_t rows(int32_t t) const {
    const int64_t r = p_.tensors[t].shape[0];
    if (r < 0) return T_;
    return p_.tensors[t].kind == TensorKind::Activation && r == 1
               ? static_cast<int64_t>(out_rows_.size())
               : r;
  }
  int64_t width(int32_t t) const { return p_.tensors[t].shape.back(); }
  bool in_window_pool(int32_t t) const { return !group_.empty() && group_[t] == 1; }
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
      for (size_t i = 0; i < next_.size(); ++i) {
        const float t = buf_[op.outputs[0]].at(i);
        if (!(t >= 0 && t < static_cast<float>(width(op.inputs[0]))))
          fail("cpu hook: argmax set to {}, outside the logits", t);
        next_[i] = static_cast<int32_t>(t);
      }
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
      const int64_t W = width(I[0]);
      float* y = out(o);
      for (int t = 0; t < T_; ++t) {
        int32_t table = I[1];
        if (I.size() == 3 &&
            seq_last_[static_cast<size_t>(kv_.seq[t])] + 1 > attr_i(op, "original_max_pos"))
          table = I[2];
        cpu::rope_rows(in(I[0]) + t * W, 1, H, hd, R, in(table), kv_.pos + t,
                       attr_f(op, "attention_factor"), y + t * W);
      }
    } else if (f == "attention") {
      const int H = static_cast<int>(attr_i(op, "n_heads")),
                Hkv = static_cast<int>(attr_i(op, "n_kv_heads"));
      const int hd = static_cast<int>(attr_i(op, "head_dim"));
      need(Hkv > 0 && H % Hkv == 0 && width(I[0]) == int64_t(H) * hd &&
               width(I[1]) == int64_t(Hkv) * hd && width(I[3]) == int64_t(Hkv) * hd,
           op, "bad shape");
      // A single sequence's caches: position p at row p % rows (checked by the executor:
      // ring_forward_tokens); a pool's: through the block table.
      cpu::KvRows kv = in_window_pool(I[3]) ? kv_window_ : kv_;
      if (pool_rows_ == 0) kv.ring = attention_cache_rows(p_, op);
      cpu::attention_rows(in(I[0]), in(I[1]), in(I[2]), T_, kv, buf_[I[3]].data(),
                          buf_[I[4]].data(), decl(I[3]).dtype == DType::F16, H, Hkv, hd,
                          attr_f(op, "scale"), out(o), static_cast<int>(attention_window(op)));
    } else if (f == "swiglu") {
      cpu::swiglu(in(I[0]), in(I[1]), rows(I[0]) * width(I[0]), out(o));
    } else if (f == "geglu") {
      cpu::geglu(in(I[0]), in(I[1]), rows(I[0]) * width(I[0]), out(o));
    } else if (f == "scale") {
      need(width(o) == width(I[0]), op, "shape mismatch");
      cpu::scale(in(I[0]), rows(I[0]) * width(I[0]), attr_f(op, "factor"), out(o));
    } else if (f == "softcap") {  // transformers: logits / cap, tanh, times cap
      need(width(o) == width(I[0]), op, "shape mismatch");
      const float cap = attr_f(op, "cap");
      const float* x = in(I[0]);
      float* y = out(o);
      for (int64_t i = 0; i < rows(I[0]) * width(I[0]); ++i) y[i] = std::tanh(x[i] / cap) * cap;
    } else if (f == "add") {
      cpu::add(in(I[0]), in(I[1]), rows(I[0]) * width(I[0]), out(o));
    } else if (f == "bias_add") {
      const int64_t N = width(I[0]);
      need(decl(I[1]).shape == std::vector<int64_t>{N} && decl(I[1]).dtype == DType::F32 &&
               width(o) == N,
           op, "bad bias");
      cpu::bias_add(in(I[0]), static_cast<int>(rows(I[0])), N, in(I[1]), out(o));
    } else if (f == "last_row") {
      const int64_t N = width(I[0]);
      float* y = out(o);
      for (size_t i = 0; i < out_rows_.size(); ++i)
        std::memcpy(y + static_cast<int64_t>(i) * N, in(I[0]) + out_rows_[i] * N,
                    static_cast<size_t>(N) * sizeof(float));
    } else if (f == "argmax") {
      const int64_t V = width(I[0]);
      float* y = out(o);
      next_.resize(out_rows_.size());
      for (size_t i = 0; i < out_rows_.size(); ++i) {
        next_[i] = cpu::argmax(in(I[0]) + static_cast<int64_t>(i) * V, V);
        y[i] = static_cast<float>(next_[i]);
      }
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
  cpu::KvRows kv_{}, kv_window_{};  // the rows of the caches in the pool, in the window pool
  std::vector<int> group_;          // per tensor: 1 for a cache in the window pool (else empty)
  std::vector<int32_t> out_rows_, seq_last_;
  size_t k_ = 0;
  std::vector<int32_t> next_;
  CpuOpHook hook_;
  int64_t pool_rows_;
};

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const Program& p, const WeightSource& w, CpuOpHook hook = {})
      : p_(p), in_(p, w, 0, std::move(hook)), chunk_(ring_forward_tokens(p)), ring_(p) {}

  const char* name() const override { return "cpu"; }
  int kept_positions(int keep) const override { return ring_.kept(keep); }

  // A forward longer than the rings allow (ring_forward_tokens) runs in chunks: every op treats
  // each row on its own, so the chunks give the bits of one forward.
  int32_t forward(const int32_t* ids, int T, int pos, float* logits_out) override {
    if (T < 1) fail("forward needs at least one token");
    if (pos < 0 || pos + T > p_.max_ctx)
      fail("context overflow: positions {}..{} exceed the context length {}", pos, pos + T - 1,
           p_.max_ctx);
    int32_t next = 0;
    for (int s = 0; s < T; s += chunk_) {
      const int n = std::min(chunk_, T - s);
      next = run(ids + s, n, pos + s, s + n == T ? logits_out : nullptr);
    }
    ring_.wrote(pos, T);
    ran_ = true;
    return next;
  }

  void last_logits(float* out) override {
    const std::span<const float> row = in_.logits_row(0);
    if (!ran_ || row.empty()) fail("last_logits: no forward has run");
    std::copy(row.begin(), row.end(), out);
  }

 private:
  int32_t run(const int32_t* ids, int T, int pos, float* logits_out) {
    pos_.resize(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) pos_[static_cast<size_t>(t)] = pos + t;
    seq_.assign(static_cast<size_t>(T), 0);
    const int32_t block0 = 0, last = T - 1;
    int32_t next = 0;
    BatchForward b;
    b.T = T;
    b.ids = ids;
    b.pos = pos_.data();
    b.seq = seq_.data();
    b.n_seqs = 1;
    b.block_table = &block0;
    b.table_stride = 1;
    b.out_rows = &last;
    b.n_out = 1;
    b.next_tokens = &next;
    b.logits = logits_out;
    in_.run_rows(b, p_.max_ctx);
    return next;
  }

  const Program& p_;
  CpuInterpreter in_;
  int chunk_;       // tokens a forward's chunk at most
  RingState ring_;  // what the sliding layers' rings hold
  std::vector<int32_t> pos_, seq_;
  bool ran_ = false;  // a forward has run (the interpreter holds its logits)
};

class CpuBatchExecutor final : public BatchExecutor {
 public:
  CpuBatchExecutor(const Program& p, const WeightSource& w, int num_blocks, int block_tokens,
                   int max_rows, int window_blocks)
      : p_(p),
        num_blocks_(check_pool(p, num_blocks, block_tokens, max_rows, window_blocks)),
        block_tokens_(block_tokens),
        max_rows_(max_rows),
        window_blocks_(window_blocks),
        in_(p, w, static_cast<int64_t>(num_blocks) * block_tokens, {},
            static_cast<int64_t>(window_blocks) * block_tokens) {}

  const char* name() const override { return "cpu"; }
  int num_blocks() const override { return num_blocks_; }
  int block_tokens() const override { return block_tokens_; }
  int max_rows() const override { return max_rows_; }
  int window_blocks() const override { return window_blocks_; }

  void forward(const BatchForward& b) override {
    check_batch_forward(b, num_blocks_, block_tokens_, max_rows_, p_.max_ctx, window_blocks_);
    in_.run_rows(b, block_tokens_);
  }

 private:
  static int check_pool(const Program& p, int num_blocks, int block_tokens, int max_rows,
                        int window_blocks) {
    check_batch_pool(num_blocks, block_tokens, max_rows);
    batch_cache_groups(p, window_blocks);
    return num_blocks;
  }
  const Program& p_;
  int num_blocks_, block_tokens_, max_rows_, window_blocks_;
  CpuInterpreter in_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const Program& program, const WeightSource& weights) {
  return std::make_unique<CpuExecutor>(program, weights);
}

std::unique_ptr<BatchExecutor> make_cpu_batch_executor(const Program& program,
                                                       const WeightSource& weights, int num_blocks,
                                                       int block_tokens, int max_rows,
                                                       int window_blocks) {
  return std::make_unique<CpuBatchExecutor>(program, weights, num_blocks, block_tokens, max_rows,
                                            window_blocks);
}

std::unique_ptr<Executor> make_cpu_executor_with_hook(const Program& program,
                                                      const WeightSource& weights, CpuOpHook hook) {
  return std::make_unique<CpuExecutor>(program, weights, std::move(hook));
}

}  // namespace vkllm
