// The decode and prefill fusion's shared pieces (internal to vk_fused.cpp, vk_fusion_plan.cpp and
// vk_chain.cpp): the pattern tables, the matcher that finds a pattern's run of ops in the program,
// and the decode chain's constants. The planner (vk_fusion_plan.cpp) is a pure function of the
// program, the device's capabilities and the tuning; the preparers (vk_fused.cpp, vk_chain.cpp)
// turn each planned run into a prepared step.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/vulkan/vk_fused.h"
#include "backend/vulkan/vk_ops_internal.h"

namespace vkllm::vk::fusion {

using namespace detail;

// A mat-vec run's prologue: its input row quantized, or normalized then quantized, or (PostNorm,
// Gemma 3's norms around the residual add) normalized, added to the residual, and the sum
// normalized and quantized. Its epilogue: each mat-vec's rows stored, or added to the residual, or
// the gated unit of two mat-vecs' rows (SwiGLU, GeGLU).
enum class Pro : uint32_t { Quant = 0, Norm = 1, PostNorm = 2 };
enum class Epi : uint32_t { Store = 0, Add = 1, Swiglu = 2, Geglu = 3 };

// The table: tried in order at every op; the first that matches takes the run. Mat-vec runs
// (linear_8da4w_fused.comp): a prologue, 1-3 mat-vecs reading its row, an epilogue. Attention
// runs (attention_decode.comp): the per-head q/k norms and rope before the attention, and its
// KV store and split merge, in one dispatch; a sliding window (the attention's window attribute,
// Gemma's sliding layers) is a parameter of every attention kernel, so windowed runs fuse alike.
// Tail runs (linear_8da4w.comp's VKLLM_TAIL): the unfused decode mat-vecs reading the shared int8
// scratch, and the one-row op after them (the residual add and the next norm, or SwiGLU) run by the
// last workgroup to finish, which also quantizes that row into the scratch for its linear_8da4w
// readers as the unfused ops do: no prologue, and one dispatch and barrier fewer per run.
// Head runs (linear_8da4w_mv.comp's and linear_q4w_mv.comp's VKLLM_MV_NORM): the lm_head's
// streamed mat-vec with the final norm in every workgroup's prologue, read in place from the
// residual (last_row, rms_norm, linear): the norm's single-workgroup dispatch and its barrier
// fewer.
// Prefill attention runs (kPrefillPatterns, forwards of several tokens): the norms and ropes of q
// and k in the prefill attention's q loads and its KV store.
enum class Kind { Matvec, Attention, Tail, Head, PrefillAttention };
enum class Tail : uint32_t { Norm = 0, Swiglu = 1 };
struct Pattern {
  const char* name;
  Kind kind;
  Pro pro = Pro::Quant;
  int matvecs = 0;  // linear_8da4w ops reading the prologue's row
  Epi epi = Epi::Store;
  bool qk_norm = false, rope = false;  // attention runs
  // Used unless asked for (VKLLM_FUSE=all uses every pattern): the mat-vec and tail runs measured
  // slower on the H200 than the unfused kernels they replace (docs/perf.md, 2026-12-01), so they
  // are kept, tested and measurable, but off by default.
  bool by_default = true;
  Tail tail = Tail::Norm;  // tail runs
  // Mat-vec runs: the linear family. linear_q4w runs (int4 weight-only: the row kept in floats)
  // are decode chain stages only (linear_8da4w_fused.comp has no float dot).
  const char* linear = "linear_8da4w";
  // Mat-vec runs with a store epilogue: each mat-vec's output goes through a bias_add (Qwen2's
  // q/k/v projections), the fp32 bias added to the row as it is stored (decode chain stages only:
  // linear_8da4w_fused.comp has no bias).
  bool bias = false;
  // Whether the run's linears are int4 weight-only. (By the name's text: each translation unit
  // has its own copy of the table's string literals, so their addresses differ across units.)
  bool q4w() const;
  // Mat-vec runs that only the decode chain kernel computes (linear_8da4w_fused.comp has no float
  // dot, no bias, no post-norm prologue and no GeGLU).
  bool chain_only() const {
    return kind == Kind::Matvec && (q4w() || bias || pro == Pro::PostNorm || epi == Epi::Geglu);
  }
};
constexpr const char* kQ4w = "linear_q4w";
inline bool Pattern::q4w() const {
  return std::string_view(linear) == kQ4w;
}
// (One pattern a row: not reflowed.)
// clang-format off
constexpr Pattern kPatterns[] = {
    {.name = "linear_8da4w+add+rms_norm tail", .kind = Kind::Tail, .matvecs = 1,
     .by_default = false, .tail = Tail::Norm},
    {.name = "linear_8da4w x2+swiglu tail", .kind = Kind::Tail, .matvecs = 2, .by_default = false,
     .tail = Tail::Swiglu},
    {.name = "rms_norm+add+rms_norm+linear_8da4w x2+geglu", .kind = Kind::Matvec,
     .pro = Pro::PostNorm, .matvecs = 2, .epi = Epi::Geglu, .by_default = false},
    {.name = "rms_norm+add+rms_norm+linear_8da4w x3", .kind = Kind::Matvec, .pro = Pro::PostNorm,
     .matvecs = 3, .by_default = false},
    {.name = "rms_norm+linear_8da4w x2+swiglu", .kind = Kind::Matvec, .pro = Pro::Norm,
     .matvecs = 2, .epi = Epi::Swiglu, .by_default = false},
    {.name = "rms_norm+linear_8da4w x3+bias", .kind = Kind::Matvec, .pro = Pro::Norm,
     .matvecs = 3, .by_default = false, .bias = true},
    {.name = "rms_norm+linear_8da4w x3", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 3,
     .by_default = false},
    {.name = "rms_norm+linear_8da4w x2", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 2,
     .by_default = false},
    {.name = "rms_norm+linear_8da4w", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 1,
     .by_default = false},
    {.name = "linear_8da4w+add", .kind = Kind::Matvec, .matvecs = 1, .epi = Epi::Add,
     .by_default = false},
    {.name = "linear_8da4w", .kind = Kind::Matvec, .matvecs = 1, .by_default = false},
    {.name = "rms_norm+add+rms_norm+linear_q4w x2+geglu", .kind = Kind::Matvec,
     .pro = Pro::PostNorm, .matvecs = 2, .epi = Epi::Geglu, .by_default = false, .linear = kQ4w},
    {.name = "rms_norm+add+rms_norm+linear_q4w x3", .kind = Kind::Matvec, .pro = Pro::PostNorm,
     .matvecs = 3, .by_default = false, .linear = kQ4w},
    {.name = "rms_norm+linear_q4w x2+swiglu", .kind = Kind::Matvec, .pro = Pro::Norm,
     .matvecs = 2, .epi = Epi::Swiglu, .by_default = false, .linear = kQ4w},
    {.name = "rms_norm+linear_q4w x3+bias", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 3,
     .by_default = false, .linear = kQ4w, .bias = true},
    {.name = "rms_norm+linear_q4w x3", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 3,
     .by_default = false, .linear = kQ4w},
    {.name = "rms_norm+linear_q4w x2", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 2,
     .by_default = false, .linear = kQ4w},
    {.name = "rms_norm+linear_q4w", .kind = Kind::Matvec, .pro = Pro::Norm, .matvecs = 1,
     .by_default = false, .linear = kQ4w},
    {.name = "linear_q4w+add", .kind = Kind::Matvec, .matvecs = 1, .epi = Epi::Add,
     .by_default = false, .linear = kQ4w},
    {.name = "linear_q4w", .kind = Kind::Matvec, .matvecs = 1, .by_default = false,
     .linear = kQ4w},
    {.name = "last_row+rms_norm+linear_8da4w", .kind = Kind::Head, .pro = Pro::Norm,
     .matvecs = 1},
    {.name = "last_row+rms_norm+linear_q4w", .kind = Kind::Head, .pro = Pro::Norm, .matvecs = 1,
     .linear = kQ4w},
    {.name = "rms_norm x2+rope x2+attention", .kind = Kind::Attention, .qk_norm = true,
     .rope = true},
    {.name = "rope x2+attention", .kind = Kind::Attention, .rope = true},
    {.name = "attention", .kind = Kind::Attention},
};
// clang-format on
// Forwards of several tokens (prefill): the ropes of q and k (and their per-head norms before
// them) in the prefill attention's q loads and its KV store (attention_prefill*.comp and
// attention.comp VKLLM_ROPE): two (four) dispatches and their barrier fewer a layer.
constexpr Pattern kPrefillPatterns[] = {
    {.name = "rms_norm x2+rope x2+attention, prefill",
     .kind = Kind::PrefillAttention,
     .qk_norm = true,
     .rope = true},
    {.name = "rope x2+attention, prefill", .kind = Kind::PrefillAttention, .rope = true},
};
constexpr uint32_t kWG = 256, kMaxK = 32 * kWG;  // linear_8da4w_fused.comp: MAXV values a thread
constexpr uint32_t kTailShared = 40 * 1024;      // linear_8da4w.comp VKLLM_TAIL: shared bytes

struct Match {
  const Pattern* pat = nullptr;
  size_t first = 0, last = 0;
  // Attention runs: the ops, and the run's q / k inputs (before norm and rope).
  const Op *qnorm = nullptr, *knorm = nullptr, *qrope = nullptr, *krope = nullptr, *attn = nullptr;
  int32_t q = -1, k = -1;
  const Op* norm = nullptr;  // Pro::Norm, Pro::PostNorm (the norm after the add), Tail::Norm
  // Tail::Norm; Pro::PostNorm: the add whose output (the sum) the run stores, its other operand
  // m.residual.
  const Op* add = nullptr;
  const Op* post = nullptr;  // Pro::PostNorm: the norm of the run's input before the add
  int32_t x = -1;            // the prologue's input row
  std::vector<const Op*> mv;
  int32_t y = -1, residual = -1;  // the run's output; Epi::Add: the other operand of the add
  // Pattern::bias: each mat-vec's bias and its bias_add's output (what the stage stores).
  std::vector<int32_t> bias, biased;
};

class Matcher {
 public:
  Matcher(const Program& p, uint32_t subgroup_min, const std::string& unfused)
      : p_(p), readers_(p.tensors.size()), sg_min_(subgroup_min), unfused_(unfused) {
    for (size_t k = 0; k < p.ops.size(); ++k)
      for (int32_t t : p.ops[k].inputs) readers_[t].push_back(k);
  }

