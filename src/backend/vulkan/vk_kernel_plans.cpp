// The kernel plans of vk_ops_internal.h that more than one op (and `vkllm bench`) record
// through: the prefill GEMM's tile and chunk, which forwards store their int8 scratch in the
// GEMM's order, and the prefill attention's kernel and shape; which op writes the int8 scratch
// (plan_scratch, vk_ops.h).
#include <algorithm>
#include <optional>

#include "backend/vulkan/vk_ops_internal.h"

namespace vkllm::vk::detail {

// Whether a linear_8da4w of group G and N rows has a tiled GEMM (plan_gemm_8da4w).
bool gemm_shape(int64_t G, int64_t N) {
  return G > 0 && G % 32 == 0 && ceil_div(N, 64) <= 65535;
}

// Whether every linear_8da4w that reads x (as its input) has a tiled GEMM: then, in forwards of
// at least GemmPlan::kTokens tokens, x's int8 scratch is read only by GEMMs, and its quantizer
// stores it in their staged order (quant.glsl's gemm_order). The quantizer and each of its
// readers decide from this one predicate, so they agree.
bool scratch_for_gemm(const Ctx& c, int32_t x) {
  bool any = false;
  for (const Op& o : c.p.ops) {
    if (o.family != "linear_8da4w" || o.inputs.size() < 2 || o.inputs[0] != x) continue;
    const auto g = o.attrs.find("group");
    const std::vector<int64_t>& w = c.decl(o.inputs[1]).shape;
    // (K % G == 0 with G % 32 == 0: the row is whole eight-code spans, as gemm_order needs)
    if (g == o.attrs.end() || !g->is_number_integer() || w.size() != 2 ||
        !gemm_shape(g->get<int64_t>(), w[0]) || w[1] % g->get<int64_t>() != 0)
      return false;
    any = true;
  }
  return any;
}
// The quantizers' push constant for a forward of Tr tokens (1: store in gemm_order).
uint32_t gemm_order(const Context& ctx, bool for_gemm, uint32_t Tr) {
  return for_gemm && Tr >= gemm_from(ctx);
}
uint32_t gemm_from(const Context& ctx) {
  const uint32_t forced = ctx.tuning().gemm_from;
  if (forced && ctx.use_coopmat() && ctx.info().subgroup_size == 32)
    return std::clamp<uint32_t>(forced, 2, GemmPlan::kTokens);
  return GemmPlan::kTokens;
}

// Does the norm's output go only to linear_8da4w ops (as their input), so that the norm can
// quantize it for them?
bool feeds_only(const Ctx& c, int32_t y, std::string_view family) {
  return feeds_only(c.p, y, family);
}
bool feeds_only(const Program& p, int32_t y, std::string_view family) {
  bool any = false;
  for (const Op& o : p.ops)
    for (size_t i = 0; i < o.inputs.size(); ++i)
      if (o.inputs[i] == y) {
        if (o.family != family || i != 0) return false;
        any = true;
      }
  return any;
}
bool feeds_only_8da4w(const Ctx& c, int32_t y) {
  return feeds_only(c, y, "linear_8da4w");
}

}  // namespace vkllm::vk::detail

namespace vkllm::vk {

ScratchPlan plan_scratch(const Program& p) {
  using detail::feeds_only;
  ScratchPlan s;
  int32_t held = -1;
  for (const Op& o : p.ops) {
    const int32_t x = o.inputs.empty() ? -1 : o.inputs[0],
                  y = o.outputs.empty() ? -1 : o.outputs[0];
    const int64_t N = y >= 0 && !p.tensors[y].shape.empty() ? p.tensors[y].shape.back() : 0;
    int32_t w = -1;
    if (o.family == "rms_norm" && o.attrs.value("group", int64_t(0)) == N && N % 4 == 0 &&
        feeds_only(p, y, "linear_8da4w"))
      w = y;
    if ((o.family == "swiglu" || o.family == "geglu") && N % 4 == 0 &&
        feeds_only(p, y, "linear_8da4w"))
      w = y;
    if (o.family == "linear_8da4w" && held != x) w = x;
    s.holds.push_back(held);
    s.writes.push_back(w);
    if (w >= 0) held = w;
  }
  return s;
}

}  // namespace vkllm::vk

