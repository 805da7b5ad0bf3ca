// The fusion planner: which runs of program ops each forward records as one step (vk_fused.h).
// A pure function of the program, the device's capabilities and the tuning; the executor plans
// buffer liveness from its runs before any is prepared.
#include <algorithm>
#include <span>

#include "backend/vulkan/vk_fusion.h"

namespace vkllm::vk {

namespace fusion {

// A head run's streamed mat-vec on this device (linear_8da4w_mv.comp / linear_q4w_mv.comp, whose
// VKLLM_MV_NORM variants it runs; off: the run is not taken), as prep_linear would plan it.
MatvecPlan head_matvec(const Program& p, const Match& m, const DeviceInfo& dev,
                       const Tuning& tune) {
  const Op& l = *m.mv[0];
  const int64_t K = p.tensors[l.inputs[0]].shape.back(), N = p.tensors[l.inputs[1]].shape[0],
                G = l.attrs["group"].get<int64_t>();
  if (m.pat->q4w()) return plan_matvec(dev, tune, K, N, G, {1, 0}, true);
  const DecodeSplit split = decode_split(dev, tune, K, N);
  return split.parts == 1 ? plan_matvec(dev, tune, K, N, G, split) : MatvecPlan{};
}

// Decode attention as a chain stage, on by default where the chain has the shared memory for it
// and a thread holds at most 32 registers of a tile's key or value words (attention_split.glsl:
// ATT_NWK + ATT_NWV words in a 256-thread workgroup, the larger of the two in a 512-thread one,
// whose second half takes the values). Measured on the H200 (tg128):
// Llama-3.2-1B +4.3%, Qwen3 +8.0%, Phi-4-mini +2.5% with the halves (fp32 caches at head dim 128:
// 32 registers; -1.5% with both arrays in each thread, 64). VKLLM_CHAIN_ATT=0: never, 1: wherever
// it fits (measurement switches).
int att_tile_registers(int64_t hd, bool c16, const Tuning& tune) {
  const bool wide = c16 ? hd % 16 == 0 : hd % 8 == 0;
  const int64_t vpw = (c16 ? 2 : 1) * (wide ? 2 : 1), nwk = hd / 4 / vpw, kq = 256 / (hd / vpw);
  const int64_t nwv = (64 + kq - 1) / kq;
  return static_cast<int>(2 * (chain_wg(tune) >= 512 ? std::max(nwk, nwv) : nwk + nwv));
}
bool chain_attention(int64_t hd, bool c16, const Tuning& tune) {
  if (tune.chain_att >= 0) return tune.chain_att == 1;
  return att_tile_registers(hd, c16, tune) <= 32;
}
bool chainable(const Program& p, const Match& m, uint32_t max_shared) {
  if (m.pat->kind == Kind::Head) return false;  // (its own streamed dispatch)
  const int64_t K = p.tensors[m.x].shape.back();
  if (K > kChainMaxK || K % 32 != 0 || m.mv.empty() || m.mv.size() > 3) return false;
  // A q4w stage's float row must fit the device's shared memory (the H200's 48 KiB holds 8,192
  // values; lavapipe's 32 KiB 4,096).
  if (m.pat->q4w() && chain_shared(chain_xv(K), 0, false) > max_shared) return false;
  int64_t rows = 0;
  for (const Op* l : m.mv) rows += p.tensors[l->inputs[1]].shape[0];
  if (rows > kChainMaxRows) return false;
  return K <= kChainMaxNormK || m.pat->pro == Pro::Quant;
}

// Tuning::no_fuse: patterns whose names contain one of its parts are not used (measurement);
// Tuning::fuse_all: the patterns off by default are used too.
bool disabled(const Pattern& pat, bool chain, const Tuning& tune) {
  if (pat.chain_only() && !chain) return true;
  // Mat-vec runs are on where they chain (one persistent dispatch for consecutive runs).
  if (!pat.by_default && !tune.fuse_all && !(chain && pat.kind == Kind::Matvec)) return true;
  for (const std::string& part : tune.no_fuse)
    if (std::string(pat.name).find(part) != std::string::npos) return true;
  return false;
}

std::optional<Match> rematch(const Matcher& matcher, const FusedRun& run,
                             const std::string& unfused) {
  for (std::span<const Pattern> table :
       {std::span<const Pattern>(kPatterns), std::span<const Pattern>(kPrefillPatterns)})
    for (const Pattern& pat : table)
      if (pat.name == run.pattern)
        if (auto m = matcher.at(run.first, pat, unfused); m && m->last == run.last) return m;
  return std::nullopt;
}

}  // namespace fusion

using namespace fusion;

uint32_t chain_groups(const DeviceInfo& dev, const Tuning& tune) {
  // By default 512 threads an SM on GPUs whose driver reports its SMs (NVIDIA's SM builtins):
  // measured faster than the step without chains on the H200 (measured),
  // and the kernel's registers (95-126 a thread) let an SM hold them. Elsewhere off
  // unless asked for (Tuning::chain_groups = n, -1 for one an SM or CU). A grid that turns out not
  // to be resident fails the decode with one line (the executor reads the grid sync's error flag;
  // lavapipe holds a workgroup a thread: docs/portability.md).
  // Chains sum each row in one part: a forced matvec_parts other than 1 turns them off.
  if (!dev.buffer_address || !tune.chain || tune.matvec_parts != 1) return 0;
  if (!tune.chain_groups) return dev.sm_builtins ? 512 / chain_wg(tune) * dev.compute_units : 0;
  const int g = *tune.chain_groups;
  return g < 0 ? dev.compute_units : static_cast<uint32_t>(std::min(g, 65535));
}

int chain_attention_until(const Program& p, const DeviceInfo& dev, const Tuning& tune) {
  if (tune.chain_att_until) return *tune.chain_att_until;
  // A step has H (pos / C + 1) attention items (attention_splits' C keys a split). The stage is
  // taken while they fill at most three quarters of the grid: on the H200 (docs/perf.md, session
  // 24: the two plans' tg128 of positions d .. d + 128) it won at positions 1-129 (up to 72
  // items for Phi-4-mini, 96 for Llama-3.2-1B) and Qwen3's 256-384 (80-112) and lost from 120
  // items (Phi-4-mini at 256-384, inside one round of the 132 workgroups).
  const uint64_t groups = chain_groups(dev, tune);
  for (const Op& op : p.ops)
    if (op.family == "attention") {
      const uint64_t H = u32(std::max<int64_t>(1, op.attrs["n_heads"].get<int64_t>()));
      const uint64_t C = attention_split_keys(p.max_ctx);
      return static_cast<int>(std::min<uint64_t>(C * (3 * groups / (4 * H)), INT32_MAX));
    }
  return 0;
}

std::vector<FusedRun> find_fused_runs(const Program& p, const DeviceInfo& dev, const Tuning& tune,
                                      bool attention_stages, bool paged) {
  const std::string& unfused_family = tune.corrupt_op;
  Matcher matcher(p, dev.subgroup_min, unfused_family);
  const bool chain = chain_groups(dev, tune) > 0;
  std::vector<FusedRun> runs;
  for (size_t k = 0; k < p.ops.size();) {
    std::optional<Match> m;
    for (const Pattern& pat : kPatterns)
      if (!disabled(pat, chain, tune) &&
          (pat.kind != Kind::Tail || dev.max_shared >= kTailShared) &&
          !(paged && (pat.kind == Kind::Attention || pat.kind == Kind::Head)) &&
          (m = matcher.at(k, pat, unfused_family))) {
        // A mat-vec run that is on only to be a chain's stage stays unfused where it cannot be;
        // a head run where its mat-vec is not streamed.
        if ((chain && pat.kind == Kind::Matvec && disabled(pat, false, tune) &&
             !chainable(p, *m, dev.max_shared)) ||
            (pat.kind == Kind::Head && !head_matvec(p, *m, dev, tune).on)) {
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
  //   or by the op that produces the tensor and quantizes it (plan_scratch: a norm, SwiGLU or
  //   GeGLU): all of them (and that producer) are in runs, or none (a chain whose last stage ends
  //   in a SwiGLU, before a down projection too wide for a stage, would leave that projection's
  //   scratch unwritten).
  //   (Mat-vec runs derive the int8 row privately; tail and attention runs write the scratch as
  //   the unfused ops do, so only mat-vec runs count here.)
  std::vector<int> covered(p.ops.size(), 0);
  auto cover = [&] {
    std::fill(covered.begin(), covered.end(), 0);
    for (const FusedRun& r : runs)
      if (r.private_scratch)
        for (size_t k = r.first; k <= r.last; ++k) covered[k] = 1;
  };
  const ScratchPlan scratch = plan_scratch(p);
  std::vector<std::vector<size_t>> scratch_groups;
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    std::vector<size_t> g;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& o = p.ops[k];
      const bool reads =
          o.family == "linear_8da4w" && !o.inputs.empty() && o.inputs[0] == int32_t(t);
      if (reads || scratch.writes[k] == int32_t(t)) g.push_back(k);
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
      const bool add_before = a > 0 && fuses_into_next(p, a - 1, unfused_family);
      const bool covered_before = i > 0 && runs[i - 1].last == a - 1;
      const bool add_last = fuses_into_next(p, runs[i].last, unfused_family);
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
  constexpr size_t max_stages = 1024;
  // The widest float row of the mat-vec stages (xv), so that an attention stage is taken only
  // where the kernel's shared memory holds both.
  std::vector<std::optional<Match>> matches;
  uint32_t xv = 1;
  bool int8 = false;  // any int8 stage (its row's shared memory)
  for (const FusedRun& r : runs) {
    matches.push_back(r.tail ? std::nullopt : rematch(matcher, r, unfused_family));
    const std::optional<Match>& m = matches.back();
    if (!r.private_scratch || !m || !chainable(p, *m, dev.max_shared)) continue;
    if (m->norm || m->pat->q4w()) xv = std::max(xv, chain_xv(p.tensors[m->x].shape.back()));
    int8 = int8 || !m->pat->q4w();
  }
  auto stage = [&](const FusedRun& r, const Match& m) {
    if (!m.attn) return r.private_scratch && chainable(p, m, dev.max_shared);
    const int64_t hd = m.attn->attrs["head_dim"].get<int64_t>();
    const bool c16 = p.tensors[m.attn->inputs[3]].dtype == DType::F16;
    return attention_stages && chain_attention(hd, c16, tune) && !r.quantize_out && hd <= 256 &&
           chain_shared(xv, hd, int8) <= dev.max_shared;
  };
  // The current chain's attention stages' head dim (0: none yet) and flags (attention_flags):
  // another ends it.
  int64_t chain_hd = 0;
  uint32_t chain_flags = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    FusedRun& r = runs[i];
    const std::optional<Match>& m = matches[i];
    if (!m || !stage(r, *m)) {
      out.push_back(std::move(r));
      continue;
    }
    const int64_t hd = m->attn ? m->attn->attrs["head_dim"].get<int64_t>() : 0;
    const uint32_t flags = m->attn ? attention_flags(p, *m) : 0;
    if (out.empty() || out.back().stages.empty() || out.back().last + 1 != r.first ||
        out.back().stages.size() >= max_stages ||
        (hd && chain_hd && (hd != chain_hd || flags != chain_flags))) {
      out.push_back({r.first, r.last, "chain", true, false, false, {}});
      chain_hd = 0;
    }
    if (hd) {
      chain_hd = hd;
      chain_flags = flags;
    }
    out.back().last = r.last;
    out.back().pattern += (out.back().stages.empty() ? ": " : " | ") + r.pattern;
    out.back().stages.push_back(std::move(r));
  }
  return out;
}

std::vector<FusedRun> find_prefill_runs(const Program& p, const Context& ctx, bool batched) {
  const std::string& unfused_family = ctx.tuning().corrupt_op;
  Matcher matcher(p, ctx.info().subgroup_min, unfused_family);
  std::vector<FusedRun> runs;
  for (size_t k = 0; k < p.ops.size(); ++k)
    for (const Pattern& pat : kPrefillPatterns) {
      if (disabled(pat, false, ctx.tuning())) continue;
      const std::optional<Match> m = matcher.at(k, pat, unfused_family);
      if (!m) continue;
      // Only where a prefill attention kernel takes the run's shapes and dtypes.
      const int64_t hd = m->attn->attrs["head_dim"].get<int64_t>();
      const bool r16 = p.tensors[m->attn->inputs[0]].dtype == DType::F16,
                 c16 = p.tensors[m->attn->inputs[3]].dtype == DType::F16;
      const PrefillAttention pa = prefill_attention(ctx, static_cast<int>(hd), r16, c16);
      const uint32_t sg = ctx.info().subgroup_size;
      if ((!batched && !pa.coopmat && !pa.tiled) || (pat.qk_norm && (sg == 0 || sg > 64))) continue;
      // The cooperative-matrix kernel takes no window: there the unfused op runs windowed
      // forwards on the split kernel, and so does the run's attention (unfused).
      if (!batched && pa.coopmat && m->attn->attrs.contains("window")) continue;
      runs.push_back({m->first, m->last, pat.name});
      k = m->last;
      break;
    }
  return runs;
}

}  // namespace vkllm::vk