  std::optional<Match> at(size_t k, const Pattern& pat, const std::string& unfused) const {
    auto m = pat.kind == Kind::Attention || pat.kind == Kind::PrefillAttention
                 ? attention_at(k, pat)
             : pat.kind == Kind::Tail ? tail_at(k, pat)
             : pat.kind == Kind::Head ? head_at(k, pat)
                                      : matvec_at(k, pat);
    if (m)
      for (size_t i = m->first; i <= m->last; ++i)
        if (op(i).family == unfused) return std::nullopt;
    return m;
  }

 private:
  // norm(q) norm(k) rope(q) rope(k) attention, or rope rope attention, or attention alone; every
  // intermediate read by the next op of the run alone; one-token rows.
  std::optional<Match> attention_at(size_t k, const Pattern& pat) const {
    Match m;
    m.pat = &pat;
    m.first = k;
    size_t j = k;
    auto next = [&]() -> const Op* { return j < p_.ops.size() ? &op(j++) : nullptr; };
    int32_t q = -1, kk = -1;
    if (pat.qk_norm) {
      m.qnorm = next();
      m.knorm = next();
      for (const Op* n : {m.qnorm, m.knorm})
        if (!n || n->family != "rms_norm" || !n->attrs.contains("group") ||
            !n->attrs["group"].is_number() || !only_in(n->outputs[0], j, j + 1))
          return std::nullopt;
      q = m.qnorm->outputs[0];
      kk = m.knorm->outputs[0];
      m.q = m.qnorm->inputs[0];
      m.k = m.knorm->inputs[0];
    }
    if (pat.rope) {
      m.qrope = next();
      m.krope = next();
      for (const Op* r : {m.qrope, m.krope})
        if (!r || r->family != "rope" || !only_in(r->outputs[0], j, j)) return std::nullopt;
      if (pat.qk_norm && (m.qrope->inputs[0] != q || m.krope->inputs[0] != kk)) return std::nullopt;
      if (!pat.qk_norm) {
        m.q = m.qrope->inputs[0];
        m.k = m.krope->inputs[0];
      }
      // One table for both: the same frequencies and attributes but the head count.
      std::vector<int32_t> tq(m.qrope->inputs.begin() + 1, m.qrope->inputs.end()),
          tk(m.krope->inputs.begin() + 1, m.krope->inputs.end());
      auto aq = m.qrope->attrs, ak = m.krope->attrs;
      aq.erase("n_heads");
      ak.erase("n_heads");
      if (tq != tk || aq != ak) return std::nullopt;
      q = m.qrope->outputs[0];
      kk = m.krope->outputs[0];
    }
    m.attn = next();
    if (!m.attn || m.attn->family != "attention" || m.attn->inputs.size() != 5) return std::nullopt;
    if (pat.rope || pat.qk_norm) {
      if (m.attn->inputs[0] != q || m.attn->inputs[1] != kk) return std::nullopt;
    } else {
      m.q = m.attn->inputs[0];
      m.k = m.attn->inputs[1];
    }
    for (int32_t t : {m.q, m.k, m.attn->inputs[2], m.attn->outputs[0]})
      if (!per_token(t) || !float_dtype(t)) return std::nullopt;
    m.y = m.attn->outputs[0];
    m.last = j - 1;
    return m;
  }