namespace vkllm::vk::detail {

GemmPlan plan_gemm_8da4w(const Context& ctx, int64_t G, int64_t N, bool y16) {
  GemmPlan p;
  if (!gemm_shape(G, N)) return p;
  p.kc = G % 128 == 0 ? 128 : G % 64 == 0 ? 64 : 32;
  p.y16 = y16;
  p.coopmat = ctx.use_coopmat();
  p.max_shared = ctx.info().max_shared;
  p.min_tiles = std::max<uint32_t>(1, ctx.info().compute_units);
  const Tuning& tune = ctx.tuning();
  p.force_bt = tune.gemm_tile;
  p.force_bn = tune.gemm_rows;
  p.wide = tune.gemm_wide;
  p.w16 = G <= 128;
  p.ablate = tune.gemm_ablate & 63u;
  p.from = gemm_from(ctx);  // (kTokens without int8 cooperative matrices)
  p.rows_to = p.from < GemmPlan::kTokens ? std::max(tune.gemm_rows_to, GemmPlan::kTokens) : 0;
  if (p.coopmat && ctx.info().subgroup_size == 32)
    p.few_to = std::min(tune.gemm_few_rows_to, GemmPlan::kMaxRows + 1);
  p.on = true;
  p.id = p.coopmat ? Shader::linear_8da4w_mm_coopmat
         : ctx.use_int_dot()
             ? Shader::linear_8da4w_mm_idot
             : Shader::linear_8da4w_mm;  // (fp16 y: the op's mat-vec checked support)
  return p;
}

// Shared bytes: the coopmat variant's two buffers of staged rows (one uvec4 of padding a row)
// with their scales and weight sums, and its tokens' zero points; the portable variant's staged
// words with the group's scales and sums.
uint32_t GemmPlan::shared(GemmTile t) const {
  return coopmat ? 2 * ((t.bt + t.bn) * (t.kc / 16 + 1) * 16 + t.bn * 8) + t.bt * 4
                 : (t.bt + t.bn) * (t.kc / 4 + 1) * 4 + t.bn * 8;
}

// The rule vk_ops_internal.h states; a forced tile that does not fit falls back to it.
GemmTile GemmPlan::tile(uint32_t rows, uint32_t T) const {
  const uint32_t bn = force_bn == 64 || (force_bn == 128 && coopmat) ? force_bn : 0;
  // bt x bn at the largest chunk that fits (halving kc keeps it a divisor of the group), or
  // nothing: 128-token tiles need chunks of 64 bytes or more on the integer paths.
  auto fit = [&](uint32_t bt, uint32_t bn_) -> std::optional<GemmTile> {
    GemmTile t = {bt, bn_, kc};
    while (shared(t) > max_shared && t.kc > 32) t.kc /= 2;
    if (shared(t) > max_shared || (!coopmat && bt == 128 && t.kc < 64)) return std::nullopt;
    return t;
  };
  if (force_bt == 32 || force_bt == 64 || force_bt == 128)
    if (auto t = fit(force_bt, bn ? bn : 64)) return *t;
  if (wide && coopmat && bn != 64 && ceil_div(rows, 128) * ceil_div(T, 64) >= min_tiles)
    if (auto t = fit(64, 128)) return *t;
  if (bn != 128 && ceil_div(rows, 64) * ceil_div(T, 64) >= min_tiles)
    if (auto t = fit(64, 64)) return *t;
  // 32 x 128 where those tiles make as many workgroups as the GPU has compute units; otherwise
  // 32 x 64 (twice the workgroups: a batched decode step's 16-64 rows, k/v's few rows).
  if (coopmat && bn != 64 && (bn == 128 || ceil_div(rows, 128) * ceil_div(T, 32) >= min_tiles))
    if (auto t = fit(32, 128)) return *t;
  if (auto t = fit(32, 64)) return *t;
  return {32, 64, 32};
}

// The coopmat kernel's threads: a subgroup a 32 x 32 part of the tile (the portable kernel has
// its own local size, 2 BT); W16 and the ablation bits (VKLLM_GEMM_ABLATE, a measurement switch
// whose results are wrong) are the coopmat kernel's only.
const Kernel& GemmPlan::kernel(Kernels& kernels, GemmTile t) const {
  return kernels.get(id, y16,
                     GemmSpec{.y16 = y16,
                              .kc = t.kc,
                              .bt = t.bt,
                              .bn = t.bn,
                              .nt = t.bt * t.bn / 32,
                              .w16 = w16,
                              .ablate = ablate});
}

// linear_8da4w_rows_coopmat (T < rows_to): 16 weight rows a workgroup, T <= 8 TF tokens; a
// subgroup a group of K at a time, up to 16 subgroups (fewer where K has fewer groups or their
// staged groups and sums would not fit the shared memory). Its specialization: y16 (id 1), TF
// (9), G / 32 (10), threads (11), W16 (12).
bool GemmPlan::rows_kernel(uint32_t rows, uint32_t T) const {
  if (T < rows_to) return true;
  if (T >= few_to) return false;
  const GemmTile t = tile(rows, T);
  return 2 * ceil_div(rows, t.bn) * ceil_div(T, t.bt) < min_tiles;
}

void GemmPlan::record(VkCommandBuffer cb, Kernels& kernels, VkDescriptorSet set, uint32_t K,
                      uint32_t rows, uint32_t r0, uint32_t N, uint32_t T, uint32_t G) const {
  if (rows_kernel(rows, T)) {
    const uint32_t tf = ceil_div(T, 8u), sv = G / 16 + 1;
    uint32_t sgs = std::clamp<uint32_t>(K / G, 1, 16);
    while (sgs > 1 && sgs * (16 * sv + 32 * tf) * 16 + 32 * tf > max_shared) --sgs;
    const RowsCoopmatSpec spec{.y16 = y16, .tf = tf, .gq = G / 32, .nt = 32 * sgs, .w16 = w16};
    dispatch(cb, kernels.get(Shader::linear_8da4w_rows_coopmat, y16, spec), set,
             GemmPush{K, rows, r0, N, T, G}, ceil_div(rows, 16u), 1);
    return;
  }
  const GemmTile t = tile(rows, T);
  dispatch(cb, kernel(kernels, t), set, GemmPush{K, rows, r0, N, T, G}, ceil_div(rows, t.bn),
           ceil_div(T, t.bt));
}

// The rule: the grouped variant wherever its workgroups, T Hkv, fill the compute units (fewer rows
// leave the GPU idle while each workgroup walks its heads one after another).
namespace {
BatchAttentionGroups batch_attention_groups(const Context& ctx, uint32_t H, uint32_t Hkv) {
  BatchAttentionGroups g;
  const int mode = ctx.tuning().attn_batch_gq;
  const uint32_t group = Hkv > 0 ? H / Hkv : 1;
  if (mode == 0 || group < 2 || group > 8 || group * Hkv != H) return g;
  g.gq = group;
  g.from_rows = mode == 1 ? 1 : ceil_div(std::max<uint32_t>(ctx.info().compute_units, 1), Hkv);
  return g;
}
}  // namespace

BatchAttention batch_attention(Ctx& c, Shader id, const AttentionSpec& spec, uint32_t H,
                               uint32_t Hkv, const std::vector<BufRange>& r) {
  BatchAttention a;
  a.groups = batch_attention_groups(c.env.ctx, H, Hkv);
  a.one = &c.kernel(id, spec);
  a.one_set = c.env.kernels.make_set(*a.one, r);
  if (a.groups.gq > 1) {
    AttentionSpec g = spec;
    g.gq = a.groups.gq;
    a.group = &c.kernel(id, g);
    a.group_set = c.env.kernels.make_set(*a.group, r);
  }
  return a;
}

PrefillAttention prefill_attention(const Context& ctx, int hd, bool a16, bool c16, int group) {
  PrefillAttention a;
  // The portable kernel (attention_prefill.comp): 16 RQ query rows a workgroup, BK keys a tile; q
  // and one tile of K or V in shared memory, (16 RQ + BK) hd floats. The largest that fits, in
  // the order RQ 2 BK 64, RQ 2 BK 32, RQ 1 BK 64, RQ 1 BK 32 (more rows a thread and more keys a
  // tile: more multiply-adds a shared-memory read). VKLLM_ATTN_BK=32 and VKLLM_ATTN_RQ=1 cap them
  // (measurement switches).
  const Tuning& tune = ctx.tuning();
  const uint32_t bk_cap = tune.attn_bk == 32 ? 32 : 64, rq_cap = tune.attn_rq == 1 ? 1 : 2;
  for (const auto& [rq, bk] : {std::pair<uint32_t, uint32_t>{2, 64}, {2, 32}, {1, 64}, {1, 32}}) {
    if (rq > rq_cap || bk > bk_cap || (16 * rq + bk) * u32(hd) * 4 > ctx.info().max_shared)
      continue;
    a.rq = rq, a.bk = bk;
    break;
  }
  a.tiled = ctx.info().subgroup_min >= 8 && hd % 8 == 0 && a.bk != 0;
  // VKLLM_ATTN_PORTABLE=1 (a measurement switch): the portable kernel where the cooperative-matrix
  // one would run.
  a.coopmat =
      ctx.use_coopmat_f16() && a16 && c16 && hd % 32 == 0 && hd <= 128 && !tune.attn_portable;
  // The cooperative-matrix kernel's keys a tile: 32; VKLLM_ATTN_BK=64 (a measurement switch)
  // where two buffers of 64 fit.
  a.cbk = tune.attn_bk == 64 && 8 * 64 * (u32(hd) + 8) <= ctx.info().max_shared ? 64 : 32;
  // Its query rows a workgroup: 32 (Qwen3's prefill attention 79.9 -> 75.2 us a layer against 64,
  // Llama-3.2-1B's 57.0 -> 56.3).
  a.cbq = 32;
  a.bq = a.coopmat ? a.cbq : 16 * a.rq;
  // VKLLM_ATTN_GQA=1 (a measurement switch): the cooperative-matrix kernel takes every query head
  // of a KV head's group in one workgroup, its K and V tiles staged once for all of them, where
  // the group's q tile fits the two tile buffers (gq cbq <= 4 cbk) and the workgroup 1,024 threads.
  if (a.coopmat && tune.attn_gqa && group > 1 && u32(group) * a.cbq <= 4 * a.cbk &&
      2 * u32(group) * a.cbq <= 1024)
    a.gq = u32(group);
  return a;
}

const Kernel* PrefillAttention::kernel(Ctx& c, int hd, const AttentionSpec& f, bool rope) const {
  if (coopmat)  // (q and the caches are fp16: the _f16 module)
    return &c.kernel(
        rope ? Shader::attention_prefill_coopmat_rope : Shader::attention_prefill_coopmat,
        PrefillCoopmatSpec{.y16 = f.y16,
                           .x16 = f.x16,
                           .qknorm = f.qknorm,
                           .n16 = f.n16,
                           .hd = u32(hd),
                           .bk = cbk,
                           .bq = cbq,
                           .nt = 2 * cbq * gq,
                           .gq = gq},
        true);
  if (tiled)
    return &c.kernel(rope ? Shader::attention_prefill_rope : Shader::attention_prefill,
                     PrefillAttentionSpec{.a16 = f.a16,
                                          .c16 = f.c16,
                                          .y16 = f.y16,
                                          .x16 = f.x16,
                                          .qknorm = f.qknorm,
                                          .n16 = f.n16,
                                          .hd = u32(hd),
                                          .bk = bk,
                                          .rq = rq,
                                          .nt = 128});
  return nullptr;
}

}  // namespace vkllm::vk::detail
