// Preparation and recording of every op family of docs/ir.md (one shader file per family).
#include "backend/vulkan/vk_ops.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>

#include "backend/vulkan/vk_ops_internal.h"
#include "core/error.h"

namespace vkllm::vk {

namespace {

using namespace detail;

PreparedOp::CheckFn id_check(const Ctx& c, int64_t V) {
  const std::string name = c.in(1).name;
  return [V, name](const int32_t* ids, int T) {
    for (int t = 0; t < T; ++t)
      if (ids[t] < 0 || ids[t] >= V)
        fail("token id {} is out of range (embedding {} has {} rows)", ids[t], name, V);
  };
}

std::unique_ptr<PreparedOp> prep_embedding(Ctx c) {
  const int32_t ids = c.op.inputs[0], tab = c.op.inputs[1], y = c.op.outputs[0];
  const TensorDecl& td = c.decl(tab);
  c.need(td.shape.size() == 2 && c.width(y) == td.shape[1] && c.decl(ids).dtype == DType::I32,
         "shape mismatch");
  c.need_float(y);
  const int64_t V = td.shape[0], D = td.shape[1];
  const bool q4 = c.op.family == "embedding_q4";
  std::vector<uint64_t> rb;
  int64_t G = 0;
  if (q4) {
    G = c.attr_i("group");
    c.need(td.dtype == DType::Q4 && G > 0 && D % G == 0 &&
               c.in(2).shape == std::vector<int64_t>{V, D / G},
           "bad q4 table or scales");
    rb = {static_cast<uint64_t>((D + 1) / 2), static_cast<uint64_t>(D / G) * 4};
  } else {
    c.need_float(tab);
    rb = {static_cast<uint64_t>(D) * (c.f16(tab) ? 2 : 4)};
  }
  const Kernel& k =
      q4 ? c.kernel(Shader::embedding_q4, YSpec{.y16 = c.f16(y)})
         : c.kernel(Shader::embedding, EmbeddingSpec{.tab16 = c.f16(tab), .y16 = c.f16(y)});
  struct Part {
    RowChunk ch;
    VkDescriptorSet set;
    uint32_t R, R1;  // matvec.glsl: rows per workgroup, of the prefill and decode variants
  };
  std::vector<Part> parts;
  Phase phase;
  for (const RowChunk& ch : row_chunks(c, V, rb)) {
    std::vector<BufRange> r = {c.whole(ids), chunk_range(c, tab, rb[0], ch)};
    if (q4) r.push_back(chunk_range(c, c.op.inputs[2], rb[1], ch));
    r.push_back(c.whole(y));
    parts.push_back({ch, c.env.kernels.make_set(k, r)});
    merge(phase, phase_of(k, r));
  }
  const uint32_t row_bytes = u32(rb[0]);
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int T) {
        for (const Part& pt : parts) {
          const uint32_t r0 = u32(pt.ch.r0), r1 = u32(pt.ch.r0 + pt.ch.rows);
          if (q4)
            dispatch(cb, k, pt.set, EmbeddingQ4Push{u32(D), u32(G), r0, r1, u32(T), row_bytes},
                     ceil_div(D, 64), u32(T));
          else
            dispatch(cb, k, pt.set, EmbeddingPush{u32(D), r0, r1, u32(T)}, ceil_div(D, 64), u32(T));
        }
      },
      id_check(c, V));
  prepared->phases = {phase};
  return prepared;
}

}  // namespace

namespace detail {

// The int8 activation scratch of linear_8da4w and its scales (shared by all ops; allocated by
// the first user), of at least OpEnv::kScratchMinTokens tokens.
std::pair<BufRange, BufRange> act_scratch(Ctx& c, int64_t K) {
  OpEnv& e = c.env;
  if (!e.act_q.buf) {
    e.act_q = e.alloc.create(
        std::max<uint64_t>(e.act_q_bytes,
                           std::max<uint64_t>(e.max_tokens, OpEnv::kScratchMinTokens) * K),
        false, "int8 activation scratch");
    e.act_qp =
        e.alloc.create(static_cast<uint64_t>(e.max_tokens) * 8, false, "activation scale scratch");
  }
  c.need(e.act_q.size >= std::max<uint64_t>(e.max_tokens, OpEnv::kScratchMinTokens) * K,
         "activation scratch too small");
  return {{e.act_q.buf, 0, e.act_q.size}, {e.act_qp.buf, 0, e.act_qp.size}};
}

}  // namespace detail