  // linear_8da4w, add, rms_norm (the add fusing into the norm, the mat-vec's output read by the add
  // alone), or two linear_8da4w of one input and the swiglu of their outputs (read by it alone).
  std::optional<Match> tail_at(size_t k, const Pattern& pat) const {
    if (k + 2 >= p_.ops.size()) return std::nullopt;
    Match m;
    m.pat = &pat;
    m.first = k;
    m.last = k + 2;
    for (int i = 0; i < pat.matvecs; ++i) {
      const Op& l = op(k + i);
      if (l.family != "linear_8da4w" || !tail_matvec(l) || (i > 0 && l.inputs[0] != m.x))
        return std::nullopt;
      m.x = l.inputs[0];
      m.mv.push_back(&l);
    }
    const Op& e = op(k + pat.matvecs);
    if (pat.tail == Tail::Norm) {
      const int32_t o = m.mv[0]->outputs[0];
      if (e.family != "add" || !fuses_into_next(p_, k + 1, unfused_) ||
          (e.inputs[0] != o && e.inputs[1] != o) || e.inputs[0] == e.inputs[1] ||
          !only_in(o, k + 1, k + 1))
        return std::nullopt;
      const Op& n = op(k + 2);
      if (!whole_norm(n) || !per_token(n.outputs[0])) return std::nullopt;
      m.residual = e.inputs[0] == o ? e.inputs[1] : e.inputs[0];
      m.add = &e;
      m.norm = &n;
      m.y = n.outputs[0];
    } else {
      const int32_t g = m.mv[0]->outputs[0], u = m.mv[1]->outputs[0];
      if (e.family != "swiglu" || e.inputs.size() != 2 || e.inputs[0] != g || e.inputs[1] != u ||
          !only_in(g, k + 2, k + 2) || !only_in(u, k + 2, k + 2) || !same_row(g, e.outputs[0]) ||
          p_.tensors[m.mv[0]->inputs[1]].shape != p_.tensors[m.mv[1]->inputs[1]].shape)
        return std::nullopt;
      m.y = e.outputs[0];
    }
    return m;
  }

