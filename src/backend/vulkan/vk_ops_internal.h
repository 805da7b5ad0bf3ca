// Helpers shared by the op preparations (vk_ops.cpp) and the fused decode steps (vk_fused.cpp):
// dispatch recording, the per-op context with its checks, and the row chunks of large weights.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "backend/vulkan/vk_ops.h"
#include "core/error.h"
#include "ir/kv_ring.h"

namespace vkllm::vk::detail {

inline uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}
inline uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Records one dispatch of `count` workgroups (split over x and y, x <= 65535) or an explicit grid,
// with the push-constant struct its module declares (kernels.def).
template <class P>
void dispatch(VkCommandBuffer cb, const Kernel& k, VkDescriptorSet set, const P& push, uint32_t gx,
              uint32_t gy = 1) {
  if (push_bytes<P>() != k.push_bytes)
    fail("vulkan: kernel {} takes {} push-constant bytes, given {}", k.decl->name, k.push_bytes,
         push_bytes<P>());
  ++dispatch_count();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline());
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
  if constexpr (push_bytes<P>() > 0)
    vkCmdPushConstants(cb, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes<P>(), &push);
  vkCmdDispatch(cb, gx, gy, 1);
}
template <class P>
void dispatch_flat(VkCommandBuffer cb, const Kernel& k, VkDescriptorSet set, const P& push,
                   uint64_t count) {
  if (count == 0) return;
  const uint64_t gx = std::min<uint64_t>(count, 65535), gy = (count + gx - 1) / gx;
  dispatch(cb, k, set, push, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy));
}
inline uint32_t ceil_div(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

// A kernel variant's module and specialization (the values of its spec struct's fields): made (or
// found) by get.
struct KernelId {
  Shader id{};
  bool f16 = false;
  std::vector<uint32_t> spec;
  const Kernel& get(Kernels& kernels) const { return kernels.get_words(id, f16, spec); }
};

// The tiled prefill GEMM of linear_8da4w: BT tokens x BN rows a workgroup, on cooperative
// matrices where the device has them (linear_8da4w_mm_coopmat.comp), else with int8 dot products
// or the portable integer path (linear_8da4w_mm.comp). It stages K in chunks of KC bytes: the
// largest of 128, 64, 32 that divides the group and whose two buffers of the tile fit the shared
// memory (smaller chunks measured slower). The tile (GemmPlan::tile): 64 x 64 where those tiles
// make at least as many workgroups as the GPU has compute units (64-token tiles measured 30
// against 40 us for Llama's q/o, 105 against 150 for its down projection); otherwise 32 tokens x
// 128 rows on cooperative matrices where its shared memory fits (6-11% faster at those few-row
// shapes), else 32 x 64. Tuning::gemm_tile (32|64|128) and gemm_rows (64|128) force one (128
// tokens needs its shared memory, and KC >= 64 on the portable path; 128 rows only on
// cooperative matrices): the tests reach every tile a device's rule can choose. The op (vk_ops.cpp)
// and `vkllm bench --gemm` (vk_physics.cpp) both record it through this plan.
struct GemmTile {
  uint32_t bt, bn;  // tokens, weight rows
  uint32_t kc;      // K bytes staged a step
};
struct GemmPlan {
  static constexpr uint32_t kTokens = 16;  // forwards of at least this many tokens use the tiles
  bool on = false;                         // false: the op has no GEMM
  // Forwards of from .. rows_to - 1 tokens run linear_8da4w_rows_coopmat (gemm_from; rows_to:
  // Tuning::gemm_rows_to, at most kMaxRows), the tiles from there (from kTokens without it).
  static constexpr uint32_t kMaxRows = OpEnv::kScratchMinTokens;
  uint32_t from = kTokens, rows_to = 0;
  // Forwards of kTokens .. few_to - 1 tokens run the rows kernel where the tiles would occupy
  // fewer than half the compute units (Tuning::gemm_few_rows_to; 0 without the rows kernel).
  uint32_t few_to = 0;
  bool rows_kernel(uint32_t rows, uint32_t T) const;  // T tokens of `rows` rows on the rows kernel
  Shader id{};                                        // its module
  uint32_t kc = 0, max_shared = 0, min_tiles = 1;     // kc: the largest chunk the group allows
  // Tuning::gemm_tile, gemm_rows
  uint32_t force_bt = 0, force_bn = 0;
  // Tuning::gemm_wide: 64 tokens x 128 rows on cooperative matrices first,
  // where those tiles make as many workgroups as the GPU has compute units.
  bool wide = false;
  bool y16 = false, coopmat = false;
  // coopmat, G <= 128: nibbles widened to 16 q (to q measured 3% slower)
  bool w16 = false;
  uint32_t ablate = 0;  // Tuning::gemm_ablate (a measurement build's wrong-result switch)
  uint32_t shared(GemmTile t) const;  // bytes of shared memory
  GemmTile tile(uint32_t rows, uint32_t T) const;
  const Kernel& kernel(Kernels& kernels, GemmTile t) const;  // made on first use
  // Records rows [r0, r0 + rows) of y (N wide) for T tokens; `set` binds the GEMM's six buffers
  // (activations, their scales, nibbles, scales, weight sums, y).
  void record(VkCommandBuffer cb, Kernels& kernels, VkDescriptorSet set, uint32_t K, uint32_t rows,
              uint32_t r0, uint32_t N, uint32_t T, uint32_t G) const;
};
GemmPlan plan_gemm_8da4w(const Context& ctx, int64_t G, int64_t N, bool y16);

// How a decode step's linear_8da4w mat-vec (one token, G % 32 == 0) cuts each row's 32-weight
// blocks: into `parts` parts of `bpl` blocks per lane each (at the device's smallest subgroup
// size). Every kernel that computes these rows sums them in this order (linear_8da4w.comp
// matvec_decode: one subgroup per part; its tail variant; linear_8da4w_fused.comp: the parts in
// one subgroup), so they agree bit for bit. Tuning::matvec_parts 0 (the rule): parts double, up to
// 8 while each keeps a block per lane, until the rows' parts make kDecodeSubgroups subgroups, so
// that mat-vecs of few rows (q, k, v, o, down) fill the GPU as the wide ones do; 1|2|4|8 forces a
// count. Default: one part (the rule measured slower on the H200: 651.9 -> 638.4 tok/s).
struct DecodeSplit {
  uint32_t parts, bpl;
};
inline DecodeSplit decode_split(const DeviceInfo& dev, const Tuning& tune, int64_t K, int64_t N) {
  constexpr int64_t kDecodeSubgroups = 16384;
  const uint32_t total =
      ceil_div(static_cast<uint64_t>(K / 32), std::max<uint32_t>(1, dev.subgroup_min));
  const bool rule = tune.matvec_parts == 0;
  const uint32_t cap = rule ? 8 : tune.matvec_parts;
  uint32_t parts = 1;
  while (parts < cap && parts * 2 <= total && (!rule || N * parts < kDecodeSubgroups)) parts *= 2;
  return {parts, ceil_div(total, parts)};
}
inline DecodeSplit decode_split(const Context& ctx, int64_t K, int64_t N) {
  return decode_split(ctx.info(), ctx.tuning(), K, N);
}

// The decode variant's workgroup size (matvec_decode): 256 threads on GPUs, 64 on CPU devices;
// VKLLM_MATVEC_WG forces one (a measurement switch: 64 to 512 measured alike on the H200,
// docs/perf.md).
inline uint32_t decode_matvec_wg(const Context& ctx) {
  constexpr uint32_t kDecodeMatvecWG = 256;
  const int forced = static_cast<int>(ctx.tuning().matvec_wg);
  const uint32_t sg = std::max<uint32_t>(1, ctx.info().subgroup_size),
                 max_wg = ctx.info().max_wg_size;
  if (forced >= 64 && forced % 64 == 0 && static_cast<uint32_t>(forced) <= max_wg)
    return static_cast<uint32_t>(forced);
  if (ctx.info().type != "cpu" && kDecodeMatvecWG <= max_wg && kDecodeMatvecWG % sg == 0)
    return kDecodeMatvecWG;
  return 64;
}

// The decode mat-vec of linear_8da4w_mv.comp (one token): the same bits as matvec_decode in one
// part, with the row walk rebuilt (the shader's header). It takes a mat-vec whose split has one
// part, whose G / 32 is a power of two no larger than the device's smallest subgroup, and whose K
// fits its shared row (8,192); by default only mat-vecs of at least kMinRows rows (the lm_heads,
// which decode chains leave to the unfused kernels), where each subgroup walks many row sets: there
// it measured 1.5-2.5x faster than matvec_decode on the H200 (`vkllm bench --matvec`:
// Llama-3.2-1B's lm_head 76 -> 47 us, Qwen3-0.6B's 57 -> 37, Phi-4-mini's 157 -> 121,
// 3.1-3.8 TB/s), and slower at the layers' shapes. VKLLM_MV=1 takes every mat-vec it can,
// VKLLM_MV=0 none. Its grid is at most `groups` workgroups of wg threads, each walking its
// rows as a stream of units: kGroupsPerUnit a compute unit where the device reports them,
// kCpuGroups on CPU devices (where workgroups are expensive); one unit a batch, two batches in
// flight (one on CPU devices). VKLLM_MV_GROUPS=n (workgroups a compute unit), VKLLM_MV_DEPTH=d
// (units a batch) and VKLLM_MV_BATCHES=1|2 (batches in flight) are measurement switches.
struct MatvecPlan {
  bool on = false;
  uint32_t bpg = 0, depth = 1, wg = 256, groups = 0, batches = 2;
  uint32_t shared_vec4 = 0;  // linear_q4w_mv: the row's vec4s in shared memory (XN)
  // linear_8da4w_mv: a group's weight sum from its nibbles, not from memory (WSUM_NIBBLES).
  uint32_t wsum_nibbles = 0;
  StreamedMatvecSpec spec(bool y16, bool x16 = false) const {
    return {.y16 = y16,
            .x16 = x16,
            .depth = depth,
            .bpg = bpg,
            .batches = batches,
            .xn = shared_vec4,
            .wsum_nibbles = wsum_nibbles,
            .wg = wg};
  }
  // Workgroups for N rows.
  uint32_t grid(uint32_t N, uint32_t subgroup) const {
    const uint32_t sets = ceil_div(N, bpg), per = std::max<uint32_t>(1, wg / subgroup);
    return std::max<uint32_t>(1, std::min(ceil_div(sets, per), groups));
  }
};
// The streamed decode mat-vec of linear_q4w (linear_q4w_mv.comp: float activations, the row in
// shared memory as fp32 with a vec4 of padding a group): it takes every one-token linear_q4w whose
// G / 32 is a power of two no larger than the smallest subgroup and whose padded row fits the
// device's shared memory (the old kernel, linear_q4w.comp, reads each weight two bytes a lane and
// its activations four scalar loads at a time). VKLLM_MV=0 keeps the old kernel (measurement).
// want: 1 every mat-vec it can take, 0 none, -1 the default (linear_8da4w: N >= kMinRows;
// linear_q4w: every one).
inline MatvecPlan plan_matvec(const DeviceInfo& dev, const Tuning& tune, int64_t K, int64_t N,
                              int64_t G, DecodeSplit split, bool q4w = false, int want = -2) {
  if (want == -2) want = tune.mv;
  constexpr uint32_t kGroupsPerUnit = 4, kMaxK = 8192, kCpuGroups = 4;
  constexpr int64_t kMinRows = 32768;
  MatvecPlan p;
  const uint32_t sg = dev.subgroup_min, bpg = static_cast<uint32_t>(G / 32);
  const uint64_t xn = q4w && G > 0 ? static_cast<uint64_t>(K / 4 + K / G) : 0;
  if (want == 0 || (want != 1 && !q4w && N < kMinRows) || split.parts != 1 || G % 32 != 0 ||
      bpg == 0 || (bpg & (bpg - 1)) != 0 || bpg > sg || K > kMaxK || xn * 16 > dev.max_shared ||
      dev.max_wg_size < 256 || 256 % std::max<uint32_t>(1, dev.subgroup_size) != 0)
    return p;
  p.on = true;
  p.bpg = bpg;
  p.shared_vec4 = static_cast<uint32_t>(xn);
  const bool cpu = dev.type == "cpu";
  const int d = static_cast<int>(tune.mv_depth), b = static_cast<int>(tune.mv_batches);
  if (d > 0 && d <= 16 && d * bpg <= 32) p.depth = static_cast<uint32_t>(d);
  p.batches = b == 1 || b == 2 ? static_cast<uint32_t>(b) : cpu ? 1 : 2;
  // VKLLM_MV_WSUM=1: the weight sums from the nibbles (linear_8da4w_mv.comp WSUM_NIBBLES; off
  // until measured on the H200: a sixth fewer bytes for the G = 32 lm_heads, more integer work).
  p.wsum_nibbles = !q4w && tune.mv_wsum_nibbles ? 1 : 0;
  const int gpu = static_cast<int>(tune.mv_groups);
  const uint32_t cu = dev.compute_units;
  p.groups = cpu  ? (gpu > 0 ? static_cast<uint32_t>(gpu) : kCpuGroups)
             : cu ? cu * (gpu > 0 ? static_cast<uint32_t>(gpu) : kGroupsPerUnit)
                  : 65535;
  p.groups = std::min<uint32_t>(p.groups, 65535);
  return p;
}
inline MatvecPlan plan_matvec(const Context& ctx, int64_t K, int64_t N, int64_t G,
                              DecodeSplit split, bool q4w = false, int want = -2) {
  return plan_matvec(ctx.info(), ctx.tuning(), K, N, G, split, q4w, want);
}

struct Ctx {
  OpEnv& env;
  const Op& op;
  const Program& p;
  const TensorDecl& decl(int32_t t) const { return p.tensors[t]; }
  const TensorDecl& in(size_t i) const { return decl(op.inputs[i]); }
  const TensorDecl& out() const { return decl(op.outputs[0]); }
  int64_t width(int32_t t) const { return decl(t).shape.back(); }
  bool per_token(int32_t t) const { return decl(t).shape[0] < 0; }
  // Rows of a tensor in a forward of T tokens (a batched forward's [1, N] activations: one row
  // per output row).
  uint32_t rows(int32_t t, int T) const {
    if (per_token(t)) return u32(T);
    if (env.batched() && decl(t).kind == TensorKind::Activation && decl(t).shape[0] == 1)
      return env.batch_out;
    return u32(decl(t).shape[0]);
  }
  BufRange batch_rows() const { return {env.batch_rows.buf, 0, env.batch_rows.size}; }
  // The rows view of the pool holding KV cache `cache` (OpEnv::batch_window_offset).
  BufRange batch_rows(int32_t cache) const {
    const uint64_t off = env.batch_window_offset;
    if (off == 0 || env.batch_cache_group.at(static_cast<size_t>(cache)) != 1) return batch_rows();
    return {env.batch_rows.buf, off, env.batch_rows.size - off};
  }
  void need(bool ok, const char* what) const {
    if (!ok)
      fail("program: op {} ({} -> {}): {}", op.family, p.tensors[op.inputs[0]].name, out().name,
           what);
  }
  VkBuffer buf(int32_t t) const { return env.buffer(t).buf; }
  bool f16(int32_t t) const { return decl(t).dtype == DType::F16; }
  void need_float(int32_t t) const {
    need(decl(t).dtype == DType::F32 || decl(t).dtype == DType::F16, "tensor must be f32 or f16");
  }
  // The whole buffer of a tensor as one binding (activations, caches, small weights).
  BufRange whole(int32_t t) const {
    const Buffer& b = env.buffer(t);
    if (b.size > env.ctx.max_binding())
      fail("tensor {} ({} bytes) is larger than one Vulkan storage binding ({} bytes)",
           decl(t).name, b.size, env.ctx.max_binding());
    return {b.buf, 0, b.size};
  }
  // Kernel variant: the _f16 module when any of the spec's fp16 flags is set (or f16).
  template <class S>
  const Kernel& kernel(Shader k, const S& spec, bool f16 = false) {
    return kernel_id(k, spec, f16).get(env.kernels);
  }
  // The same variant's identity, for a record function that makes it on first use.
  template <class S>
  KernelId kernel_id(Shader k, const S& spec, bool f16 = false) {
    if (kernel_decl(k).spec_fields.data() != spec_fields<S>().data())
      fail("vulkan: kernel {} is specialized by another struct", kernel_decl(k).name);
    const auto w = spec_words(spec);
    for (size_t i = 0; i < w.size(); ++i) f16 = f16 || (S::fields[i].kind == kF16 && w[i]);
    if (f16 && !env.ctx.use_fp16())
      fail(
          "program tensor of op {} is fp16 but Vulkan device {} ({}) has no 16-bit storage{}; "
          "choose another device (--device) or a recipe without fp16",
          op.family, env.ctx.info().index, env.ctx.info().name,
          env.ctx.options().no_fp16 ? " (VKLLM_NO_FP16 is set)" : "");
    return {k, f16, std::vector<uint32_t>(w.begin(), w.end())};
  }
  int64_t attr_i(const char* k) const {
    need(op.attrs.contains(k) && op.attrs[k].is_number(), k);
    return op.attrs[k].get<int64_t>();
  }
  float attr_f(const char* k) const {
    need(op.attrs.contains(k) && op.attrs[k].is_number(), k);
    return op.attrs[k].get<float>();
  }
};

// Row chunks of weights [rows, ...] whose per-row byte sizes are `row_bytes`, so that each chunk of
// every tensor fits one binding and starts at an aligned offset.
struct RowChunk {
  int64_t r0, rows;
};
inline std::vector<RowChunk> row_chunks(const Ctx& c, int64_t rows,
                                        const std::vector<uint64_t>& row_bytes) {
  const uint64_t align = std::max<uint32_t>(16, c.env.ctx.storage_align()),  // uvec4 views
      maxb = c.env.ctx.max_binding();
  uint64_t step = 1, max_rows = static_cast<uint64_t>(rows);
  for (uint64_t rb : row_bytes) {
    step = std::lcm(step, align / std::gcd(align, rb));
    max_rows = std::min(max_rows, maxb / rb);
  }
  if (max_rows < static_cast<uint64_t>(rows)) max_rows = max_rows / step * step;
  if (max_rows == 0) c.need(false, "one weight row does not fit a Vulkan storage binding");
  std::vector<RowChunk> out;
  for (int64_t r = 0; r < rows; r += static_cast<int64_t>(max_rows))
    out.push_back({r, std::min<int64_t>(static_cast<int64_t>(max_rows), rows - r)});
  return out;
}
inline BufRange chunk_range(const Ctx& c, int32_t t, uint64_t row_bytes, const RowChunk& ch) {
  const Buffer& b = c.env.buffer(t);
  const uint64_t off = static_cast<uint64_t>(ch.r0) * row_bytes;
  const uint64_t len = std::min<uint64_t>(
      (static_cast<uint64_t>(ch.rows) * row_bytes + 3) & ~uint64_t(3), b.size - off);
  return {b.buf, off, len};
}

// The attention op's shapes and caches as its kernels need them (attention_split.glsl: head_dim
// a multiple of 8, at most 256), for the unfused op and the fused decode run alike: q and y are
// H heads wide, k, v and the caches Hkv heads. Returns the caches' rows, the kernels' `rows`
// (position j at row j % rows): a single sequence's caches hold their declared rows, the
// context's or a sliding layer's ring (ir/kv_ring.h), which must hold the window and a forward's
// tokens less one, so that no key a query reads is overwritten in its forward; a batched
// executor's caches are its block pool, reached through the block tables (the context's rows).
inline uint32_t need_attention_shapes(const Ctx& c, int H, int Hkv, int hd, int32_t q, int32_t k,
                                      int32_t v, int32_t kc, int32_t vc, int32_t y) {
  const int64_t W = int64_t(Hkv) * hd;
  c.need(Hkv > 0 && H % Hkv == 0 && hd > 0 && hd <= 256 && hd % 8 == 0 &&
             c.width(q) == int64_t(H) * hd && c.width(k) == W && c.width(v) == W &&
             c.width(kc) == W && c.width(vc) == W && c.width(y) == int64_t(H) * hd,
         "bad shape (head_dim must be a multiple of 8, <= 256)");
  c.need(c.decl(kc).kind == TensorKind::KVCache && c.decl(vc).kind == TensorKind::KVCache &&
             c.decl(kc).dtype == c.decl(vc).dtype,
         "bad KV caches");
  if (c.env.batched()) return u32(c.p.max_ctx);
  const int64_t rows = attention_cache_rows(c.p, c.op);
  c.need(rows >= c.p.max_ctx || rows - attention_window(c.op) + 1 >= c.env.max_tokens,
         "a ring of KV cache rows shorter than the window and a forward");
  return u32(std::min<int64_t>(rows, UINT32_MAX));
}

// A decode step's attention splits: the context in S parts of C keys (C a multiple of the 64-key
// tile, S <= 64), and the shared partials buffer sized for H heads of head_dim hd.
struct AttentionSplits {
  uint32_t C, S;
};
// Keys a split (C) of the decode attention at a context of ctx positions.
inline uint32_t attention_split_keys(int64_t max_ctx) {
  constexpr uint32_t kSplits = 64, kMinKeys = 64;
  const uint32_t ctx = u32(max_ctx);
  return std::max(kMinKeys, ceil_div(ceil_div(ctx, kSplits), 64) * 64);
}
inline AttentionSplits attention_splits(OpEnv& env, int H, int hd) {
  const uint32_t C = attention_split_keys(env.program.max_ctx),
                 S = ceil_div(u32(env.program.max_ctx), C);
  const uint64_t part_bytes = uint64_t(H) * S * (hd + 2) * 4;
  if (env.attn_part.size < part_bytes)
    env.attn_part = env.alloc.create(part_bytes, false, "attention split partials");
  return {C, S};
}

// The prefill attention kernel of a forward of several tokens (vk_ops.cpp): on fp16 cooperative
// matrices where q and the caches are fp16 (attention_prefill_coopmat.comp: cbq tokens a
// workgroup, hd % 32 == 0, hd <= 128, cbk keys a tile), else the portable tiled kernel
// (attention_prefill.comp: 16 rq tokens a 128-thread workgroup, bk keys a tile) where the device
// has 8-lane subgroups and its shared memory; neither: the split kernel of one (token, head) a
// workgroup.
struct PrefillAttention {
  bool coopmat = false, tiled = false;
  uint32_t rq = 0, bk = 0, cbk = 0, cbq = 0, bq = 0;  // bq: tokens a workgroup
  uint32_t gq = 1;  // query heads a workgroup (the cooperative-matrix kernel: one, or its group)
  // The kernel (nullptr: neither) for the dtypes and the run's flags in f (a16, c16, y16; rope:
  // the prefill attention run's variant, attention_prefill_q.glsl, with x16, qknorm, n16).
  const Kernel* kernel(Ctx& c, int hd, const AttentionSpec& f, bool rope) const;
};
// group: the query heads that share one KV head (n_heads / n_kv_heads). Dispatch H / gq x
// ceil(T / bq) workgroups.
PrefillAttention prefill_attention(const Context& ctx, int hd, bool a16, bool c16, int group = 1);

// A batched forward's attention (attention.comp VKLLM_BATCH, one split): forwards of from_rows
// rows or more run the variant whose workgroup takes gq query heads, a KV head's group, so that
// each key and value tile is loaded once for the group rather than once a head; forwards of fewer
// rows the one-head variant (more workgroups: each head's tiles run in parallel). gq is the group
// where it has 2..8 heads, else 1 (from_rows then never). Dispatch T H / gq workgroups.
struct BatchAttentionGroups {
  uint32_t gq = 1, from_rows = UINT32_MAX;
  uint32_t at(uint32_t T) const { return T >= from_rows ? gq : 1; }
};
// The batched attention kernel (attention_batch or attention_batch_rope) with its set over the
// bindings r, in both variants where the heads have groups; record() dispatches the one for T rows.
struct BatchAttention {
  BatchAttentionGroups groups;
  const Kernel* one = nullptr;    // a query head a workgroup
  const Kernel* group = nullptr;  // a KV head's group of query heads (where groups.gq > 1)
  VkDescriptorSet one_set = VK_NULL_HANDLE, group_set = VK_NULL_HANDLE;
  template <typename P>
  void record(VkCommandBuffer cb, uint32_t T, uint32_t H, const P& push) const {
    const uint32_t gq = groups.at(T);
    dispatch_flat(cb, gq > 1 ? *group : *one, gq > 1 ? group_set : one_set, push,
                  uint64_t(T) * H / gq);
  }
};
BatchAttention batch_attention(Ctx& c, Shader id, const AttentionSpec& spec, uint32_t H,
                               uint32_t Hkv, const std::vector<BufRange>& r);

// The ops of vk_ops_rows.cpp: bias_add; the unary ops (scale: one float input, one attribute,
// elementwise); argmax.
std::unique_ptr<PreparedOp> prep_bias_add(Ctx c);
bool unary_op(std::string_view family);
std::unique_ptr<PreparedOp> prep_unary(Ctx c);
std::unique_ptr<PreparedOp> prep_argmax(Ctx c);

// The rope op's cos/sin table for inverse-frequency tensors invs and factor a (vk_ops.cpp), made
// once per executor.
BufRange rope_table(Ctx& c, const std::vector<int32_t>& invs, int R, float a);

// The int8 activation scratch of linear_8da4w (shared by all ops; allocated by the first user).
std::pair<BufRange, BufRange> act_scratch(Ctx& c, int64_t K);
// Does tensor y go only to ops of `family` (as their first input), and to at least one?
bool feeds_only(const Ctx& c, int32_t y, std::string_view family);
bool feeds_only(const Program& p, int32_t y, std::string_view family);
// Does tensor y go only to linear_8da4w ops (as their input), so that its producer can quantize
// it for them?
bool feeds_only_8da4w(const Ctx& c, int32_t y);
// Whether every linear_8da4w that reads x has a tiled GEMM, so that in forwards of at least
// GemmPlan::kTokens tokens x's int8 scratch is stored in the GEMMs' order (vk_ops.cpp).
bool scratch_for_gemm(const Ctx& c, int32_t x);
// The quantizers' push constant for a forward of Tr tokens (1: store in that order).
uint32_t gemm_order(const Context& ctx, bool for_gemm, uint32_t Tr);
// The fewest tokens of a forward whose linear_8da4w ops run on the matrix units: GemmPlan::kTokens
// (the tiles); Tuning::gemm_from (2-15, where the device has int8 cooperative matrices) runs
// forwards from that many tokens on linear_8da4w_rows_coopmat (16 weight rows by 8 tokens a
// multiply-add), measured slower than the mat-vecs at 4 rows (docs/perf.md). The quantizers store
// the scratch in the GEMMs' order from the same count.
uint32_t gemm_from(const Context& ctx);
// The tiled GEMM of the float-activation linears (linear, linear_q4w) in forwards of at least
// GemmPlan::kTokens tokens: its module (before the _f16 suffix) and its workgroups, kFloatGemmTile
// tokens x kFloatGemmTile rows each. fp16 activations and weights (the fp16 recipe) run on fp16
// cooperative matrices where the device has them and K % 8 == 0 (linear_mm_coopmat.comp); the
// rest, portable fp32 arithmetic (linear_mm.comp, linear_q4w_mm).
constexpr uint32_t kFloatGemmTile = 64;
inline Shader float_gemm_module(const Context& ctx, bool q4w, bool x16, bool w16, int64_t cols) {
  if (q4w) return Shader::linear_q4w_mm;
  return ctx.use_coopmat_f16() && x16 && w16 && cols % 8 == 0 ? Shader::linear_mm_coopmat
                                                              : Shader::linear_mm;
}
inline uint64_t float_gemm_groups(uint32_t rows, uint32_t T) {
  return uint64_t(ceil_div(rows, kFloatGemmTile)) * ceil_div(T, kFloatGemmTile);
}
// The row quantizer's slots a thread (linear_8da4w_quant.comp and its SwiGLU variant, HOLD): rows
// of K values held in registers eight a slot, 256 threads; 0 (the streaming passes) where K is not
// a multiple of 8 or K > 8 x 256 x 8.
inline uint32_t quant_hold(int64_t K) {
  constexpr int64_t kSlot = 8 * 256, kMaxSlots = 8;
  return K % 8 == 0 && K <= kSlot * kMaxSlots ? u32((K + kSlot - 1) / kSlot) : 0;
}

}  // namespace vkllm::vk::detail