namespace {

// The index of the op being prepared in its program.
size_t op_index(const Ctx& c) {
  const size_t k = static_cast<size_t>(&c.op - c.p.ops.data());
  c.need(k < c.p.ops.size(), "op is not part of the program being prepared");
  return k;
}

std::unique_ptr<PreparedOp> prep_rms_norm(Ctx c) {
  const int32_t x = c.op.inputs[0], w = c.op.inputs[1], y = c.op.outputs[0];
  const int64_t N = c.width(x), G = c.attr_i("group");
  const float eps = c.attr_f("eps");
  c.need(G > 0 && N % G == 0 && c.decl(w).shape == std::vector<int64_t>{G} &&
             c.decl(w).dtype == DType::F32 && c.width(y) == N,
         "bad group or weight");
  c.need_float(x);
  c.need_float(y);
  // The op that computes x, when fused here: an add (the kernel reads its inputs and stores x
  // itself), or a last_row (the kernel reads the last row of its input in place).
  const size_t k = op_index(c);
  // A norm over whole rows whose only readers are linear_8da4w ops quantizes for them.
  const bool quant = c.env.scratch.writes[k] == y;
  const Op* prev =
      k > 0 && fuses_into_next(c.p, k - 1, c.env.unfused_family) ? &c.p.ops[k - 1] : nullptr;
  const Op* add = prev && prev->family == "add" ? prev : nullptr;
  const bool last = prev && prev->family == "last_row";
  const int32_t xin = add ? add->inputs[0] : last ? prev->inputs[0] : x;
  std::vector<BufRange> r = {c.whole(xin), c.whole(w), c.whole(y)};
  RmsNormSpec spec{.x16 = c.f16(xin), .y16 = c.f16(y)};
  if (add) {
    r.insert(r.end(), {c.whole(add->inputs[1]), c.whole(x)});
    spec.b16 = c.f16(add->inputs[1]);
    spec.s16 = c.f16(x);
  }
  const bool for_gemm = quant && scratch_for_gemm(c, y);
  if (quant) {
    auto [q, qp] = act_scratch(c, N);
    r.insert(r.end(), {q, qp});
  }
  const Shader id = add ? (quant ? Shader::rms_norm_add_quant : Shader::rms_norm_add)
                        : (quant ? Shader::rms_norm_quant : Shader::rms_norm);
  const Kernel& kern = c.kernel(id, spec);
  VkDescriptorSet set = c.env.kernels.make_set(kern, r);
  // Forwards of several tokens normalize groups of at most 256 values (per-head norms: no add, no
  // quantizing) a subgroup a row (rms_norm.comp ROWS_SG) instead of a 256-thread workgroup a row;
  // a whole row that narrow too where ropes alone read it (a model of one KV head has a key norm
  // over the whole row, as Gemma 3's): the prefill attention runs norm every head a subgroup a
  // row (attention_run.glsl). Other whole rows keep the workgroup a row, as the norms fused with
  // their quantization (rms_norm_quant) sum. One-token forwards keep the workgroup a row: the
  // fused decode kernels sum in its order.
  const uint32_t sg = c.env.ctx.info().subgroup_size;
  const Kernel* kern_sg = nullptr;
  VkDescriptorSet set_sg = VK_NULL_HANDLE;
  if (!quant && !add && G <= 256 && (G < N || feeds_only(c, y, "rope")) && sg > 0 && sg <= 256) {
    RmsNormSpec sg_spec = spec;
    sg_spec.rows_sg = 1;
    kern_sg = &c.kernel(Shader::rms_norm, sg_spec);
    set_sg = c.env.kernels.make_set(*kern_sg, r);
  }
  auto prepared = std::make_unique<PreparedOp>(
      [=, &kern](VkCommandBuffer cb, int T) {
        const uint32_t Tr = c.rows(x, T), rows = Tr * u32(N / G);
        const RmsNormPush push = {u32(G), rows, eps, gemm_order(c.env.ctx, for_gemm, Tr),
                                  last ? u32((T - 1) * N) : 0u};
        if (kern_sg && Tr > 1)
          dispatch_flat(cb, *kern_sg, set_sg, push, ceil_div(rows, 256 / sg));
        else
          dispatch_flat(cb, kern, set, push, rows);
      },
      nullptr);
  if (quant) prepared->quantizes = y;
  prepared->phases = {phase_of(kern, r)};
  return prepared;
}

std::unique_ptr<PreparedOp> prep_linear(Ctx c) {
  const Op& op = c.op;
  const int32_t x = op.inputs[0], W = op.inputs[1], y = op.outputs[0];
  const TensorDecl& wd = c.decl(W);
  const int64_t K = c.width(x), N = wd.shape[0];
  c.need(wd.shape.size() == 2 && wd.shape[1] == K && c.width(y) == N, "shape mismatch");
  c.need_float(x);
  c.need_float(y);
  const std::string& f = op.family;
  int64_t G = 0;
  std::vector<int32_t> wts = {W};
  std::vector<uint64_t> rb;
  if (f == "linear") {
    c.need_float(W);
    rb = {static_cast<uint64_t>(K) * (c.f16(W) ? 2 : 4)};
  } else {
    G = c.attr_i("group");
    c.need(wd.dtype == DType::Q4 && G > 0 && K % G == 0 && G % 4 == 0 &&
               c.in(2).shape == std::vector<int64_t>{N, K / G} && c.in(2).dtype == DType::F32,
           "bad int4 weight or scales (the Vulkan kernels need group % 4 == 0)");
    wts.push_back(op.inputs[2]);
    rb = {static_cast<uint64_t>(K / 2), static_cast<uint64_t>(K / G) * 4};
    if (f == "linear_8da4w") {
      c.need(c.in(3).shape == std::vector<int64_t>{N, K / G} && c.in(3).dtype == DType::I32,
             "bad weight sums");
      wts.push_back(op.inputs[3]);
      rb.push_back(static_cast<uint64_t>(K / G) * 4);
    }
  }
  // The mat-vec's variants by tokens a workgroup (TT): one (decode), and kPrefillTT for forwards
  // of more, so that a prefill reads each weight once per kPrefillTT tokens; forwards of 2-15
  // tokens (a batched decode step's rows) take the variant of the next power of two, which holds
  // only those tokens' sums (made on first use).
  constexpr uint32_t kPrefillTT = 16;
  // The decode variant of linear_8da4w (G % 32 == 0): wg threads a workgroup, each row's blocks
  // in split.parts parts of split.bpl blocks per lane, one subgroup per part (decode_split,
  // decode_matvec_wg).
  const DecodeSplit split =
      f == "linear_8da4w" && G % 32 == 0 ? decode_split(c.env.ctx, K, N) : DecodeSplit{1, 0};
  const uint32_t wg = split.bpl ? decode_matvec_wg(c.env.ctx) : 64;
  auto variant = [&](uint32_t tt) -> KernelId {
    if (f == "linear")
      return c.kernel_id(Shader::linear,
                         LinearSpec{.x16 = c.f16(x),
                                    .w16 = c.f16(W),
                                    .y16 = c.f16(y),
                                    .tt = tt,
                                    .vec8 = c.env.ctx.tuning().linear_vec8 && K % 8 == 0});
    if (f == "linear_q4w")
      return c.kernel_id(Shader::linear_q4w, Q4wSpec{.x16 = c.f16(x), .y16 = c.f16(y), .tt = tt});
    const bool idot = c.env.ctx.use_int_dot();
    Matvec8da4wSpec spec{.y16 = c.f16(y), .tt = tt};
    if (tt == 1 && split.bpl) {  // the decode variant (G % 32 == 0): its split and workgroup size
      spec.bpl = split.bpl;
      spec.parts = split.parts;
      spec.wg = wg;
    }
    return c.kernel_id(G % 32 == 0
                           ? (idot ? Shader::linear_8da4w_b32_idot : Shader::linear_8da4w_b32)
                           : (idot ? Shader::linear_8da4w_idot : Shader::linear_8da4w),
                       spec);
  };
  const Kernel *k = &variant(kPrefillTT).get(c.env.kernels), *k1 = &variant(1).get(c.env.kernels);
  const std::array<KernelId, 3> k_small = {variant(2), variant(4), variant(8)};
  // One-token forwards of linear_8da4w and linear_q4w take their streamed mat-vecs
  // (linear_8da4w_mv, linear_q4w_mv) where those apply (MatvecPlan).
  const bool q4w = f == "linear_q4w";
  const MatvecPlan mv = f != "linear" ? plan_matvec(c.env.ctx, K, N, G, split, q4w) : MatvecPlan{};
  const Kernel* kmv =
      !mv.on ? nullptr
      : q4w  ? &c.env.kernels.get(Shader::linear_q4w_mv, c.f16(x) || c.f16(y),
                                  mv.spec(c.f16(y), c.f16(x)))
             : &c.env.kernels.get(
                   c.env.ctx.use_int_dot() ? Shader::linear_8da4w_mv_idot : Shader::linear_8da4w_mv,
                  c.f16(y), mv.spec(c.f16(y)));
  const uint32_t sg_size = std::max<uint32_t>(1, c.env.ctx.info().subgroup_size);
  // Forwards of at least GemmPlan::kTokens tokens run linear_8da4w as a tiled GEMM (GemmPlan).
  // Each tile size's pipeline is made on first use (at recording), so a model compiles only the
  // variants its prompts need. (The record function may use only what outlives preparation: the
  // executor's pipeline cache, never the OpEnv.)
  GemmPlan gemm;
  Kernels* kernels = &c.env.kernels;
  const bool for_gemm = f == "linear_8da4w" && scratch_for_gemm(c, x);
  if (for_gemm) gemm = plan_gemm_8da4w(c.env.ctx, G, N, c.f16(y));
  // The float-activation linears (linear, linear_q4w) run a tiled GEMM there instead
  // (float_gemm_module; VKLLM_LINEAR_MM=0 measures the mat-vec kernels).
  const Kernel* kmm =
      f == "linear_8da4w"
          ? nullptr
          : &c.kernel(float_gemm_module(c.env.ctx, q4w, c.f16(x), c.f16(W), K),
                      FloatGemmSpec{.x16 = c.f16(x), .w16 = q4w ? 0u : c.f16(W), .y16 = c.f16(y)});
  const Kernel* kq = nullptr;
  VkDescriptorSet qset = VK_NULL_HANDLE;
  std::vector<BufRange> qranges;
  Phase phase;  // the linear's reads and writes (every row chunk's)
  std::vector<BufRange> head, tail = {c.whole(y)};
  if (f == "linear_8da4w") {
    OpEnv& e = c.env;
    const auto [q, qp] = act_scratch(c, K);
    if (e.scratch.writes[op_index(c)] == x) {  // (else the scratch holds x already)
      kq = &c.kernel(Shader::linear_8da4w_quant, QuantSpec{.x16 = c.f16(x), .hold = quant_hold(K)});
      qranges = {c.whole(x), q, qp};
      qset = e.kernels.make_set(*kq, qranges);
    }
    head = {q, qp};
  } else {
    head = {c.whole(x)};
  }
  struct Part {
    RowChunk ch;
    VkDescriptorSet set;
    uint32_t R, R1;  // matvec.glsl: rows per workgroup, of the prefill and decode variants
    VkDescriptorSet mv_set = VK_NULL_HANDLE;  // linear_8da4w_mv's
    VkDescriptorSet mm_set = VK_NULL_HANDLE;  // linear_mm's (x, weights, scales, y)
  };
  std::vector<Part> parts;
  for (const RowChunk& ch : row_chunks(c, N, rb)) {
    std::vector<BufRange> r = head;
    for (size_t i = 0; i < wts.size(); ++i) r.push_back(chunk_range(c, wts[i], rb[i], ch));
    r.insert(r.end(), tail.begin(), tail.end());
    // Decode: the rows per 64 threads scaled to wg threads and divided among the parts.
    merge(phase, phase_of(*k, r));
    const uint32_t R = c.env.ctx.matvec_rows(ch.rows);
    parts.push_back({ch, c.env.kernels.make_set(*k, r), R,
                     split.bpl ? std::max<uint32_t>(1, R * wg / 64 / split.parts) : R,
                     kmv ? c.env.kernels.make_set(*kmv, r) : VK_NULL_HANDLE});
    if (kmm) {  // (linear: the weights bound again where linear_q4w's scales go)
      std::vector<BufRange> rm = {r[0], r[1], r[q4w ? 2 : 1], r.back()};
      parts.back().mm_set = c.env.kernels.make_set(*kmm, rm);
    }
  }
  auto prepared = std::make_unique<PreparedOp>(
      [=](VkCommandBuffer cb, int T) {
        const uint32_t Tr = c.rows(x, T);
        if (kq) {
          dispatch_flat(cb, *kq, qset, QuantPush{u32(K), Tr, gemm_order(c.env.ctx, for_gemm, Tr)},
                        Tr);
          compute_barrier(cb);
        }
        const uint32_t tt = Tr == 1 ? 1 : Tr >= kPrefillTT ? kPrefillTT : std::bit_ceil(Tr);
        for (const Part& pt : parts) {  // R rows x tt tokens per workgroup
          if (gemm.on && Tr >= gemm.from) {
            gemm.record(cb, *kernels, pt.set, u32(K), pt.ch.rows, pt.ch.r0, u32(N), Tr, u32(G));
            continue;
          }
          if (kmm && Tr >= GemmPlan::kTokens) {
            dispatch_flat(cb, *kmm, pt.mm_set,
                          GemmPush{u32(K), u32(pt.ch.rows), u32(pt.ch.r0), u32(N), Tr, u32(G)},
                          float_gemm_groups(pt.ch.rows, Tr));
            continue;
          }
          const MatvecPush mp = {u32(K), u32(pt.ch.rows), u32(pt.ch.r0),         u32(N),
                                 Tr,     u32(G),          tt == 1 ? pt.R1 : pt.R};
          if (kmv && Tr == 1) {
            const uint64_t grid = mv.grid(pt.ch.rows, sg_size);
            if (q4w)
              dispatch_flat(cb, *kmv, pt.mv_set, MatvecPush{mp.K, mp.Nc, mp.n0, mp.N, Tr, mp.G, 0},
                            grid);
            else
              dispatch_flat(cb, *kmv, pt.mv_set,
                            MatvecNormPush{mp.K, mp.Nc, mp.n0, mp.N, Tr, mp.G, 0, 0.0f}, grid);
            continue;
          }
          const Kernel& kt = tt == 1            ? *k1
                             : tt == kPrefillTT ? *k
                                                : k_small[std::countr_zero(tt) - 1].get(*kernels);
          const uint64_t groups = uint64_t(ceil_div(pt.ch.rows, mp.R)) * ceil_div(Tr, tt);
          if (G)
            dispatch_flat(cb, kt, pt.set, mp, groups);
          else
            dispatch_flat(cb, kt, pt.set, LinearPush{mp.K, mp.Nc, mp.n0, mp.N, Tr, mp.R}, groups);
        }
      },
      nullptr);
  if (kq) {
    prepared->phases.push_back(phase_of(*kq, qranges));
    prepared->quantizes = x;
  }
  prepared->phases.push_back(phase);
  return prepared;
}

}  // namespace