  // last_row, then rms_norm over its whole row, then one linear_8da4w reading the norm alone; the
  // mat-vec of one row whatever the forward (the lm_head): its kernel normalizes the residual's
  // row (m.x) itself.
  std::optional<Match> head_at(size_t k, const Pattern& pat) const {
    if (k + 2 >= p_.ops.size()) return std::nullopt;
    const Op &r = op(k), &n = op(k + 1), &l = op(k + 2);
    if (r.family != "last_row" || r.inputs.size() != 1 || r.outputs.size() != 1 || !whole_norm(n) ||
        n.inputs[0] != r.outputs[0] || l.family != pat.linear || !fusable_matvec(l) ||
        l.inputs[0] != n.outputs[0] || !only_in(r.outputs[0], k + 1, k + 1) ||
        !only_in(n.outputs[0], k + 2, k + 2) || !same_row(r.inputs[0], r.outputs[0]))
      return std::nullopt;
    Match m;
    m.pat = &pat;
    m.first = k;
    m.last = k + 2;
    m.x = r.inputs[0];
    m.norm = &n;
    m.mv = {&l};
    m.y = l.outputs[0];
    return m;
  }

  // An rms_norm over its input's whole row.
  bool whole_norm(const Op& n) const {
    return n.family == "rms_norm" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
           n.attrs.contains("group") && n.attrs["group"].is_number() &&
           n.attrs["group"].get<int64_t>() == width(n.inputs[0]);
  }

