// The decode step's fusion patterns and their prepared steps (vk_fused.h). Each pattern is a run
// of ops around linear_8da4w mat-vecs that linear_8da4w_fused.comp computes in one dispatch per
// mat-vec: a prologue that derives the int8 input row (quantization alone, or the RMS norm and
// then the quantization) in every workgroup, and an epilogue (plain store, the residual add, or
// SwiGLU of two mat-vecs). Every intermediate tensor of a run must be read only inside the run.
// The same runs around linear_q4w mat-vecs (int4 weight-only: no quantization, the row kept in
// floats) are decode chain stages only (linear_8da4w_chain.comp's q4w stages).
#include "backend/vulkan/vk_fused.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>

#include "backend/vulkan/vk_ops_internal.h"

namespace vkllm::vk {

namespace {

using namespace detail;

enum class Pro : uint32_t { Quant = 0, Norm = 1 };
enum class Epi : uint32_t { Store = 0, Add = 1, Swiglu = 2 };

// The table: tried in order at every op; the first that matches takes the run. Mat-vec runs
// (linear_8da4w_fused.comp): a prologue, 1-3 mat-vecs reading its row, an epilogue. Attention
// runs (attention_decode.comp): the per-head q/k norms and rope before the attention, and its
// KV store and split merge, in one dispatch.
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
};
constexpr const char* kQ4w = "linear_q4w";
constexpr Pattern kPatterns[] = {
    {"linear_8da4w+add+rms_norm tail", Kind::Tail, Pro::Quant, 1, Epi::Store, false, false, false,
     Tail::Norm},
    {"linear_8da4w x2+swiglu tail", Kind::Tail, Pro::Quant, 2, Epi::Store, false, false, false,
     Tail::Swiglu},
    {"rms_norm+linear_8da4w x2+swiglu", Kind::Matvec, Pro::Norm, 2, Epi::Swiglu, false, false,
     false},
    {"rms_norm+linear_8da4w x3", Kind::Matvec, Pro::Norm, 3, Epi::Store, false, false, false},
    {"rms_norm+linear_8da4w x2", Kind::Matvec, Pro::Norm, 2, Epi::Store, false, false, false},
    {"rms_norm+linear_8da4w", Kind::Matvec, Pro::Norm, 1, Epi::Store, false, false, false},
    {"linear_8da4w+add", Kind::Matvec, Pro::Quant, 1, Epi::Add, false, false, false},
    {"linear_8da4w", Kind::Matvec, Pro::Quant, 1, Epi::Store, false, false, false},
    {"rms_norm+linear_q4w x2+swiglu", Kind::Matvec, Pro::Norm, 2, Epi::Swiglu, false, false, false,
     Tail::Norm, kQ4w},
    {"rms_norm+linear_q4w x3", Kind::Matvec, Pro::Norm, 3, Epi::Store, false, false, false,
     Tail::Norm, kQ4w},
    {"rms_norm+linear_q4w x2", Kind::Matvec, Pro::Norm, 2, Epi::Store, false, false, false,
     Tail::Norm, kQ4w},
    {"rms_norm+linear_q4w", Kind::Matvec, Pro::Norm, 1, Epi::Store, false, false, false, Tail::Norm,
     kQ4w},
    {"linear_q4w+add", Kind::Matvec, Pro::Quant, 1, Epi::Add, false, false, false, Tail::Norm,
     kQ4w},
    {"linear_q4w", Kind::Matvec, Pro::Quant, 1, Epi::Store, false, false, false, Tail::Norm, kQ4w},
    {"last_row+rms_norm+linear_8da4w", Kind::Head, Pro::Norm, 1, Epi::Store},
    {"last_row+rms_norm+linear_q4w", Kind::Head, Pro::Norm, 1, Epi::Store, false, false, true,
     Tail::Norm, kQ4w},
    {"rms_norm x2+rope x2+attention", Kind::Attention, Pro::Quant, 0, Epi::Store, true, true},
    {"rope x2+attention", Kind::Attention, Pro::Quant, 0, Epi::Store, false, true},
    {"attention", Kind::Attention},
};
// Forwards of several tokens (prefill): the ropes of q and k (and their per-head norms before
// them) in the prefill attention's q loads and its KV store (attention_prefill*.comp and
// attention.comp VKLLM_ROPE): two (four) dispatches and their barrier fewer a layer.
constexpr Pattern kPrefillPatterns[] = {
    {"rms_norm x2+rope x2+attention, prefill", Kind::PrefillAttention, Pro::Quant, 0, Epi::Store,
     true, true},
    {"rope x2+attention, prefill", Kind::PrefillAttention, Pro::Quant, 0, Epi::Store, false, true},
};
constexpr uint32_t kWG = 256, kMaxK = 32 * kWG;  // linear_8da4w_fused.comp: MAXV values a thread
constexpr uint32_t kTailShared = 40 * 1024;      // linear_8da4w.comp VKLLM_TAIL: shared bytes

struct Match {
  const Pattern* pat = nullptr;
  size_t first = 0, last = 0;
  // Attention runs: the ops, and the run's q / k inputs (before norm and rope).
  const Op *qnorm = nullptr, *knorm = nullptr, *qrope = nullptr, *krope = nullptr, *attn = nullptr;
  int32_t q = -1, k = -1;
  const Op* norm = nullptr;  // Pro::Norm, Tail::Norm
  const Op* add = nullptr;   // Tail::Norm
  int32_t x = -1;            // the prologue's input row
  std::vector<const Op*> mv;
  int32_t y = -1, residual = -1;  // the run's output; Epi::Add: the other operand of the add
};

class Matcher {
 public:
  Matcher(const Program& p, uint32_t subgroup_min)
      : p_(p), readers_(p.tensors.size()), sg_min_(subgroup_min) {
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
      if (e.family != "add" || !fuses_into_next(p_, k + 1) ||
          (e.inputs[0] != o && e.inputs[1] != o) || e.inputs[0] == e.inputs[1] ||
          !only_in(o, k + 1, k + 1))
        return std::nullopt;
      const Op& n = op(k + 2);
      if (!n.attrs.contains("group") || !n.attrs["group"].is_number() ||
          n.attrs["group"].get<int64_t>() != width(n.inputs[0]) || !per_token(n.outputs[0]))
        return std::nullopt;
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
    if (r.family != "last_row" || r.inputs.size() != 1 || r.outputs.size() != 1 ||
        n.family != "rms_norm" || n.inputs.size() != 2 || n.inputs[0] != r.outputs[0] ||
        !n.attrs.contains("group") || !n.attrs["group"].is_number() ||
        n.attrs["group"].get<int64_t>() != width(n.inputs[0]) || l.family != pat.linear ||
        !fusable_matvec(l) || l.inputs[0] != n.outputs[0] || !only_in(r.outputs[0], k + 1, k + 1) ||
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

  std::optional<Match> matvec_at(size_t k, const Pattern& pat) const {
    Match m;
    m.pat = &pat;
    m.first = k;
    size_t j = k;
    if (pat.pro == Pro::Norm) {
      const Op& n = op(j);
      if (n.family != "rms_norm" || !n.attrs.contains("group") || !n.attrs["group"].is_number() ||
          n.attrs["group"].get<int64_t>() != width(n.inputs[0]))
        return std::nullopt;
      m.norm = &n;
      m.x = n.inputs[0];
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
    if (pat.epi == Epi::Store) {
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
        if (e.family != "swiglu" || e.inputs.size() != 2 || e.inputs[0] != g || e.inputs[1] != u ||
            !only_in(g, j, j) || !only_in(u, j, j) || !same_row(g, e.outputs[0]) ||
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
};

// The mat-vec kernel's shape on this device: rows per subgroup in flight (RPS), 32-weight blocks
// per lane (BPL, enough for the row at the smallest subgroup size), and the most workgroups (each
// repeats the prologue, so no more than run at once on a GPU; few on CPU devices, where every
// workgroup costs a thread hand-off). VKLLM_FUSED_RPS / VKLLM_FUSED_GROUPS override (measurement).
struct Tuning {
  uint32_t rps, bpl, parts, subgroups, max_groups;  // bpl: the whole row's (parts x decode_split's)
};
// A 0|1 switch: its value where set to "0" or "1", else dflt.
uint32_t env_switch(const char* name, uint32_t dflt) {
  const char* v = std::getenv(name);
  return v && (std::string(v) == "0" || std::string(v) == "1") ? uint32_t(v[0] == '1') : dflt;
}
uint32_t env_u32(const char* name, uint32_t dflt) {
  const int v = env_int(name);
  return v > 0 ? static_cast<uint32_t>(v) : dflt;
}
Tuning tuning(const Context& ctx, int64_t K, int64_t N) {
  const bool cpu = ctx.info().type == "cpu";
  const DecodeSplit split = decode_split(ctx, K, N);  // the unfused kernel's order of sums
  Tuning t;
  t.parts = split.parts;
  t.bpl = split.parts * split.bpl;
  t.rps = env_u32("VKLLM_FUSED_RPS", cpu ? 4 : 2);
  t.subgroups = std::max<uint32_t>(1, kWG / std::max<uint32_t>(1, ctx.info().subgroup_size));
  t.max_groups = env_u32("VKLLM_FUSED_GROUPS", cpu ? 64 : 1024);
  return t;
}

// An attention run's shape, dtypes and tables (attention_decode.glsl's parameters), for its own
// dispatch (prepare_attention) or a decode chain's attention stage (prepare_chain).
struct AttentionSetup {
  int H = 0, Hkv = 0, hd = 0;
  float scale = 0, qeps = 0, keps = 0;
  bool a16 = false, c16 = false, y16 = false, n16 = false, r16 = false;
  uint32_t R = 0, orig = UINT32_MAX, ctx = 0, C = 0, S = 0;
  BufRange table, nq, nk;  // rope's cos/sin table, the q / k norm weights (placeholders: v)
  // attention_decode.glsl's flag bits (linear_8da4w_chain.comp ATT_FLAGS).
  uint32_t flags(const Match& m) const {
    return (a16 ? 1u : 0u) | (c16 ? 2u : 0u) | (y16 ? 4u : 0u) | (n16 ? 8u : 0u) |
           (r16 ? 16u : 0u) | (m.qnorm ? 32u : 0u) | (m.qrope ? 64u : 0u);
  }
};
AttentionSetup attention_setup(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  Ctx c{env, *m.attn, p};
  const auto& I = m.attn->inputs;
  AttentionSetup a;
  a.H = static_cast<int>(c.attr_i("n_heads"));
  a.Hkv = static_cast<int>(c.attr_i("n_kv_heads"));
  a.hd = static_cast<int>(c.attr_i("head_dim"));
  a.scale = c.attr_f("scale");
  need_attention_shapes(c, a.H, a.Hkv, a.hd, m.q, m.k, I[2], I[3], I[4], m.y);
  c.need(c.f16(m.q) == c.f16(m.k) && c.f16(m.k) == c.f16(I[2]), "q, k and v must share one dtype");
  // The normed and rotated rows' dtypes (rounded to as the unfused ops store them).
  if (m.qnorm) {
    for (const Op* n : {m.qnorm, m.knorm})
      c.need(n->attrs["group"].get<int64_t>() == a.hd &&
                 p.tensors[n->inputs[1]].shape == std::vector<int64_t>{a.hd},
             "q/k norm group must be the head dim");
    a.n16 = c.f16(m.qnorm->outputs[0]);
    c.need(a.n16 == c.f16(m.knorm->outputs[0]), "q and k norms must share one dtype");
    a.qeps = m.qnorm->attrs.value("eps", 1e-6f);
    a.keps = m.knorm->attrs.value("eps", 1e-6f);
  }
  a.table = c.whole(I[2]);  // a placeholder binding when there is no rope
  if (m.qrope) {
    Ctx rc{env, *m.qrope, p};
    a.R = static_cast<uint32_t>(rc.attr_i("rotary_dim"));
    c.need(static_cast<int>(rc.attr_i("head_dim")) == a.hd && a.R > 0 &&
               a.R <= static_cast<uint32_t>(a.hd) && a.R % 2 == 0,
           "bad rope");
    std::vector<int32_t> invs(m.qrope->inputs.begin() + 1, m.qrope->inputs.end());
    for (int32_t inv : invs)
      c.need(p.tensors[inv].shape == std::vector<int64_t>{a.R / 2}, "bad rope table");
    if (invs.size() == 2)
      a.orig = u32(std::min<int64_t>(rc.attr_i("original_max_pos"), UINT32_MAX - 1));
    a.table = rope_table(rc, invs, static_cast<int>(a.R), rc.attr_f("attention_factor"));
    a.r16 = c.f16(m.qrope->outputs[0]);
    c.need(a.r16 == c.f16(m.krope->outputs[0]), "rotated q and k must share one dtype");
  }
  // The splits of prep_attention's decode step.
  a.ctx = u32(p.max_ctx);
  const AttentionSplits splits = attention_splits(env, a.H, a.hd);
  a.C = splits.C;
  a.S = splits.S;
  if (env.attn_counter.size < uint64_t(a.H + 1) * 4) {
    env.attn_counter = env.alloc.create(uint64_t(a.H + 1) * 4, false, "attention split counters");
    env.alloc.fill(env.attn_counter, 0);
  }
  a.a16 = c.f16(m.q);
  a.c16 = c.f16(I[3]);
  a.y16 = c.f16(m.y);
  a.nq = m.qnorm ? c.whole(m.qnorm->inputs[1]) : c.whole(I[2]);
  a.nk = m.knorm ? c.whole(m.knorm->inputs[1]) : c.whole(I[2]);
  return a;
}

std::unique_ptr<PreparedOp> prepare_attention(OpEnv& env, const Match& m, bool quantize_out) {
  const Program& p = env.program;
  Ctx c{env, *m.attn, p};
  const auto& I = m.attn->inputs;
  const AttentionSetup a = attention_setup(env, m);
  const int H = a.H, hd = a.hd;
  const uint32_t C = a.C, S = a.S;  // plain names: lambdas capture them
  // The output's readers are linear_8da4w ops in the tail run after this one: the last head merged
  // quantizes it for them (the unfused mat-vec quantizes its input itself).
  const bool oquant = quantize_out && (int64_t(H) * hd) % 4 == 0 && feeds_only_8da4w(c, m.y);
  const auto [qs, qps] = act_scratch(c, int64_t(H) * hd);
  const bool any16 = a.a16 || a.c16 || a.y16 || a.n16 || a.r16;
  const Kernel& k = env.kernels.get(
      std::string("attention_decode") + (any16 ? "_f16" : ""), 16, 11 * 4,
      {a.a16, a.c16, a.y16, m.qnorm != nullptr, m.qrope != nullptr, a.n16, a.r16, oquant, u32(hd),
       u32(env_int("VKLLM_ATT_MEASURE")), std::getenv("VKLLM_ATT_ORDER") ? 0u : 1u});
  const std::vector<BufRange> r = {c.whole(m.q),
                                   c.whole(m.k),
                                   c.whole(I[2]),
                                   c.whole(I[3]),
                                   c.whole(I[3]),
                                   c.whole(I[4]),
                                   c.whole(I[4]),
                                   c.whole(m.y),
                                   {env.attn_part.buf, 0, env.attn_part.size},
                                   {env.attn_counter.buf, 0, env.attn_counter.size},
                                   {env.step.buf, 0, env.step.size},
                                   a.table,
                                   a.nq,
                                   a.nk,
                                   qs,
                                   qps};
  VkDescriptorSet set = env.kernels.make_set(k, r);
  const std::vector<uint32_t> push = {u32(H), u32(a.Hkv), u32(hd),       fbits(a.scale), S, C, a.R,
                                      a.orig, a.ctx,      fbits(a.qeps), fbits(a.keps)};
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int) { dispatch_flat(cb, k, set, push, uint64_t(H) * S); },
      nullptr);
  const VkBuffer kc = c.buf(I[3]), vc = c.buf(I[4]);
  prepared->phases = {{{c.buf(m.q), c.buf(m.k), c.buf(I[2]), kc, vc, env.attn_part.buf},
                       {kc, vc, c.buf(m.y), env.attn_part.buf, env.attn_counter.buf}}};
  if (oquant) {
    prepared->phases[0].writes.insert(prepared->phases[0].writes.end(), {qs.buf, qps.buf});
    prepared->quantizes = m.y;
  }
  return prepared;
}

// A prefill attention run ([norm, norm,] rope, rope, attention in forwards of several tokens):
// the KV store norms and rotates the new keys, the prefill attention kernel its queries as it
// loads them; each rounded as the unfused op stores it, so the result is the unfused ops' bit for
// bit.
std::unique_ptr<PreparedOp> prepare_prefill_attention(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  Ctx c{env, *m.attn, p};
  const auto& I = m.attn->inputs;
  const AttentionSetup a = attention_setup(env, m);
  const int H = a.H, hd = a.hd;
  const int64_t W = int64_t(a.Hkv) * hd;
  // (attention_setup: a16 is q's and k's dtype before norm and rope, n16 after the norm, r16
  // after rope, v's that of the rotated rows.)
  const uint32_t r16 = a.r16, v16 = c.f16(I[2]), q16 = a.a16, k16 = c.f16(m.k), n16 = a.n16,
                 qkn = m.qnorm ? 1 : 0;
  c.need(r16 == v16, "rotated q, k and v must share one dtype");
  const uint32_t sg = env.ctx.info().subgroup_size;
  c.need(!qkn || (sg > 0 && sg <= 64), "the run's key norms need subgroups of at most 64");
  const PrefillAttention pa = prefill_attention(env.ctx, hd, r16, a.c16, H / a.Hkv);
  const Kernel* kp = pa.kernel(c, hd, {r16, a.c16, a.y16, q16, qkn, n16}, true);
  c.need(kp != nullptr, "no prefill attention kernel for the run");
  const Kernel& ks =
      c.kernel("attention_store_rope", 7, 6, {v16, a.c16, 0, k16, qkn, n16}, u32(hd));
  const BufRange step = {env.step.buf, 0, env.step.size};
  VkDescriptorSet ss =
      env.kernels.make_set(ks, std::vector<BufRange>{c.whole(m.k), c.whole(I[2]), c.whole(I[3]),
                                                     c.whole(I[4]), step, a.table, a.nk});
  VkDescriptorSet sp =
      env.kernels.make_set(*kp, std::vector<BufRange>{c.whole(m.q), c.whole(I[3]), c.whole(I[4]),
                                                      c.whole(m.y), step, a.table, a.nq});
  const uint32_t R = a.R, orig = a.orig, ctx = a.ctx, bq = pa.bq, gq = pa.gq, Hkv = u32(a.Hkv);
  const float scale = a.scale, qeps = a.qeps, keps = a.keps;
  auto prepared = std::make_unique<PreparedOp>(
      [=, &ks](VkCommandBuffer cb, int T) {
        // The store: an element a thread, or with the key norms a subgroup a key row.
        const uint32_t groups =
            qkn ? ceil_div(uint64_t(T) * Hkv, 64 / sg) : ceil_div(uint64_t(T) * W, 64);
        dispatch_flat(cb, ks, ss, {u32(T), u32(W), R, orig, ctx, fbits(keps)}, groups);
        compute_barrier(cb);
        dispatch(cb, *kp, sp, {u32(T), u32(H), Hkv, fbits(scale), R, orig, ctx, fbits(qeps)},
                 u32(H) / gq, ceil_div(u32(T), bq));
      },
      nullptr);
  const VkBuffer kc = c.buf(I[3]), vc = c.buf(I[4]);
  prepared->phases = {{{c.buf(m.k), c.buf(I[2]), a.nk.buf}, {kc, vc}},
                      {{c.buf(m.q), kc, vc, a.nq.buf}, {c.buf(m.y)}}};
  return prepared;
}

// A tail run: its mat-vecs (in row chunks: one dispatch per chunk, no barrier between them, one
// counter across all) and the row op after them, run by the workgroup that finishes last.
std::unique_ptr<PreparedOp> prepare_tail(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  Ctx c{env, *m.mv[0], p};
  const Op& l0 = *m.mv[0];
  const int64_t K = c.width(m.x), W = c.width(m.y), G = l0.attrs["group"].get<int64_t>();
  const bool norm = m.pat->tail == Tail::Norm;
  // The row's readers are linear_8da4w ops: quantize it for them, as the unfused producer would.
  const bool tquant = W % 4 == 0 && feeds_only_8da4w(c, m.y);
  const auto [q, qp] = act_scratch(c, std::max(K, W));
  const BufRange qr = q, qpr = qp;  // (lambdas do not capture structured bindings in clang 14)
  std::vector<Phase> phases;
  const Kernel* kq = nullptr;
  VkDescriptorSet qset = VK_NULL_HANDLE;
  if (env.quant_src != m.x) {  // the step before did not quantize the input: quantize it first
    kq = &c.kernel("linear_8da4w_quant", 3, 3, {c.f16(m.x)}, quant_hold(K));
    qset = env.kernels.make_set(*kq, std::vector<BufRange>{c.whole(m.x), qr, qpr});
    phases.push_back({{c.buf(m.x)}, {qr.buf, qpr.buf}});
  }
  if (!env.tail_counter.buf) {
    env.tail_counter = env.alloc.create(16, false, "tail run counter");
    env.alloc.fill(env.tail_counter, 0);
  }
  // The tail's operands (linear_8da4w.comp bindings 7-10).
  const int32_t ta = norm ? m.residual : m.mv[0]->outputs[0],
                tb = norm ? m.norm->inputs[1] : m.mv[1]->outputs[0],
                ts = norm ? m.add->outputs[0] : m.y, tn = m.y;
  if (norm)
    c.need(p.tensors[tb].dtype == DType::F32 && p.tensors[tb].shape == std::vector<int64_t>{W} &&
               c.width(m.residual) == W && c.width(l0.outputs[0]) == W,
           "bad norm weight or residual");
  const bool y16 = c.f16(l0.outputs[0]);
  for (const Op* l : m.mv)
    c.need(c.f16(l->outputs[0]) == y16 && c.width(l->outputs[0]) == W,
           "the tail's mat-vecs must share one shape and dtype");
  const int64_t N = p.tensors[l0.inputs[1]].shape[0];
  const DecodeSplit split = decode_split(env.ctx, K, N);  // as the unfused mat-vec sums
  const uint32_t a16 = c.f16(ta), b16 = norm ? 0u : c.f16(tb), s16 = c.f16(ts), n16 = c.f16(tn);
  // Spec constants 1-16 (linear_8da4w.comp): Y16, five unused, TT = 1, BPL, the tail's, PARTS.
  const std::vector<uint32_t> spec = {
      y16, 0,   0,   0,   0,      0,          0, 1, split.bpl, static_cast<uint32_t>(m.pat->tail),
      a16, b16, s16, n16, tquant, split.parts};
  const bool any16 = y16 || a16 || b16 || s16 || n16;
  c.need(!any16 || env.ctx.use_fp16(), "fp16 tensors need 16-bit storage");
  const std::string name = std::string("linear_8da4w_b32_tail") +
                           (env.ctx.use_int_dot() ? "_idot" : "") + (any16 ? "_f16" : "");
  const Kernel& k = env.kernels.get(name, 17, 11 * 4, spec);
  std::vector<uint32_t> spec_none = spec;  // the dispatches before the last have no tail
  spec_none[9] = 2;
  const Kernel& k_none = env.kernels.get(name, 17, 11 * 4, spec_none);
  // One dispatch per row chunk of the weights (a SwiGLU dispatch computes the chunk's gate and up
  // rows, the up's in the second half of its workgroups); the chunks before the last run without
  // the tail, then a barrier, then the last with it (its counter counts its own workgroups).
  // Rows per workgroup: one per subgroup of the 256 threads (more on CPU devices, as matvec_rows).
  const uint32_t sg = std::max<uint32_t>(1, env.ctx.info().subgroup_size);
  const Op* l1 = m.mv.size() > 1 ? m.mv[1] : nullptr;
  if (l1) c.need(l1->attrs["group"] == l0.attrs["group"], "gate and up must share one group size");
  const std::vector<uint64_t> rb = {static_cast<uint64_t>(K / 2), static_cast<uint64_t>(K / G) * 4,
                                    static_cast<uint64_t>(K / G) * 4};
  struct Dispatch {
    const Kernel* k;
    VkDescriptorSet set;
    std::vector<uint32_t> push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  const std::vector<RowChunk> chunks = row_chunks(c, N, rb);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const RowChunk& ch = chunks[i];
    const uint32_t R = std::max<uint32_t>(256 / sg, env.ctx.matvec_rows(ch.rows) * 4);
    std::vector<BufRange> r = {qr, qpr};
    for (int b = 0; b < 3; ++b) r.push_back(chunk_range(c, l0.inputs[1 + b], rb[b], ch));
    r.push_back(c.whole(l0.outputs[0]));
    r.push_back({env.tail_counter.buf, 0, env.tail_counter.size});
    for (int32_t t : {ta, tb, ts, tn}) r.push_back(c.whole(t));
    r.push_back(qr);
    r.push_back(qpr);
    const Op& second = l1 ? *l1 : l0;  // bindings 13-16 (unused without a second mat-vec)
    for (int b = 0; b < 3; ++b) r.push_back(chunk_range(c, second.inputs[1 + b], rb[b], ch));
    r.push_back(c.whole(second.outputs[0]));
    const uint32_t per = ceil_div(ch.rows, R), groups = l1 ? 2 * per : per;
    const Kernel& kk = i + 1 == chunks.size() ? k : k_none;
    ds.push_back({&kk,
                  env.kernels.make_set(kk, r),
                  {u32(K), u32(ch.rows), u32(ch.r0), u32(N), 1, u32(G), R, groups, u32(W),
                   fbits(norm ? m.norm->attrs.value("eps", 1e-6f) : 0.0f), l1 ? per : groups},
                  groups});
  }
  // Phases: [the input's quantization], [the chunks before the last], the last chunk and the tail.
  std::vector<VkBuffer> outs = {c.buf(l0.outputs[0])};
  if (l1) outs.push_back(c.buf(l1->outputs[0]));
  if (chunks.size() > 1) phases.push_back({{qr.buf, qpr.buf}, outs});
  std::vector<VkBuffer> writes = outs, reads = {qr.buf, qpr.buf, c.buf(ta)};
  if (chunks.size() > 1) reads.insert(reads.end(), outs.begin(), outs.end());
  writes.insert(writes.end(), {c.buf(ts), c.buf(tn)});
  if (tquant) writes.insert(writes.end(), {qr.buf, qpr.buf});
  phases.push_back({reads, writes});
  auto prepared = std::make_unique<PreparedOp>(
      [ds, kq, qset, K](VkCommandBuffer cb, int) {
        if (kq) {
          dispatch_flat(cb, *kq, qset, {u32(K), 1, 0}, 1);  // (one token: the mat-vecs' order)
          compute_barrier(cb);
        }
        for (size_t i = 0; i < ds.size(); ++i) {
          if (i > 0 && i + 1 == ds.size()) compute_barrier(cb);
          dispatch_flat(cb, *ds[i].k, ds[i].set, ds[i].push, ds[i].groups);
        }
      },
      nullptr);
  prepared->phases = std::move(phases);
  prepared->quantizes = tquant ? m.y : (kq ? m.x : -1);
  return prepared;
}

// A head run's streamed mat-vec on this device (linear_8da4w_mv.comp / linear_q4w_mv.comp, whose
// VKLLM_MV_NORM variants it runs; off: the run is not taken), as prep_linear would plan it.
MatvecPlan head_matvec(const Program& p, const Match& m, const DeviceInfo& dev) {
  const Op& l = *m.mv[0];
  const int64_t K = p.tensors[l.inputs[0]].shape.back(), N = p.tensors[l.inputs[1]].shape[0],
                G = l.attrs["group"].get<int64_t>();
  if (m.pat->linear == kQ4w) return plan_matvec(dev, K, N, G, {1, 0}, true);
  const DecodeSplit split = decode_split(dev, K, N);
  return split.parts == 1 ? plan_matvec(dev, K, N, G, split) : MatvecPlan{};
}

// A head run: linear_8da4w_mv_norm (linear_q4w_mv_norm) over the lm_head's row chunks, each
// workgroup normalizing (and quantizing) the residual's row itself as rms_norm (rms_norm_quant)
// stores it, so the logits are the unfused ops' bits.
std::unique_ptr<PreparedOp> prepare_head(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  const Op& l = *m.mv[0];
  Ctx c{env, l, p};
  const int64_t K = c.width(m.x), N = p.tensors[l.inputs[1]].shape[0],
                G = l.attrs["group"].get<int64_t>();
  const bool q4w = m.pat->linear == kQ4w;
  const MatvecPlan mv = head_matvec(p, m, env.ctx.info());
  c.need(mv.on, "the head run's mat-vec is not streamed");
  const bool x16 = c.f16(m.x), y16 = c.f16(m.y), h16 = c.f16(m.norm->outputs[0]);
  std::vector<uint32_t> spec = mv.spec(y16, x16);
  spec[13] = h16 ? 1u : 0u;  // (H16)
  const Kernel& k = env.kernels.get(
      std::string(q4w ? "linear_q4w_mv_norm" : "linear_8da4w_mv_norm") +
          (!q4w && env.ctx.use_int_dot() ? "_idot" : "") + (x16 || y16 || h16 ? "_f16" : ""),
      q4w ? 5 : 6, 32, spec);
  const float eps = m.norm->attrs.value("eps", 1e-6f);
  // (int4 weight-only: nibbles and scales; linear_8da4w also the weight sums)
  std::vector<uint64_t> rb = {static_cast<uint64_t>(K / 2), static_cast<uint64_t>(K / G) * 4};
  if (!q4w) rb.push_back(static_cast<uint64_t>(K / G) * 4);
  struct Dispatch {
    VkDescriptorSet set;
    std::vector<uint32_t> push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  const uint32_t sg = std::max<uint32_t>(1, env.ctx.info().subgroup_size);
  for (const RowChunk& ch : row_chunks(c, N, rb)) {
    // linear_8da4w_mv_norm: x, norm weight, nibbles, scales, weight sums, y;
    // linear_q4w_mv_norm: x, nibbles, scales, y, norm weight.
    const std::vector<BufRange> r =
        q4w ? std::vector<BufRange>{c.whole(m.x), chunk_range(c, l.inputs[1], rb[0], ch),
                                    chunk_range(c, l.inputs[2], rb[1], ch), c.whole(m.y),
                                    c.whole(m.norm->inputs[1])}
            : std::vector<BufRange>{c.whole(m.x),
                                    c.whole(m.norm->inputs[1]),
                                    chunk_range(c, l.inputs[1], rb[0], ch),
                                    chunk_range(c, l.inputs[2], rb[1], ch),
                                    chunk_range(c, l.inputs[3], rb[2], ch),
                                    c.whole(m.y)};
    ds.push_back({env.kernels.make_set(k, r),
                  {u32(K), u32(ch.rows), u32(ch.r0), u32(N), 1u, u32(G), 0u, fbits(eps)},
                  mv.grid(u32(ch.rows), sg)});
  }
  auto prepared = std::make_unique<PreparedOp>(
      [ds, &k](VkCommandBuffer cb, int) {
        for (const Dispatch& d : ds) dispatch_flat(cb, k, d.set, d.push, d.groups);
      },
      nullptr);
  prepared->phases = {{{c.buf(m.x)}, {c.buf(m.y)}}};
  return prepared;
}

std::unique_ptr<PreparedOp> prepare(OpEnv& env, const Match& m, bool quantize_out) {
  if (m.pat->kind == Kind::PrefillAttention) return prepare_prefill_attention(env, m);
  if (m.pat->kind == Kind::Attention) return prepare_attention(env, m, quantize_out);
  if (m.pat->kind == Kind::Tail) return prepare_tail(env, m);
  if (m.pat->kind == Kind::Head) return prepare_head(env, m);
  const Program& p = env.program;
  Ctx c{env, *m.mv[0], p};
  c.need(m.pat->linear != kQ4w, "int4 weight-only runs fuse only as decode chain stages");
  const bool f16x = c.f16(m.x);
  // The mat-vecs' own outputs (Epi::Add, Swiglu: rounded as the unfused ops store them) and the
  // norm's output dtype (the prologue rounds the normalized row as rms_norm stores it).
  const bool h16 = m.norm && c.f16(m.norm->outputs[0]), o16 = c.f16(m.mv[0]->outputs[0]);
  struct Dispatch {
    VkDescriptorSet set;
    std::vector<uint32_t> push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  const Kernel* kern = nullptr;
  std::vector<VkBuffer> writes;
  const int outs = m.pat->epi == Epi::Store ? m.pat->matvecs : 1;
  for (int i = 0; i < outs; ++i) {
    const Op& l = *m.mv[i];
    const int32_t y = m.pat->epi == Epi::Store ? l.outputs[0] : m.y;
    const int64_t K = c.width(m.x), N = p.tensors[l.inputs[1]].shape[0];
    const int64_t G = l.attrs["group"].get<int64_t>();
    c.need(c.width(l.inputs[0]) == K && c.width(l.outputs[0]) == N, "fused mat-vec shape");
    const bool y16 = c.f16(y), r16 = m.residual >= 0 && c.f16(m.residual);
    const Tuning tn = tuning(env.ctx, K, N);
    const std::vector<uint32_t> spec = {f16x,
                                        y16,
                                        h16,
                                        o16,
                                        r16,
                                        static_cast<uint32_t>(m.pat->pro),
                                        static_cast<uint32_t>(m.pat->epi),
                                        tn.rps,
                                        tn.bpl,
                                        tn.parts};
    const bool any16 = f16x || y16 || h16 || o16 || r16;
    if (any16 && !env.ctx.use_fp16()) c.need(false, "fp16 tensors need 16-bit storage");
    const std::string name = std::string("linear_8da4w_fused") +
                             (env.ctx.use_int_dot() ? "_idot" : "") + (any16 ? "_f16" : "");
    kern = &env.kernels.get(name, 10, 6 * 4, spec);
    const std::vector<uint64_t> rb = {static_cast<uint64_t>(K / 2),
                                      static_cast<uint64_t>(K / G) * 4,
                                      static_cast<uint64_t>(K / G) * 4};
    const Op& up = m.pat->epi == Epi::Swiglu ? *m.mv[1] : l;
    const float eps = m.norm ? m.norm->attrs.value("eps", 1e-6f) : 0.0f;
    for (const RowChunk& ch : row_chunks(c, N, rb)) {
      std::vector<BufRange> r = {c.whole(m.x), m.norm ? c.whole(m.norm->inputs[1]) : c.whole(m.x)};
      for (const Op* w : {&l, &up})
        for (int b = 0; b < 3; ++b) r.push_back(chunk_range(c, w->inputs[1 + b], rb[b], ch));
      r.push_back(c.whole(y));
      r.push_back(m.residual >= 0 ? c.whole(m.residual) : c.whole(m.x));
      ds.push_back({env.kernels.make_set(*kern, r),
                    {u32(K), u32(ch.rows), u32(ch.r0), u32(G), 0, fbits(eps)},
                    std::min(tn.max_groups, ceil_div(ch.rows, tn.rps * tn.subgroups))});
    }
    writes.push_back(c.buf(y));
  }
  const Kernel& k = *kern;
  auto prepared = std::make_unique<PreparedOp>(
      [ds, &k](VkCommandBuffer cb, int) {
        for (const Dispatch& d : ds) dispatch_flat(cb, k, d.set, d.push, d.groups);
      },
      nullptr);
  std::vector<VkBuffer> reads = {c.buf(m.x)};
  if (m.residual >= 0) reads.push_back(c.buf(m.residual));
  prepared->phases = {{reads, writes}};
  return prepared;
}

// Chain runs (linear_8da4w_chain.comp). A stage's input row is at most 8,192 values, a normalized
// one at most 4,096 (the prologue's registers); at most three mat-vecs.
constexpr uint32_t kChainWords = 48;  // the stage table's record (linear_8da4w_chain.comp SREC)
constexpr int64_t kChainMaxK = 8192, kChainMaxNormK = 4096;
// VKLLM_CHAIN_CLOCK: slots (chain stages timed; Phi-4-mini has 129) and phases a slot
// (linear_8da4w_chain.comp CLK_PHASES), 64-bit sums each.
constexpr uint32_t kClockSlots = 512, kClockPhases = 8;
// A stage's rows at most: wider mat-vecs (the lm_head, 128-200K rows) are faster unfused, one
// subgroup a row (docs/perf.md, session 12: 159K SM cycles of rows in the chain at 264
// workgroups, 78 us unfused).
constexpr int64_t kChainMaxRows = 32768;
// The chain kernel's float row (xv: 9 K / 32 vec4s for the widest norm or q4w stage).
uint32_t chain_xv(int64_t K) {
  return std::max<uint32_t>(1, static_cast<uint32_t>(K / 32 * 9));
}
// The chain kernel's shared memory, as linear_8da4w_chain.comp declares it: the float row (xv
// vec4s); the stage records, reductions and merge weights (2,180 bytes) and the clock's (224);
// the int8 row and its block sums (9 KiB, compiled out of chains without int8 stages: INT8); and
// an attention stage's tile sums, softmax weights and q / k / v rows, and the merge's chunk of 8
// splits (hd: the stages' head dim; 0: no attention stage, its arrays compiled out), rounded up.
uint64_t chain_shared(uint32_t xv, int64_t hd, bool int8) {
  const uint64_t att = hd > 0 ? 4352 + 52 * uint64_t(hd) : 1024;
  return 16 * uint64_t(xv) + 2180 + 224 + (int8 ? 9216 : 0) + att + 64;
}
// A chain workgroup's threads: 512, one workgroup an SM, so that an SM runs each stage's prologue
// once (measured 3-5% faster on the H200 than two 256-thread workgroups an SM, docs/perf.md
// session 18); VKLLM_CHAIN_WG=256 picks the 256-thread variants (measurement, and the fusion
// case table).
uint32_t chain_wg() {
  return env_int("VKLLM_CHAIN_WG") == 256 ? 256 : 512;
}

// Decode attention as a chain stage, on by default where the chain has the shared memory for it
// and a thread holds at most 32 registers of a tile's key or value words (attention_split.glsl:
// ATT_NWK + ATT_NWV words in a 256-thread workgroup, the larger of the two in a 512-thread one,
// whose second half takes the values). Measured on the H200 (docs/perf.md, session 23, tg128):
// Llama-3.2-1B +4.3%, Qwen3 +8.0%, Phi-4-mini +2.5% with the halves (fp32 caches at head dim 128:
// 32 registers; -1.5% with both arrays in each thread, 64). VKLLM_CHAIN_ATT=0: never, 1: wherever
// it fits (measurement switches).
int att_tile_registers(int64_t hd, bool c16) {
  const bool wide = c16 ? hd % 16 == 0 : hd % 8 == 0;
  const int64_t vpw = (c16 ? 2 : 1) * (wide ? 2 : 1), nwk = hd / 4 / vpw, kq = 256 / (hd / vpw);
  const int64_t nwv = (64 + kq - 1) / kq;
  return static_cast<int>(2 * (chain_wg() >= 512 ? std::max(nwk, nwv) : nwk + nwv));
}
bool chain_attention(int64_t hd, bool c16) {
  return env_switch("VKLLM_CHAIN_ATT", att_tile_registers(hd, c16) <= 32 ? 1 : 0) == 1;
}
bool chainable(const Program& p, const Match& m, uint32_t max_shared) {
  if (m.pat->kind == Kind::Head) return false;  // (its own streamed dispatch)
  const int64_t K = p.tensors[m.x].shape.back();
  if (K > kChainMaxK || K % 32 != 0 || m.mv.empty() || m.mv.size() > 3) return false;
  // A q4w stage's float row must fit the device's shared memory (the H200's 48 KiB holds 8,192
  // values; lavapipe's 32 KiB 4,096).
  if (m.pat->linear == kQ4w && chain_shared(chain_xv(K), 0, false) > max_shared) return false;
  int64_t rows = 0;
  for (const Op* l : m.mv) rows += p.tensors[l->inputs[1]].shape[0];
  if (rows > kChainMaxRows) return false;
  // VKLLM_CHAIN_MAXK=n: only stages of inputs up to n wide (measurement: the kernel's register
  // budget follows its widest stage).
  if (const int maxk = env_int("VKLLM_CHAIN_MAXK"); maxk > 0 && K > maxk) return false;
  return K <= kChainMaxNormK || m.pat->pro != Pro::Norm;
}

// Two batches of units in flight a subgroup (linear_8da4w_chain.comp PIPE): a batch's loads are
// issued before the batch before it is summed. Measured on the H200 (docs/perf.md, session 21):
// two batches of 2 units +2.5-4% over one batch of 4 (the previous default), two batches of 4
// slower. VKLLM_CHAIN_PIPE=0: one batch (measurement).
uint32_t chain_pipe() {
  return env_switch("VKLLM_CHAIN_PIPE", 1);
}

// 32-weight blocks a lane in a chain unit (linear_8da4w_chain.comp UB). Measured on the H200
// (docs/perf.md, session 23): two blocks a unit make int4 weight-only chains 12% faster and 8da4w
// chains 10-15% slower (their row loop holds the int8 row's words too), so q4w chains take 2 and
// the others 1. VKLLM_CHAIN_UB=1|2 overrides (measurement, and the fusion case table).
uint32_t chain_ub(bool q4w) {
  if (const int u = env_int("VKLLM_CHAIN_UB"); u == 1 || u == 2) return static_cast<uint32_t>(u);
  return q4w ? 2 : 1;
}

// Units in a batch: four blocks a lane in flight, in two batches of 2 one-block units (or 1
// two-block unit) or one batch of 4 (docs/perf.md, sessions 11 and 21). VKLLM_CHAIN_DEPTH=n
// overrides (measurement).
uint32_t chain_depth(uint32_t ub) {
  if (const int d = env_int("VKLLM_CHAIN_DEPTH"); d > 0)
    return static_cast<uint32_t>(std::min(d, 64));
  return (chain_pipe() ? 2 : 4) / ub;
}

// VKLLM_CHAIN_MEASURE=noload: the chain sums made-up weights instead of loading them (a
// measurement switch for the clock; the output is wrong).
uint32_t chain_measure() {
  const char* m = std::getenv("VKLLM_CHAIN_MEASURE");
  return m && std::string(m) == "noload" ? 1 : 0;
}

// VKLLM_CHAIN_SPECIALIZE=0: one row loop for every epilogue instead of one compiled for each
// (measurement).
uint32_t chain_specialize() {
  return env_switch("VKLLM_CHAIN_SPECIALIZE", 1);
}

// How rows are dealt to subgroups (linear_8da4w_chain.comp DEAL): 1 deals neighbouring rows to
// different workgroups, so that a stage's rows past the grid's first round spread over every SM.
// Measured on the H200 (docs/perf.md, session 24, with attention stages and the norm weight loaded
// before the sync): tg128 +1.0% Phi-4-mini, +0.4% Llama-3.2-1B, +1.3% Qwen3 (int4 weight-only
// chains: +0.7%, session 23). VKLLM_CHAIN_DEAL=0|1 overrides (measurement).
uint32_t chain_deal() {
  return env_switch("VKLLM_CHAIN_DEAL", 1);
}

// The grid sync between two chain stages in two halves (linear_8da4w_chain.comp SPLIT_SYNC): a
// workgroup arrives when its rows are done and sets up the next stage before it waits. Measured on
// the H200 (docs/perf.md, session 25): tg128 +3.1% Phi-4-mini, +3.0% Llama-3.2-1B, +0.4% Qwen3
// with 8da4w stages, -7% with q4w stages, so chains with q4w stages keep the whole sync.
// VKLLM_CHAIN_SPLIT_SYNC=0|1 overrides (measurement).
uint32_t chain_split_sync(bool q4w) {
  return env_switch("VKLLM_CHAIN_SPLIT_SYNC", q4w ? 0 : 1);
}

// One persistent dispatch for the chain's stages: the stage table with the buffers' device
// addresses.
std::unique_ptr<PreparedOp> prepare_chain(OpEnv& env, const std::vector<Match>& stages) {
  const Program& p = env.program;
  Context& ctx = env.ctx;
  Ctx c{env, stages.front().attn ? *stages.front().attn : *stages.front().mv[0], p};
  const uint32_t groups = chain_groups(ctx.info());
  c.need(groups > 0 && ctx.use_buffer_address(), "decode chains need a resident grid");
  const uint32_t sg = std::max<uint32_t>(1, ctx.info().subgroup_size);
  auto addr = [&](int32_t t) { return ctx.address(c.buf(t)); };
  std::vector<uint32_t> table(stages.size() * kChainWords, 0);
  auto put = [&](size_t at, uint64_t a) {
    table[at] = static_cast<uint32_t>(a);
    table[at + 1] = static_cast<uint32_t>(a >> 32);
  };
  bool any16 = false, any_q4w = false, all_q4w = true, any_int8 = false;
  uint32_t xv = chain_xv(0);           // the float row's vec4s (linear_8da4w_chain.comp XV)
  uint32_t att_hd = 0, att_flags = 0;  // the attention stages' (linear_8da4w_chain.comp ATT_HD)
  std::vector<VkBuffer> reads, writes;
  auto clock_slot = [&](size_t at, const std::string& what) {
    table[at + kChainWords - 1] = 0xFFFFFFFFu;  // the clock's slot (none)
    if (ctx.chain_clock() && env.chain_clock.slots.size() < kClockSlots) {
      table[at + kChainWords - 1] = u32(static_cast<int64_t>(env.chain_clock.slots.size()));
      env.chain_clock.slots.push_back(what);
    }
  };
  for (size_t i = 0; i < stages.size(); ++i) {
    const Match& m = stages[i];
    const size_t at = i * kChainWords;
    if (m.attn) {  // an attention stage: attention_decode.glsl's items (pro 3, no rows)
      const AttentionSetup a = attention_setup(env, m);
      const uint32_t fl = a.flags(m);
      c.need(att_hd == 0 || (att_hd == u32(a.hd) && att_flags == fl),
             "a chain's attention stages share one head dim and dtypes");
      att_hd = u32(a.hd);
      att_flags = fl;
      any16 = any16 || (fl & 31u) != 0;
      const auto& I = m.attn->inputs;
      auto range = [&](const BufRange& r) { return ctx.address(r.buf) + r.offset; };
      table[at + 0] = 32;
      table[at + 1] = 32;
      table[at + 2] = 3;
      put(at + 8, addr(m.q));
      put(at + 10, addr(m.k));
      put(at + 12, addr(I[2]));
      put(at + 14, addr(I[3]));
      put(at + 16, addr(I[4]));
      put(at + 18, addr(m.y));
      put(at + 20, ctx.address(env.attn_part.buf));
      put(at + 22, ctx.address(env.attn_counter.buf));
      put(at + 24, ctx.address(env.step.buf));
      put(at + 26, range(a.table));
      put(at + 28, range(a.nq));
      put(at + 30, range(a.nk));
      const uint32_t words[] = {u32(a.H), u32(a.Hkv),     a.S,           a.C,          a.R, a.orig,
                                a.ctx,    fbits(a.scale), fbits(a.qeps), fbits(a.keps)};
      std::copy(std::begin(words), std::end(words),
                table.begin() + static_cast<std::ptrdiff_t>(at + 32));
      const VkBuffer kc = c.buf(I[3]), vc = c.buf(I[4]);
      reads.insert(reads.end(), {c.buf(m.q), c.buf(m.k), c.buf(I[2]), kc, vc, env.attn_part.buf,
                                 env.step.buf, a.table.buf, a.nq.buf, a.nk.buf});
      writes.insert(writes.end(), {kc, vc, c.buf(m.y), env.attn_part.buf, env.attn_counter.buf});
      clock_slot(at, fmt::format("{} {} heads ({}/{})", m.pat->name, a.H, i + 1, stages.size()));
      continue;
    }
    const int64_t K = c.width(m.x), G = m.mv[0]->attrs["group"].get<int64_t>();
    const bool q4w = m.pat->linear == kQ4w;
    all_q4w = all_q4w && q4w;
    any_int8 = any_int8 || !q4w;
    const DecodeSplit split = decode_split(ctx, K, p.tensors[m.mv[0]->inputs[1]].shape[0]);
    c.need(q4w || split.parts == 1,
           "decode chains sum each row in one part (VKLLM_MATVEC_PARTS unset)");
    if (q4w || m.norm) xv = std::max(xv, chain_xv(K));
    any_q4w = any_q4w || q4w;
    const int64_t bpg = G / 32;
    c.need(G % 32 == 0 && bpg <= sg && (bpg & (bpg - 1)) == 0,
           "a chain stage's groups fit a subgroup in a power of two of blocks");
    const bool add = m.pat->epi == Epi::Add;
    uint32_t flags = 0;
    auto flag = [&](bool on, uint32_t bit) {
      if (on) {
        flags |= bit;
        any16 = true;
      }
    };
    flag(c.f16(m.x), 1);
    if (q4w) flags |= 128;
    if (m.norm) flag(c.f16(m.norm->outputs[0]), 2);
    flag(c.f16(m.mv[0]->outputs[0]), 4);
    if (add) flag(c.f16(m.residual), 8);
    const int outs = m.pat->epi == Epi::Store ? static_cast<int>(m.mv.size()) : 1;
    uint32_t rows = 0;
    for (size_t k = 0; k < m.mv.size(); ++k) {
      const Op& l = *m.mv[k];
      const int64_t N = p.tensors[l.inputs[1]].shape[0];
      c.need(c.width(l.inputs[0]) == K && l.attrs["group"].get<int64_t>() == G,
             "a chain stage's mat-vecs share one input and group size");
      const size_t mat = at + 16 + 10 * k;
      table[mat] = u32(N);
      put(mat + 2, addr(l.inputs[1]));
      put(mat + 4, addr(l.inputs[2]));
      put(mat + 6, addr(l.inputs[q4w ? 2 : 3]));  // (a q4w stage has no weight sums)
      const int32_t y = static_cast<int>(k) < outs && m.pat->epi == Epi::Store ? l.outputs[0] : m.y;
      put(mat + 8, addr(y));
      if (static_cast<int>(k) < outs) {
        flag(c.f16(y), 16u << k);
        writes.push_back(c.buf(y));
        rows += u32(N);
      }
    }
    clock_slot(at, fmt::format("{} {}<-{} ({}/{})", m.pat->name, rows, K, i + 1, stages.size()));
    table[at + 0] = u32(K);
    table[at + 1] = u32(G);
    table[at + 2] = static_cast<uint32_t>(m.pat->pro);
    table[at + 3] = static_cast<uint32_t>(m.pat->epi);
    table[at + 4] = u32(m.mv.size());
    table[at + 5] = flags;
    table[at + 6] = fbits(m.norm ? m.norm->attrs.value("eps", 1e-6f) : 0.0f);
    table[at + 7] = rows;
    put(at + 8, addr(m.x));
    reads.push_back(c.buf(m.x));
    put(at + 10, m.norm ? addr(m.norm->inputs[1]) : addr(m.x));
    put(at + 12, add ? addr(m.residual) : addr(m.x));
    if (add) reads.push_back(c.buf(m.residual));
  }
  if (any16 && !ctx.use_fp16()) c.need(false, "fp16 tensors need 16-bit storage");
  if (!env.chain_sync.buf) {
    env.chain_sync = env.alloc.create(16, false, "decode chain grid-sync counters");
    env.alloc.fill(env.chain_sync, 0);
  }
  Buffer tab = env.alloc.create(table.size() * 4, false, "decode chain stage table");
  env.alloc.upload(tab, 0, table.data(), table.size() * 4);
  const bool clock = ctx.chain_clock();
  if (clock && !env.chain_clock.buf.buf) {
    env.chain_clock.groups = groups;
    env.chain_clock.buf = env.alloc.create(uint64_t(kClockSlots) * groups * kClockPhases * 8, false,
                                           "decode chain clock");
    env.alloc.fill(env.chain_clock.buf, 0);
  }
  const std::string name = std::string("linear_8da4w_chain") + (ctx.use_int_dot() ? "_idot" : "") +
                           (clock ? "_clock" : "") + (chain_wg() == 512 ? "_w512" : "") +
                           (any16 ? "_f16" : "");
  const uint32_t ub = chain_ub(all_q4w);
  const Kernel& k =
      env.kernels.get(name, clock ? 3 : 2, 4,
                      {chain_depth(ub), grid_spin_limit(ctx.info()), chain_measure(),
                       chain_specialize(), xv, any_q4w ? 1u : 0u, chain_pipe(), chain_deal(), ub,
                       att_hd, att_flags, chain_split_sync(any_q4w), any_int8 ? 1u : 0u});
  std::vector<BufRange> r = {{env.chain_sync.buf, 0, env.chain_sync.size}, {tab.buf, 0, tab.size}};
  if (clock) r.push_back({env.chain_clock.buf.buf, 0, env.chain_clock.buf.size});
  VkDescriptorSet set = env.kernels.make_set(k, r);
  const uint32_t n = u32(static_cast<int64_t>(stages.size()));
  auto prepared = std::make_unique<PreparedOp>(
      [set, &k, n, groups](VkCommandBuffer cb, int) { dispatch_flat(cb, k, set, {n}, groups); },
      nullptr);
  writes.push_back(env.chain_sync.buf);
  if (clock) writes.push_back(env.chain_clock.buf.buf);
  prepared->phases = {{reads, writes}};
  return prepared;
}

// VKLLM_NO_FUSE=a,b: patterns whose names contain a or b are not used (measurement);
// VKLLM_FUSE=all: the patterns off by default are used too.
bool disabled(const Pattern& pat, bool chain) {
  if (pat.linear == kQ4w && pat.kind == Kind::Matvec && !chain) return true;  // chain stages only
  const char* all = std::getenv("VKLLM_FUSE");
  // Mat-vec runs are on where they chain (one persistent dispatch for consecutive runs).
  if (!pat.by_default && !(all && std::string(all) == "all") &&
      !(chain && pat.kind == Kind::Matvec))
    return true;
  const char* v = std::getenv("VKLLM_NO_FUSE");
  if (!v) return false;
  std::string list = v;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string part = list.substr(at, end - at);
    if (!part.empty() && std::string(pat.name).find(part) != std::string::npos) return true;
    at = end + 1;
  }
  return false;
}

// The match of a run found earlier (by its pattern's name), again: the preparation needs the ops.
std::optional<Match> rematch(const Matcher& matcher, const FusedRun& run,
                             const std::string& unfused) {
  for (std::span<const Pattern> table :
       {std::span<const Pattern>(kPatterns), std::span<const Pattern>(kPrefillPatterns)})
    for (const Pattern& pat : table)
      if (pat.name == run.pattern)
        if (auto m = matcher.at(run.first, pat, unfused); m && m->last == run.last) return m;
  return std::nullopt;
}

}  // namespace

void print_chain_clock(Allocator& alloc, const ChainClock& clock) {
  if (!clock.buf.buf || clock.slots.empty()) return;
  const size_t per = size_t(clock.groups) * kClockPhases;
  std::vector<uint64_t> sums(clock.slots.size() * per);
  alloc.download(clock.buf, 0, sums.data(), sums.size() * 8);
  // Rows: the stages of one pattern, width and place in a chain, over every layer's chain.
  struct Row {
    int stages = 0;
    std::array<double, kClockPhases - 1> mean{}, worst{};  // cycles a workgroup and stage
  };
  std::map<std::string, Row> rows;
  for (size_t s = 0; s < clock.slots.size(); ++s) {
    Row& row = rows[clock.slots[s]];
    ++row.stages;
    for (uint32_t ph = 0; ph + 1 < kClockPhases; ++ph) {
      double total = 0, worst = 0, n = 0;
      for (uint32_t g = 0; g < clock.groups; ++g) {
        const uint64_t* w = &sums[s * per + size_t(g) * kClockPhases];
        const uint64_t n_samples = w[kClockPhases - 1];
        if (!n_samples) continue;
        const double v = static_cast<double>(w[ph]) / static_cast<double>(n_samples);
        total += v;
        worst = std::max(worst, v);
        ++n;
      }
      row.mean[ph] += n ? total / n : 0;
      row.worst[ph] += worst;
    }
  }
  std::fprintf(stderr,
               "vkllm: decode chain clock, SM cycles a stage (mean over workgroups / slowest "
               "workgroup), averaged over the stages of a row:\n  %-46s %4s %13s %13s %13s %13s "
               "%13s %13s %13s\n",
               "stage (rows<-K, place in chain)", "n", "setup", "sync", "pro: load", "pro: scale",
               "pro: codes", "rows sg0", "rows wg");
  for (const auto& [key, row] : rows) {
    std::fprintf(stderr, "  %-46s %4d", key.c_str(), row.stages);
    for (uint32_t ph = 0; ph + 1 < kClockPhases; ++ph)
      std::fprintf(stderr, " %6.0f/%6.0f", row.mean[ph] / row.stages, row.worst[ph] / row.stages);
    std::fprintf(stderr, "\n");
  }
}

uint32_t chain_groups(const DeviceInfo& dev) {
  // By default 512 threads an SM on GPUs whose driver reports its SMs (NVIDIA's SM builtins):
  // measured faster than the step without chains on the H200 (docs/perf.md, sessions 12 and 18),
  // and the kernel's registers (95-126 a thread) let an SM hold them. Elsewhere off
  // unless asked for (VKLLM_CHAIN_GROUPS=n, -1 for one an SM or CU): on lavapipe two or more
  // workgroups disagree with the CPU (cause open, docs/perf.md). A grid that turns out not to be
  // resident fails the decode with one line (the executor reads the grid sync's error flag).
  // (Chains sum each row in one part: VKLLM_MATVEC_PARTS, a measurement switch, turns them off.)
  if (!dev.buffer_address || env_flag("VKLLM_NO_CHAIN") || std::getenv("VKLLM_MATVEC_PARTS"))
    return 0;
  const char* e = std::getenv("VKLLM_CHAIN_GROUPS");
  if (!e) return dev.sm_builtins ? 512 / chain_wg() * dev.compute_units : 0;
  const int g = std::atoi(e);
  return g < 0 ? dev.compute_units : static_cast<uint32_t>(std::min(g, 65535));
}

int chain_attention_until(const Program& p, const DeviceInfo& dev) {
  if (const char* e = std::getenv("VKLLM_CHAIN_ATT_UNTIL")) return std::max(0, std::atoi(e));
  // A step has H (pos / C + 1) attention items (attention_splits' C keys a split). The stage is
  // taken while they fill at most three quarters of the grid: on the H200 (docs/perf.md, session
  // 24: the two plans' tg128 of positions d .. d + 128) it won at positions 1-129 (up to 72
  // items for Phi-4-mini, 96 for Llama-3.2-1B) and Qwen3's 256-384 (80-112) and lost from 120
  // items (Phi-4-mini at 256-384, inside one round of the 132 workgroups).
  const uint64_t groups = chain_groups(dev);
  for (const Op& op : p.ops)
    if (op.family == "attention") {
      const uint64_t H = u32(std::max<int64_t>(1, op.attrs["n_heads"].get<int64_t>()));
      const uint64_t C = attention_split_keys(p.max_ctx);
      return static_cast<int>(std::min<uint64_t>(C * (3 * groups / (4 * H)), INT32_MAX));
    }
  return 0;
}

std::vector<FusedRun> find_fused_runs(const Program& p, const std::string& unfused_family,
                                      const DeviceInfo& dev, bool attention_stages) {
  Matcher matcher(p, dev.subgroup_min);
  const bool chain = chain_groups(dev) > 0;
  std::vector<FusedRun> runs;
  for (size_t k = 0; k < p.ops.size();) {
    std::optional<Match> m;
    for (const Pattern& pat : kPatterns)
      if (!disabled(pat, chain) && (pat.kind != Kind::Tail || dev.max_shared >= kTailShared) &&
          (m = matcher.at(k, pat, unfused_family))) {
        // A mat-vec run that is on only to be a chain's stage stays unfused where it cannot be;
        // a head run where its mat-vec is not streamed.
        if ((chain && pat.kind == Kind::Matvec && disabled(pat, false) &&
             !chainable(p, *m, dev.max_shared)) ||
            (pat.kind == Kind::Head && !head_matvec(p, *m, dev).on)) {
          m.reset();
          continue;
        }
        break;
      }
    if (!m) {
      ++k;
      continue;
    }
    runs.push_back({m->first, m->last, m->pat->name,
                    m->pat->kind == Kind::Matvec || m->pat->kind == Kind::Head,
                    m->pat->kind == Kind::Tail});
    k = m->last + 1;
  }
  // The unfused ops share state a run does not produce, so some ops fuse together or not at all:
  // - an add that forwards of several tokens leave to the next norm (rms_norm_add) must be fused
  //   with that norm here too, or computed by a run's epilogue: a norm run needs the add before it
  //   covered by a run, and a run ending in such an add needs the norm's run after it;
  // - the linear_8da4w readers of one tensor share one int8 scratch, written by the first of them
  //   or by the norm that produces the tensor: all of them (and that norm) are in runs, or none.
  //   (Mat-vec runs derive the int8 row privately; tail and attention runs write the scratch as
  //   the unfused ops do, so only mat-vec runs count here.)
  std::vector<int> covered(p.ops.size(), 0);
  auto cover = [&] {
    std::fill(covered.begin(), covered.end(), 0);
    for (const FusedRun& r : runs)
      if (r.private_scratch)
        for (size_t k = r.first; k <= r.last; ++k) covered[k] = 1;
  };
  std::vector<std::vector<size_t>> scratch_groups;
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    std::vector<size_t> g;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& o = p.ops[k];
      if (o.family == "linear_8da4w" && !o.inputs.empty() && o.inputs[0] == int32_t(t))
        g.push_back(k);
      if (o.family == "rms_norm" && !o.outputs.empty() && o.outputs[0] == int32_t(t))
        g.push_back(k);
    }
    if (g.size() > 1) scratch_groups.push_back(g);
  }
  for (bool changed = true; changed;) {
    changed = false;
    cover();
    for (const auto& g : scratch_groups) {
      size_t n = 0;
      for (size_t k : g) n += covered[k];
      if (n == 0 || n == g.size()) continue;
      for (size_t i = 0; i < runs.size() && !changed; ++i)
        for (size_t k : g)
          if (runs[i].private_scratch && k >= runs[i].first && k <= runs[i].last) {
            runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
            changed = true;
            break;
          }
      if (changed) break;
    }
    if (changed) continue;
    for (size_t i = 0; i < runs.size(); ++i) {
      const size_t a = runs[i].first;
      const bool add_before = a > 0 && fuses_into_next(p, a - 1);
      const bool covered_before = i > 0 && runs[i - 1].last == a - 1;
      const bool add_last = fuses_into_next(p, runs[i].last);
      const bool covered_after = i + 1 < runs.size() && runs[i + 1].first == runs[i].last + 1;
      if ((add_before && !covered_before) || (add_last && !covered_after)) {
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
        break;
      }
    }
  }
  // An attention run quantizes its output when a tail run reads it right after.
  for (size_t i = 0; i + 1 < runs.size(); ++i)
    runs[i].quantize_out = runs[i + 1].tail && runs[i + 1].first == runs[i].last + 1;
  if (!chain) return runs;
  // Chains: every mat-vec run the chain kernel can take becomes a stage, consecutive ones (the
  // ops of one directly after the other's) of one chain.
  std::vector<FusedRun> out;
  // VKLLM_CHAIN_STAGES=n: at most n stages a chain (measurement).
  const size_t max_stages =
      env_int("VKLLM_CHAIN_STAGES") > 0 ? env_int("VKLLM_CHAIN_STAGES") : 1024;
  // The widest float row of the mat-vec stages (xv), so that an attention stage is taken only
  // where the kernel's shared memory holds both.
  std::vector<std::optional<Match>> matches;
  uint32_t xv = 1;
  bool int8 = false;  // any int8 stage (its row's shared memory)
  for (const FusedRun& r : runs) {
    matches.push_back(r.tail ? std::nullopt : rematch(matcher, r, unfused_family));
    const std::optional<Match>& m = matches.back();
    if (!r.private_scratch || !m || !chainable(p, *m, dev.max_shared)) continue;
    if (m->norm || m->pat->linear == kQ4w)
      xv = std::max(xv, chain_xv(p.tensors[m->x].shape.back()));
    int8 = int8 || m->pat->linear != kQ4w;
  }
  auto stage = [&](const FusedRun& r, const Match& m) {
    if (!m.attn) return r.private_scratch && chainable(p, m, dev.max_shared);
    const int64_t hd = m.attn->attrs["head_dim"].get<int64_t>();
    const bool c16 = p.tensors[m.attn->inputs[3]].dtype == DType::F16;
    return attention_stages && chain_attention(hd, c16) && !r.quantize_out && hd <= 256 &&
           chain_shared(xv, hd, int8) <= dev.max_shared;
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    FusedRun& r = runs[i];
    const std::optional<Match>& m = matches[i];
    if (!m || !stage(r, *m)) {
      out.push_back(std::move(r));
      continue;
    }
    if (out.empty() || out.back().stages.empty() || out.back().last + 1 != r.first ||
        out.back().stages.size() >= max_stages)
      out.push_back({r.first, r.last, "chain", true, false, false, {}});
    out.back().last = r.last;
    out.back().pattern += (out.back().stages.empty() ? ": " : " | ") + r.pattern;
    out.back().stages.push_back(std::move(r));
  }
  return out;
}

std::vector<FusedRun> find_prefill_runs(const Program& p, const std::string& unfused_family,
                                        const Context& ctx) {
  Matcher matcher(p, ctx.info().subgroup_min);
  std::vector<FusedRun> runs;
  for (size_t k = 0; k < p.ops.size(); ++k)
    for (const Pattern& pat : kPrefillPatterns) {
      if (disabled(pat, false)) continue;
      const std::optional<Match> m = matcher.at(k, pat, unfused_family);
      if (!m) continue;
      // Only where a prefill attention kernel takes the run's shapes and dtypes.
      const int64_t hd = m->attn->attrs["head_dim"].get<int64_t>();
      const bool r16 = p.tensors[m->attn->inputs[0]].dtype == DType::F16,
                 c16 = p.tensors[m->attn->inputs[3]].dtype == DType::F16;
      const PrefillAttention pa = prefill_attention(ctx, static_cast<int>(hd), r16, c16);
      const uint32_t sg = ctx.info().subgroup_size;
      if ((!pa.coopmat && !pa.tiled) || (pat.qk_norm && (sg == 0 || sg > 64))) continue;
      runs.push_back({m->first, m->last, pat.name});
      k = m->last;
      break;
    }
  return runs;
}

std::unique_ptr<PreparedOp> prepare_fused(OpEnv& env, const FusedRun& run,
                                          const std::string& unfused_family) {
  Matcher matcher(env.program, env.ctx.info().subgroup_min);
  if (!run.stages.empty()) {
    std::vector<Match> stages;
    for (const FusedRun& st : run.stages)
      if (auto m = rematch(matcher, st, unfused_family)) stages.push_back(*m);
    if (stages.size() != run.stages.size())
      fail("vulkan backend: chain run at op {} no longer matches", run.first);
    return prepare_chain(env, stages);
  }
  if (auto m = rematch(matcher, run, unfused_family)) return prepare(env, *m, run.quantize_out);
  fail("vulkan backend: fused run {} at op {} no longer matches", run.pattern, run.first);
}

}  // namespace vkllm::vk