// The rope op's cos/sin table: [max_ctx][R/2] pairs from the short inverse frequencies, then the
// same from the long ones when the op has them (longrope); computed as cpu::rope computes them.
BufRange detail::rope_table(Ctx& c, const std::vector<int32_t>& invs, int R, float a) {
  auto key = std::make_pair(invs, a);
  auto it = c.env.rope_tables.find(key);
  if (it == c.env.rope_tables.end()) {
    const int ctx = c.p.max_ctx, half = R / 2;
    std::vector<float> cs(invs.size() * ctx * half * 2);
    float* out = cs.data();
    for (int32_t inv : invs) {
      const auto bytes = c.env.host(inv);
      c.need(bytes.size() == static_cast<size_t>(half) * 4, "inverse frequency table size");
      std::vector<float> inv_freq(static_cast<size_t>(half));
      std::memcpy(inv_freq.data(), bytes.data(), bytes.size());
      for (int pos = 0; pos < ctx; ++pos) {
        const float p = static_cast<float>(pos);
        for (int i = 0; i < half; ++i, out += 2) {
          const float ang = p * inv_freq[i];
          out[0] = std::cos(ang) * a;
          out[1] = std::sin(ang) * a;
        }
      }
    }
    Buffer b = c.env.alloc.create(cs.size() * 4, false, "rope cos/sin table");
    if (b.size > c.env.ctx.max_binding())
      c.need(false, "rope table larger than one binding (context too long)");
    c.env.alloc.upload(b, 0, cs.data(), cs.size() * 4);
    it = c.env.rope_tables.emplace(key, b).first;
  }
  return {it->second.buf, 0, it->second.size};
}