  std::optional<Match> matvec_at(size_t k, const Pattern& pat) const {
    Match m;
    m.pat = &pat;
    m.first = k;
    size_t j = k;
    if (pat.pro == Pro::PostNorm) {
      // rms_norm, then the add of its row (read by the add alone) and the residual: the sum.
      if (k + 2 >= p_.ops.size()) return std::nullopt;
      const Op &n = op(k), &a = op(k + 1);
      const int32_t o = n.outputs.empty() ? -1 : n.outputs[0];
      if (!whole_norm(n) || a.family != "add" || a.inputs.size() != 2 || a.outputs.size() != 1 ||
          (a.inputs[0] != o && a.inputs[1] != o) || a.inputs[0] == a.inputs[1] ||
          !only_in(o, k + 1, k + 1) || !same_row(o, a.outputs[0]) || !same_row(n.inputs[0], o))
        return std::nullopt;
      m.post = &n;
      m.add = &a;
      m.residual = a.inputs[0] == o ? a.inputs[1] : a.inputs[0];
      if (!same_row(m.residual, a.outputs[0])) return std::nullopt;
      j += 2;
    }
    if (pat.pro == Pro::Norm || pat.pro == Pro::PostNorm) {
      // The norm (after a post-norm run's add, of its sum).
      if (j >= p_.ops.size()) return std::nullopt;
      const Op& n = op(j);
      if (!whole_norm(n) || (m.post && n.inputs[0] != m.add->outputs[0])) return std::nullopt;
      m.norm = &n;
      m.x = m.post ? m.post->inputs[0] : n.inputs[0];
      ++j;
    }
    for (int i = 0; i < pat.matvecs; ++i, ++j) {
      if (j >= p_.ops.size()) return std::nullopt;
      const Op& l = op(j);
      if (l.family != pat.linear || !fusable_matvec(l)) return std::nullopt;
      if (!m.norm) m.x = l.inputs[0];  // Pro::Quant: one mat-vec, quantizing its own input
      if (l.inputs[0] != (m.norm ? m.norm->outputs[0] : m.x)) return std::nullopt;
      m.mv.push_back(&l);
    }
    // The norm's row is read by these mat-vecs alone.
    if (m.norm && !only_in(m.norm->outputs[0], k, j - 1)) return std::nullopt;
    m.last = j - 1;
    if (pat.epi == Epi::Store && pat.bias) {
      // bias_add i right after the mat-vecs adds the fp32 bias [N] to mat-vec i's output, read by
      // it alone.
      for (size_t i = 0; i < m.mv.size(); ++i, ++j) {
        if (j >= p_.ops.size()) return std::nullopt;
        const Op& b = op(j);
        const int32_t o = m.mv[i]->outputs[0];
        if (b.family != "bias_add" || b.inputs.size() != 2 || b.inputs[0] != o ||
            !only_in(o, j, j) || !same_row(o, b.outputs[0]) ||
            p_.tensors[b.inputs[1]].dtype != DType::F32 ||
            p_.tensors[b.inputs[1]].shape != std::vector<int64_t>{width(o)})
          return std::nullopt;
        m.bias.push_back(b.inputs[1]);
        m.biased.push_back(b.outputs[0]);
      }
      m.last = j - 1;
      if (pat.matvecs == 1) m.y = m.biased[0];
    } else if (pat.epi == Epi::Store) {
      if (pat.matvecs == 1) m.y = m.mv[0]->outputs[0];
    } else {
      if (j >= p_.ops.size()) return std::nullopt;
      const Op& e = op(j);
      if (pat.epi == Epi::Add) {
        const int32_t o = m.mv[0]->outputs[0];
        if (e.family != "add" || e.inputs.size() != 2 || (e.inputs[0] != o && e.inputs[1] != o) ||
            e.inputs[0] == e.inputs[1] || !only_in(o, j, j) || !same_row(o, e.outputs[0]))
          return std::nullopt;
        m.residual = e.inputs[0] == o ? e.inputs[1] : e.inputs[0];
        if (!same_row(m.residual, o)) return std::nullopt;
      } else {
        const int32_t g = m.mv[0]->outputs[0], u = m.mv[1]->outputs[0];
        if (e.family != (pat.epi == Epi::Geglu ? "geglu" : "swiglu") || e.inputs.size() != 2 ||
            e.inputs[0] != g || e.inputs[1] != u || !only_in(g, j, j) || !only_in(u, j, j) ||
            !same_row(g, e.outputs[0]) ||
            p_.tensors[m.mv[0]->inputs[1]].shape != p_.tensors[m.mv[1]->inputs[1]].shape)
          return std::nullopt;
      }
      m.y = e.outputs[0];
      m.last = j;
    }
    return m;
  }