namespace {

std::unique_ptr<PreparedOp> prep_rope(Ctx c) {
  const int32_t x = c.op.inputs[0], y = c.op.outputs[0];
  const int H = static_cast<int>(c.attr_i("n_heads")), hd = static_cast<int>(c.attr_i("head_dim"));
  const int R = static_cast<int>(c.attr_i("rotary_dim"));
  const float a = c.attr_f("attention_factor");
  c.need(H > 0 && hd > 0 && int64_t(H) * hd == c.width(x) && c.width(y) == c.width(x) && R > 0 &&
             R <= hd && R % 2 == 0 && c.in(1).shape == std::vector<int64_t>{R / 2} &&
             c.in(1).dtype == DType::F32,
         "bad shape");
  c.need_float(x);
  c.need_float(y);
  const Kernel& k = c.kernel(c.env.batched() ? Shader::rope_batch : Shader::rope,
                             XYSpec{.x16 = c.f16(x), .y16 = c.f16(y)});
  std::vector<int32_t> invs = {c.op.inputs[1]};
  uint32_t orig = UINT32_MAX;  // past this many positions a forward uses the long table
  if (c.op.inputs.size() == 3) {
    c.need(c.in(2).shape == c.in(1).shape && c.in(2).dtype == DType::F32, "bad long table");
    orig = u32(std::min<int64_t>(c.attr_i("original_max_pos"), UINT32_MAX - 1));
    invs.push_back(c.op.inputs[2]);
  }
  const std::vector<BufRange> r = {
      c.whole(x), rope_table(c, invs, R, a), c.whole(y),
      c.env.batched() ? c.batch_rows() : BufRange{c.env.step.buf, 0, c.env.step.size}};
  const VkDescriptorSet set = c.env.kernels.make_set(k, r);
  const uint32_t ctx = u32(c.p.max_ctx);
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int T) {
        const uint32_t Tr = c.rows(x, T);
        const uint64_t total = static_cast<uint64_t>(Tr) * H * (hd - R / 2);
        dispatch_flat(cb, k, set, RopePush{Tr, u32(H), u32(hd), u32(R), u32(total), orig, ctx},
                      ceil_div(total, 64));
      },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  return prepared;
}

// A batched forward's attention (docs/ir.md "Batched forward"): every row's k, v stored at its own
// cache row, then each (row, head) over its sequence's positions through the block table, one
// split (S = 1: a batch has T x H pairs to fill the GPU).
std::unique_ptr<PreparedOp> prep_attention_batch(Ctx c, int H, int Hkv, int hd, float scale,
                                                 uint32_t win, const AttentionSpec& flags) {
  const auto& I = c.op.inputs;
  const int32_t y = c.op.outputs[0];
  const int64_t W = int64_t(Hkv) * hd;
  AttentionSpec spec = flags;
  spec.hd = u32(hd);
  const Kernel& ks = c.kernel(Shader::attention_store_batch, spec);
  attention_splits(c.env, H, hd);  // (the partials binding: unused with one split)
  const BufRange rows = c.batch_rows(I[3]), part = {c.env.attn_part.buf, 0, c.env.attn_part.size};
  const std::vector<BufRange> rs = {c.whole(I[1]), c.whole(I[2]), c.whole(I[3]), c.whole(I[4]),
                                    rows},
                              ra = {c.whole(I[0]), c.whole(I[3]), c.whole(I[4]),
                                    c.whole(y),    part,          rows};
  VkDescriptorSet ss = c.env.kernels.make_set(ks, rs);
  const BatchAttention ka = batch_attention(c, Shader::attention_batch, spec, u32(H), u32(Hkv), ra);
  const uint32_t ctx = u32(c.p.max_ctx), bt = c.env.batch_block_tokens;
  auto prepared = std::make_unique<PreparedOp>(
      [=, &ks](VkCommandBuffer cb, int T) {
        dispatch_flat(cb, ks, ss, KvStorePush{u32(T), u32(W), ctx}, ceil_div(uint64_t(T) * W, 64));
        compute_barrier(cb);
        ka.record(cb, u32(T), u32(H),
                  AttentionBatchPush{u32(T), u32(H), u32(Hkv), u32(hd), scale, 1u, ctx, bt, win});
      },
      nullptr);
  prepared->phases = {phase_of(ks, rs), phase_of(*ka.one, ra)};
  return prepared;
}