  const Op& op(size_t k) const { return p_.ops[k]; }
  int64_t width(int32_t t) const { return p_.tensors[t].shape.back(); }
  // One row per token, or a single row (the last token's): one row in a one-token forward.
  bool per_token(int32_t t) const {
    const TensorDecl& d = p_.tensors[t];
    return d.shape.size() == 2 && (d.shape[0] < 0 || d.shape[0] == 1);
  }
  bool same_row(int32_t a, int32_t b) const {
    return per_token(a) && per_token(b) && width(a) == width(b);
  }
  bool float_dtype(int32_t t) const {
    return p_.tensors[t].dtype == DType::F32 || p_.tensors[t].dtype == DType::F16;
  }
  // Read only by ops first..last (and not the program's logits: those are read back).
  bool only_in(int32_t t, size_t first, size_t last) const {
    if (t == p_.logits || t == p_.next_token) return false;
    for (size_t r : readers_[t])
      if (r < first || r > last) return false;
    return true;
  }
  // The unfused kernel's decode variant (32-weight blocks, a group's blocks across a power of two
  // of lanes of one subgroup).
  bool tail_matvec(const Op& l) const {
    if (l.inputs.size() != 4 || l.outputs.size() != 1 || !l.attrs.contains("group") ||
        !l.attrs["group"].is_number())
      return false;
    const int64_t K = width(l.inputs[0]), G = l.attrs["group"].get<int64_t>(), bpg = G / 32;
    return per_token(l.inputs[0]) && per_token(l.outputs[0]) && float_dtype(l.inputs[0]) &&
           float_dtype(l.outputs[0]) && G > 0 && G % 32 == 0 && K % G == 0 &&
           (bpg & (bpg - 1)) == 0 && bpg <= sg_min_;
  }
  bool fusable_matvec(const Op& l) const {
    if (l.inputs.size() != (l.family == kQ4w ? 3u : 4u) || l.outputs.size() != 1 ||
        !l.attrs.contains("group") || !l.attrs["group"].is_number())
      return false;
    const int64_t K = width(l.inputs[0]), G = l.attrs["group"].get<int64_t>();
    // A group's blocks are combined across a power of two of lanes, within one subgroup; a
    // lane holds at most 32 blocks of a row.
    const int64_t bpg = G / 32;
    return per_token(l.inputs[0]) && per_token(l.outputs[0]) && float_dtype(l.inputs[0]) &&
           float_dtype(l.outputs[0]) && G > 0 && G % 32 == 0 && K % G == 0 &&
           K <= static_cast<int64_t>(kMaxK) && (bpg & (bpg - 1)) == 0 && bpg <= sg_min_ &&
           K / 32 <= 32 * static_cast<int64_t>(sg_min_);
  }