std::unique_ptr<PreparedOp> prep_attention(Ctx c) {
  const auto& I = c.op.inputs;
  const int32_t y = c.op.outputs[0];
  const int H = static_cast<int>(c.attr_i("n_heads")),
            Hkv = static_cast<int>(c.attr_i("n_kv_heads"));
  const int hd = static_cast<int>(c.attr_i("head_dim"));
  const float scale = c.attr_f("scale");
  // Sliding window (Gemma): keys max(0, p-win+1)..p of query position p; 0: all. The split kernel
  // (attention.comp) and the portable prefill kernel (attention_prefill.comp) take it; where the
  // cooperative-matrix prefill kernel would run, windowed forwards of several tokens run the split
  // kernel with one split.
  const uint32_t win = u32(attention_window(c.op));
  const int64_t W = int64_t(Hkv) * hd;
  // The caches' rows: position j at row j % rows (a sliding layer's ring).
  const uint32_t rows = need_attention_shapes(c, H, Hkv, hd, I[0], I[1], I[2], I[3], I[4], y);
  for (int i = 0; i < 5; ++i) c.need_float(I[i]);
  c.need(c.f16(I[0]) == c.f16(I[1]) && c.f16(I[1]) == c.f16(I[2]),
         "q, k and v must share one dtype");
  const uint32_t a16 = c.f16(I[0]), c16 = c.f16(I[3]), y16 = c.f16(y);
  const AttentionSpec spec{.a16 = a16, .c16 = c16, .y16 = y16, .hd = u32(hd)};
  if (c.env.batched()) return prep_attention_batch(c, H, Hkv, hd, scale, win, spec);
  const Kernel& ks = c.kernel(Shader::attention_store, spec);
  // (attention_split.glsl's tiles and merge, specialized on the head dim)
  const Kernel& ka = c.kernel(Shader::attention, spec);
  const Kernel& kc = c.kernel(Shader::attention_combine, AttentionSpec{.y16 = y16, .hd = u32(hd)});
  // Forwards of several tokens: the prefill kernel (none: the split kernel below, S = 1).
  const PrefillAttention pa = prefill_attention(c.env.ctx, hd, a16, c16, H / Hkv);
  const Kernel* kp = win && pa.coopmat ? nullptr : pa.kernel(c, hd, spec, false);
  const uint32_t bq = pa.bq, gq = pa.gq;
  // A decode step splits the context into S parts of C keys (C a multiple of the kernel's 64-key
  // tile, S <= 64; parts past the current position stay empty) and merges them in a second pass:
  // a single token has too few (t, h) pairs to fill a GPU, and each part is a serial chain of
  // tiles. Prefill has enough pairs: S = 1.
  const uint32_t ctx = u32(c.p.max_ctx);
  const AttentionSplits splits = attention_splits(c.env, H, hd);
  const uint32_t C = splits.C, S = splits.S;  // plain names: lambdas capture them
  const BufRange part = {c.env.attn_part.buf, 0, c.env.attn_part.size},
                 step = {c.env.step.buf, 0, c.env.step.size};
  const std::vector<BufRange> rs = {c.whole(I[1]), c.whole(I[2]), c.whole(I[3]), c.whole(I[4]),
                                    step},
                              ra = {c.whole(I[0]), c.whole(I[3]), c.whole(I[4]),
                                    c.whole(y),    part,          step},
                              rc = {part, c.whole(y)},
                              rp = {c.whole(I[0]), c.whole(I[3]), c.whole(I[4]), c.whole(y), step};
  VkDescriptorSet ss = c.env.kernels.make_set(ks, rs), sa = c.env.kernels.make_set(ka, ra),
                  sc = c.env.kernels.make_set(kc, rc),
                  sp = kp ? c.env.kernels.make_set(*kp, rp) : VK_NULL_HANDLE;
  auto prepared = std::make_unique<PreparedOp>(
      [=, &ks, &ka, &kc](VkCommandBuffer cb, int T) {
        dispatch_flat(cb, ks, ss, KvStorePush{u32(T), u32(W), rows}, ceil_div(uint64_t(T) * W, 64));
        compute_barrier(cb);
        if (T > 1 && kp) {
          dispatch(cb, *kp, sp, PrefillAttentionPush{u32(T), u32(H), u32(Hkv), scale, win, rows},
                   u32(H) / gq, ceil_div(u32(T), bq));
          return;
        }
        const uint32_t s = T == 1 ? S : 1, keys = T == 1 ? C : ctx;
        dispatch_flat(cb, ka, sa,
                      AttentionPush{u32(T), u32(H), u32(Hkv), u32(hd), scale, s, keys, win, rows},
                      uint64_t(T) * H * s);
        if (s > 1) {
          compute_barrier(cb);
          dispatch_flat(cb, kc, sc, CombinePush{u32(T) * u32(H), u32(hd), s}, uint64_t(T) * H);
        }
      },
      nullptr);
  Phase attend = phase_of(ka, ra);
  if (kp) merge(attend, phase_of(*kp, rp));
  prepared->phases = {phase_of(ks, rs), attend};
  if (S > 1) prepared->decode_phases = {phase_of(ks, rs), phase_of(ka, ra), phase_of(kc, rc)};
  return prepared;
}

std::unique_ptr<PreparedOp> prep_elementwise(Ctx c) {
  const auto& I = c.op.inputs;
  const int32_t y = c.op.outputs[0];
  for (auto i : I) c.need_float(i);
  c.need_float(y);
  const int64_t N = c.width(I[0]);
  if (c.op.family == "last_row") {
    c.need(c.width(y) == N && !c.per_token(y) && c.decl(y).shape[0] == 1, "output must be [1, N]");
    if (fuses_into_next(c.p, op_index(c), c.env.unfused_family)) {
      auto fused = std::make_unique<PreparedOp>([](VkCommandBuffer, int) {}, nullptr);
      fused->fused_into_next = true;  // the next op's kernel (rms_norm) reads the row in place
      return fused;
    }
    if (c.env.batched()) {
      const Kernel& k =
          c.kernel(Shader::last_row_batch, XYSpec{.x16 = c.f16(I[0]), .y16 = c.f16(y)});
      const std::vector<BufRange> r = {c.whole(I[0]), c.whole(y), c.batch_rows()};
      VkDescriptorSet set = c.env.kernels.make_set(k, r);
      const uint32_t off = c.env.batch_out_offset;
      auto prepared = std::make_unique<PreparedOp>(
          [=, &k](VkCommandBuffer cb, int) {
            const uint32_t n = c.rows(y, 1);
            dispatch_flat(cb, k, set, LastRowBatchPush{u32(N), n, off},
                          ceil_div(uint64_t(N) * n, 64));
          },
          nullptr);
      prepared->phases = {phase_of(k, r)};
      return prepared;
    }
    const Kernel& k = c.kernel(Shader::last_row, XYSpec{.x16 = c.f16(I[0]), .y16 = c.f16(y)});
    const std::vector<BufRange> r = {c.whole(I[0]), c.whole(y)};
    VkDescriptorSet set = c.env.kernels.make_set(k, r);
    auto prepared = std::make_unique<PreparedOp>(
        [=, &k](VkCommandBuffer cb, int T) {
          dispatch_flat(cb, k, set, LastRowPush{u32(N), c.rows(I[0], T)}, ceil_div(N, 64));
        },
        nullptr);
    prepared->phases = {phase_of(k, r)};
    return prepared;
  }
  c.need(c.width(I[1]) == N && c.width(y) == N && c.per_token(I[0]) == c.per_token(I[1]),
         "shape mismatch");
  if (c.op.family == "add" && fuses_into_next(c.p, op_index(c), c.env.unfused_family)) {
    auto fused = std::make_unique<PreparedOp>([](VkCommandBuffer, int) {}, nullptr);
    fused->fused_into_next = true;  // the next op's kernel (rms_norm_add) computes the sum
    return fused;
  }
  if (c.env.scratch.writes[op_index(c)] == y) {  // (swiglu, geglu)
    // Only linear_8da4w ops read y: the kernel also quantizes the rows for them as it computes
    // them (linear_8da4w_quant.comp VKLLM_SWIGLU [VKLLM_GEGLU], a workgroup a token).
    auto [q, qp] = act_scratch(c, N);
    const Kernel& k = c.kernel(
        c.op.family == "geglu" ? Shader::geglu_quant : Shader::swiglu_quant,
        GluQuantSpec{
            .g16 = c.f16(I[0]), .u16 = c.f16(I[1]), .y16 = c.f16(y), .hold = quant_hold(N)});
    const bool for_gemm = scratch_for_gemm(c, y);
    const std::vector<BufRange> r = {c.whole(I[0]), c.whole(I[1]), c.whole(y), q, qp};
    VkDescriptorSet set = c.env.kernels.make_set(k, r);
    auto prepared = std::make_unique<PreparedOp>(
        [=, &k](VkCommandBuffer cb, int T) {
          const uint32_t Tr = c.rows(I[0], T);
          dispatch_flat(cb, k, set, QuantPush{u32(N), Tr, gemm_order(c.env.ctx, for_gemm, Tr)}, Tr);
        },
        nullptr);
    prepared->phases = {phase_of(k, r)};
    prepared->quantizes = y;
    return prepared;
  }
  const Shader id = c.op.family == "add"     ? Shader::add
                    : c.op.family == "geglu" ? Shader::geglu
                                             : Shader::swiglu;
  const Kernel& k =
      c.op.family == "add"
          ? c.kernel(id, AddSpec{.a16 = c.f16(I[0]), .b16 = c.f16(I[1]), .y16 = c.f16(y)})
          : c.kernel(id, GluSpec{.g16 = c.f16(I[0]), .u16 = c.f16(I[1]), .y16 = c.f16(y)});
  const std::vector<BufRange> r = {c.whole(I[0]), c.whole(I[1]), c.whole(y)};
  VkDescriptorSet set = c.env.kernels.make_set(k, r);
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int T) {
        const uint64_t n = uint64_t(c.rows(I[0], T)) * N;
        dispatch_flat(cb, k, set, CountPush{u32(n)}, ceil_div(n, 64));
      },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  return prepared;
}

}  // namespace