  const Program& p_;
  std::vector<std::vector<size_t>> readers_;
  int64_t sg_min_;
  std::string unfused_;  // the family the corruption switch zeroes: never fused
};

// An attention run's shape, dtypes and tables (attention_decode.glsl's parameters), for its own
// dispatch (prepare_attention) or a decode chain's attention stage (prepare_chain).
struct AttentionSetup {
  int H = 0, Hkv = 0, hd = 0;
  float scale = 0, qeps = 0, keps = 0;
  bool a16 = false, c16 = false, y16 = false, n16 = false, r16 = false;
  uint32_t R = 0, orig = UINT32_MAX, ctx = 0, C = 0, S = 0;
  uint32_t win = 0;        // a sliding window's keys (the op's window attribute; 0: none)
  uint32_t rows = 0;       // the caches' rows (need_attention_shapes: a sliding layer's ring)
  BufRange table, nq, nk;  // rope's cos/sin table, the q / k norm weights (placeholders: v)
};
AttentionSetup attention_setup(OpEnv& env, const Match& m);
// An attention run's attention_decode.glsl flag bits (linear_8da4w_chain.comp ATT_FLAGS): its
// rows', caches', output's, normed and rotated rows' dtypes, and whether it norms and rotates.
// A chain's attention stages share them and the head dim (one compiled attention a chain), so a
// chain ends where they change (SmolLM3's layers without rope between those with).
uint32_t attention_flags(const Program& p, const Match& m);

// Chain runs (linear_8da4w_chain.comp). A stage's input row is at most 8,192 values, a normalized
// one at most 4,096 (the prologue's registers); at most three mat-vecs.
constexpr uint32_t kChainWords = 64;  // the stage table's record (linear_8da4w_chain.comp SREC)
constexpr int64_t kChainMaxK = 8192, kChainMaxNormK = 4096;
// VKLLM_CHAIN_CLOCK: slots (chain stages timed; Phi-4-mini has 129) and phases a slot
// (linear_8da4w_chain.comp CLK_PHASES), 64-bit sums each.
constexpr uint32_t kClockSlots = 512, kClockPhases = 8;
// A stage's rows at most: wider mat-vecs (the lm_head, 128-200K rows) are faster unfused, one
// subgroup a row (159K SM cycles of rows in the chain at 264
// workgroups, 78 us unfused).
constexpr int64_t kChainMaxRows = 32768;
// The chain kernel's float row (xv: 9 K / 32 vec4s for the widest norm or q4w stage).
inline uint32_t chain_xv(int64_t K) {
  return std::max<uint32_t>(1, static_cast<uint32_t>(K / 32 * 9));
}
// The chain kernel's shared memory, as linear_8da4w_chain.comp declares it: the float row (xv
// vec4s); the stage records, reductions and merge weights (2,180 bytes) and the clock's (224);
// the int8 row and its block sums (9 KiB, compiled out of chains without int8 stages: INT8); and
// an attention stage's tile sums, softmax weights and q / k / v rows, and the merge's chunk of 8
// splits (hd: the stages' head dim; 0: no attention stage, its arrays compiled out), rounded up.
inline uint64_t chain_shared(uint32_t xv, int64_t hd, bool int8) {
  const uint64_t att = hd > 0 ? 4352 + 52 * uint64_t(hd) : 1024;
  return 16 * uint64_t(xv) + 2180 + 224 + (int8 ? 9216 : 0) + att + 64;
}
// A chain workgroup's threads: 512, one workgroup an SM, so that an SM runs each stage's prologue
// once (measured 3-5% faster on the H200 than two 256-thread workgroups an SM,
//); VKLLM_CHAIN_WG=256 picks the 256-thread variants (measurement, and the fusion
// case table).
inline uint32_t chain_wg(const Tuning& tune) {
  return tune.chain_wg == 256 ? 256 : 512;
}

// Whether a run may be a chain stage (chainable), and an attention run (chain_attention).
bool chain_attention(int64_t hd, bool c16, const Tuning& tune);
bool chainable(const Program& p, const Match& m, uint32_t max_shared);
// A head run's streamed mat-vec on this device (off: the run is not taken).
MatvecPlan head_matvec(const Program& p, const Match& m, const DeviceInfo& dev, const Tuning& tune);
// Whether a pattern is off (by default, or by the tuning).
bool disabled(const Pattern& pat, bool chain, const Tuning& tune);
// The match of a run found earlier (by its pattern's name), again: the preparation needs the ops.
std::optional<Match> rematch(const Matcher& matcher, const FusedRun& run,
                             const std::string& unfused);

// The prepared step of one matched run (vk_fused.cpp) and of a chain's stages (vk_chain.cpp).
std::unique_ptr<PreparedOp> prepare(OpEnv& env, const Match& m, const FusedRun& run);
std::unique_ptr<PreparedOp> prepare_chain(OpEnv& env, const std::vector<Match>& stages);

}  // namespace vkllm::vk::fusion