std::unique_ptr<PreparedOp> prepare_op_kernels(OpEnv& env, const Op& op);

void compute_barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

uint64_t act_quant_bytes_per_token(const Program& p, const Op& op) {
  if (op.family != "linear_8da4w") return 0;
  return static_cast<uint64_t>(p.tensors[op.inputs[0]].shape.back());
}

bool fuses_into_next(const Program& p, size_t k, const std::string& unfused_family) {
  if (k + 1 >= p.ops.size()) return false;
  const Op &a = p.ops[k], &n = p.ops[k + 1];
  if (n.family != "rms_norm" || a.outputs.size() != 1 || n.inputs.empty() ||
      n.inputs[0] != a.outputs[0])
    return false;
  if (a.family == "last_row") {
    // The last row of a per-token [-1, N] input as [1, N], normalized whole, read by no other op:
    // the norm reads the row in place and the last_row's output is never written. (Not while the
    // test corruption switch zeroes last_row's outputs: they must then be written and read.)
    if (unfused_family == "last_row") return false;
    const TensorDecl &in = p.tensors[a.inputs.at(0)], &out = p.tensors[a.outputs[0]];
    if (a.inputs.size() != 1 || in.shape.size() != 2 || in.shape[0] >= 0 ||
        out.shape != std::vector<int64_t>{1, in.shape[1]} ||
        n.attrs.value("group", int64_t(0)) != in.shape[1])
      return false;
    for (size_t j = 0; j < p.ops.size(); ++j)
      for (int32_t t : p.ops[j].inputs)
        if (t == a.outputs[0] && j != k + 1) return false;
    return true;
  }
  if (a.family != "add" || a.inputs.size() != 2) return false;
  // The residual stream: every operand a per-token [-1, N] row of the same width.
  for (int32_t t : {a.inputs[0], a.inputs[1], a.outputs[0]}) {
    const TensorDecl& d = p.tensors[t];
    if (d.shape.size() != 2 || d.shape[0] >= 0 || d.shape[1] != p.tensors[a.outputs[0]].shape[1])
      return false;
  }
  return true;
}

void check_scratch(const OpEnv& env, size_t k, int32_t held) {
  const Op& op = env.program.ops[k];
  if (op.family == "linear_8da4w" && env.scratch.writes[k] < 0 && held != op.inputs[0])
    fail("vulkan: op {} (linear_8da4w of {}) would read an int8 scratch holding another tensor", k,
         env.program.tensors[op.inputs[0]].name);
}

uint64_t& dispatch_count() {
  static thread_local uint64_t n = 0;
  return n;
}

std::unique_ptr<PreparedOp> prepare_op(OpEnv& env, const Op& op) {
  auto prepared = prepare_op_kernels(env, op);
  // Every recording states its stages (from its kernels' declared bindings: phase_of).
  if (prepared->phases.empty() && !prepared->fused_into_next)
    fail("vulkan: op {} was prepared without its reads and writes", op.family);
  return prepared;
}

std::unique_ptr<PreparedOp> prepare_op_kernels(OpEnv& env, const Op& op) {
  Ctx c{env, op, env.program};
  const std::string& f = op.family;
  if (f == "embedding" || f == "embedding_q4") return prep_embedding(c);
  if (f == "rms_norm") return prep_rms_norm(c);
  if (f == "linear" || f == "linear_q4w" || f == "linear_8da4w") return prep_linear(c);
  if (f == "rope") return prep_rope(c);
  if (f == "attention") return prep_attention(c);
  if (f == "swiglu" || f == "geglu" || f == "add" || f == "last_row") return prep_elementwise(c);
  if (f == "bias_add") return prep_bias_add(c);
  if (unary_op(f)) return prep_unary(c);
  if (f == "argmax") return prep_argmax(c);
  fail("vulkan backend: op family '{}' is not implemented", f);
}

}  // namespace vkllm::vk
