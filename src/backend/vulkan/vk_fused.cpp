// The decode step's fusion patterns and their prepared steps (vk_fused.h). Each pattern is a run
// of ops around linear_8da4w mat-vecs that linear_8da4w_fused.comp computes in one dispatch per
// mat-vec: a prologue that derives the int8 input row (quantization alone, or the RMS norm and
// then the quantization) in every workgroup, and an epilogue (plain store, the residual add, or
// SwiGLU of two mat-vecs). Every intermediate tensor of a run must be read only inside the run.
// The same runs around linear_q4w mat-vecs (int4 weight-only: no quantization, the row kept in
// floats) are decode chain stages only (linear_8da4w_chain.comp's q4w stages).
#include "backend/vulkan/vk_fused.h"

#include <algorithm>
#include <cstdio>

#include "backend/vulkan/vk_fusion.h"

namespace vkllm::vk {

namespace fusion {

namespace {

// The mat-vec kernel's shape on this device: rows per subgroup in flight (RPS), 32-weight blocks
// per lane (BPL, enough for the row at the smallest subgroup size), and the most workgroups (each
// repeats the prologue, so no more than run at once on a GPU; few on CPU devices, where every
// workgroup costs a thread hand-off).
struct MatvecShape {
  uint32_t rps, bpl, parts, subgroups, max_groups;  // bpl: the whole row's (parts x decode_split's)
};
MatvecShape matvec_shape(const Context& ctx, int64_t K, int64_t N) {
  const bool cpu = ctx.info().type == "cpu";
  const DecodeSplit split = decode_split(ctx, K, N);  // the unfused kernel's order of sums
  MatvecShape t;
  t.parts = split.parts;
  t.bpl = split.parts * split.bpl;
  t.rps = cpu ? 4 : 2;
  t.subgroups = std::max<uint32_t>(1, kWG / std::max<uint32_t>(1, ctx.info().subgroup_size));
  t.max_groups = cpu ? 64 : 1024;
  return t;
}

}  // namespace

uint32_t attention_flags(const Program& p, const Match& m) {
  auto f16 = [&](int32_t t) { return p.tensors[t].dtype == DType::F16; };
  return (f16(m.q) ? 1u : 0u) | (f16(m.attn->inputs[3]) ? 2u : 0u) | (f16(m.y) ? 4u : 0u) |
         (m.qnorm && f16(m.qnorm->outputs[0]) ? 8u : 0u) |
         (m.qrope && f16(m.qrope->outputs[0]) ? 16u : 0u) | (m.qnorm ? 32u : 0u) |
         (m.qrope ? 64u : 0u);
}

AttentionSetup attention_setup(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  Ctx c{env, *m.attn, p};
  const auto& I = m.attn->inputs;
  AttentionSetup a;
  a.H = static_cast<int>(c.attr_i("n_heads"));
  a.Hkv = static_cast<int>(c.attr_i("n_kv_heads"));
  a.hd = static_cast<int>(c.attr_i("head_dim"));
  a.scale = c.attr_f("scale");
  // (as prep_attention reads it: keys max(0, p - win + 1)..p of query position p)
  a.win = u32(attention_window(*m.attn));
  a.rows = need_attention_shapes(c, a.H, a.Hkv, a.hd, m.q, m.k, I[2], I[3], I[4], m.y);
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
  const Kernel& k = env.kernels.get(Shader::attention_decode, any16,
                                    DecodeAttentionSpec{.a16 = a.a16,
                                                        .c16 = a.c16,
                                                        .y16 = a.y16,
                                                        .qknorm = m.qnorm != nullptr,
                                                        .rope = m.qrope != nullptr,
                                                        .n16 = a.n16,
                                                        .r16 = a.r16,
                                                        .oquant = oquant,
                                                        .hd = u32(hd),
                                                        .measure = env.ctx.tuning().att_measure});
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
  const DecodeAttentionPush push = {u32(H), u32(a.Hkv), u32(hd), a.scale, S,     C,     a.R,
                                    a.orig, a.ctx,      a.qeps,  a.keps,  a.win, a.rows};
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int) { dispatch_flat(cb, k, set, push, uint64_t(H) * S); },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  if (oquant) prepared->quantizes = m.y;
  return prepared;
}

// A batched forward's attention run (the same ops): the batched KV store norms and rotates each
// row's new keys at the row's position before storing them at its cache row, and the batched
// attention (one split) its queries as it loads them (attention.comp VKLLM_BATCH VKLLM_ROPE); the
// unfused ops' bits, as below.
std::unique_ptr<PreparedOp> prepare_batch_attention(OpEnv& env, const Match& m,
                                                    const AttentionSetup& a,
                                                    const AttentionSpec& flags) {
  Ctx c{env, *m.attn, env.program};
  const auto& I = m.attn->inputs;
  const uint32_t hd = u32(a.hd), H = u32(a.H), Hkv = u32(a.Hkv), W = Hkv * hd, qkn = flags.qknorm;
  const uint32_t sg = env.ctx.info().subgroup_size;
  const Kernel& ks = c.kernel(Shader::attention_store_rope_batch, AttentionSpec{.a16 = c.f16(I[2]),
                                                                                .c16 = flags.c16,
                                                                                .x16 = c.f16(m.k),
                                                                                .qknorm = qkn,
                                                                                .n16 = flags.n16,
                                                                                .hd = hd});
  attention_splits(env, a.H, a.hd);  // (the partials binding: unused with one split)
  const BufRange rows = c.batch_rows(I[3]), part = {env.attn_part.buf, 0, env.attn_part.size};
  const std::vector<BufRange> rs = {c.whole(m.k), c.whole(I[2]), c.whole(I[3]), c.whole(I[4]),
                                    rows,         a.table,       a.nk},
                              ra = {c.whole(m.q), c.whole(I[3]), c.whole(I[4]), c.whole(m.y),
                                    part,         a.table,       a.nq,          rows};
  VkDescriptorSet ss = env.kernels.make_set(ks, rs);
  const BatchAttention ka = batch_attention(c, Shader::attention_batch_rope, flags, H, Hkv, ra);
  const uint32_t R = a.R, orig = a.orig, ctx = a.ctx, bt = env.batch_block_tokens, win = a.win;
  const float scale = a.scale, qeps = a.qeps, keps = a.keps;
  auto prepared = std::make_unique<PreparedOp>(
      [=, &ks](VkCommandBuffer cb, int T) {
        const uint32_t groups =
            qkn ? ceil_div(uint64_t(T) * Hkv, 64 / sg) : ceil_div(uint64_t(T) * W, 64);
        dispatch_flat(cb, ks, ss, KvStoreRopePush{u32(T), W, R, orig, ctx, keps, ctx}, groups);
        compute_barrier(cb);
        ka.record(cb, u32(T), H,
                  AttentionBatchRopePush{u32(T), H, Hkv, hd, scale, 1u, ctx, bt, win, R, orig, ctx,
                                         qeps});
      },
      nullptr);
  prepared->phases = {phase_of(ks, rs), phase_of(*ka.one, ra)};
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
  const AttentionSpec flags{
      .a16 = r16, .c16 = a.c16, .y16 = a.y16, .x16 = q16, .qknorm = qkn, .n16 = n16, .hd = u32(hd)};
  if (env.batched()) return prepare_batch_attention(env, m, a, flags);
  const PrefillAttention pa = prefill_attention(env.ctx, hd, r16, a.c16, H / a.Hkv);
  // (The cooperative-matrix kernel takes no window: windowed runs are not planned there.)
  const Kernel* kp = a.win && pa.coopmat ? nullptr : pa.kernel(c, hd, flags, true);
  c.need(kp != nullptr, "no prefill attention kernel for the run");
  const Kernel& ks =
      c.kernel(Shader::attention_store_rope,
               AttentionSpec{
                   .a16 = v16, .c16 = a.c16, .x16 = k16, .qknorm = qkn, .n16 = n16, .hd = u32(hd)});
  const BufRange step = {env.step.buf, 0, env.step.size};
  const std::vector<BufRange> rs = {c.whole(m.k), c.whole(I[2]), c.whole(I[3]), c.whole(I[4]),
                                    step,         a.table,       a.nk},
                              rp = {c.whole(m.q), c.whole(I[3]), c.whole(I[4]), c.whole(m.y),
                                    step,         a.table,       a.nq};
  VkDescriptorSet ss = env.kernels.make_set(ks, rs), sp = env.kernels.make_set(*kp, rp);
  const uint32_t R = a.R, orig = a.orig, ctx = a.ctx, bq = pa.bq, gq = pa.gq, Hkv = u32(a.Hkv),
                 win = a.win, rows = a.rows;
  const float scale = a.scale, qeps = a.qeps, keps = a.keps;
  auto prepared = std::make_unique<PreparedOp>(
      [=, &ks](VkCommandBuffer cb, int T) {
        // The store: an element a thread, or with the key norms a subgroup a key row.
        const uint32_t groups =
            qkn ? ceil_div(uint64_t(T) * Hkv, 64 / sg) : ceil_div(uint64_t(T) * W, 64);
        dispatch_flat(cb, ks, ss, KvStoreRopePush{u32(T), u32(W), R, orig, ctx, keps, rows},
                      groups);
        compute_barrier(cb);
        dispatch(
            cb, *kp, sp,
            PrefillAttentionRopePush{u32(T), u32(H), Hkv, scale, R, orig, ctx, qeps, win, rows},
            u32(H) / gq, ceil_div(u32(T), bq));
      },
      nullptr);
  prepared->phases = {phase_of(ks, rs), phase_of(*kp, rp)};
  return prepared;
}

// A tail run: its mat-vecs (in row chunks: one dispatch per chunk, no barrier between them, one
// counter across all) and the row op after them, run by the workgroup that finishes last.
std::unique_ptr<PreparedOp> prepare_tail(OpEnv& env, const Match& m, int32_t scratch_in) {
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
  if (scratch_in != m.x) {  // the step before did not quantize the input: quantize it first
    kq = &c.kernel(Shader::linear_8da4w_quant, QuantSpec{.x16 = c.f16(m.x), .hold = quant_hold(K)});
    const std::vector<BufRange> r = {c.whole(m.x), qr, qpr};
    qset = env.kernels.make_set(*kq, r);
    phases.push_back(phase_of(*kq, r));
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
  const MatvecTailSpec spec{.y16 = y16,
                            .tt = 1,
                            .bpl = split.bpl,
                            .tail = static_cast<uint32_t>(m.pat->tail),
                            .a16 = a16,
                            .b16 = b16,
                            .s16 = s16,
                            .n16 = n16,
                            .tquant = tquant,
                            .parts = split.parts};
  const bool any16 = y16 || a16 || b16 || s16 || n16;
  c.need(!any16 || env.ctx.use_fp16(), "fp16 tensors need 16-bit storage");
  const Shader id =
      env.ctx.use_int_dot() ? Shader::linear_8da4w_b32_tail_idot : Shader::linear_8da4w_b32_tail;
  const Kernel& k = env.kernels.get(id, any16, spec);
  MatvecTailSpec spec_none = spec;  // the dispatches before the last have no tail
  spec_none.tail = 2;
  const Kernel& k_none = env.kernels.get(id, any16, spec_none);
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
    MatvecTailPush push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  Phase before;  // the chunks before the last
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
    const bool last = i + 1 == chunks.size();
    const Kernel& kk = last ? k : k_none;
    ds.push_back({&kk,
                  env.kernels.make_set(kk, r),
                  {u32(K), u32(ch.rows), u32(ch.r0), u32(N), 1, u32(G), R, groups, u32(W),
                   norm ? m.norm->attrs.value("eps", 1e-6f) : 0.0f, l1 ? per : groups},
                  groups});
    // Phases: [the input's quantization], [the chunks before the last], the last chunk and the
    // tail.
    if (last && chunks.size() > 1) phases.push_back(before);
    merge(last ? phases.emplace_back() : before, phase_of(kk, r));
  }
  auto prepared = std::make_unique<PreparedOp>(
      [ds, kq, qset, K](VkCommandBuffer cb, int) {
        if (kq) {
          dispatch_flat(cb, *kq, qset, QuantPush{u32(K), 1, 0},
                        1);  // (one token: the mat-vecs' order)
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

// A head run: linear_8da4w_mv_norm (linear_q4w_mv_norm) over the lm_head's row chunks, each
// workgroup normalizing (and quantizing) the residual's row itself as rms_norm (rms_norm_quant)
// stores it, so the logits are the unfused ops' bits.
std::unique_ptr<PreparedOp> prepare_head(OpEnv& env, const Match& m) {
  const Program& p = env.program;
  const Op& l = *m.mv[0];
  Ctx c{env, l, p};
  const int64_t K = c.width(m.x), N = p.tensors[l.inputs[1]].shape[0],
                G = l.attrs["group"].get<int64_t>();
  const bool q4w = m.pat->q4w();
  const MatvecPlan mv = head_matvec(p, m, env.ctx.info(), env.ctx.tuning());
  c.need(mv.on, "the head run's mat-vec is not streamed");
  const bool x16 = c.f16(m.x), y16 = c.f16(m.y), h16 = c.f16(m.norm->outputs[0]);
  StreamedMatvecSpec spec = mv.spec(y16, x16);
  spec.h16 = h16;
  const Shader id = q4w                     ? Shader::linear_q4w_mv_norm
                    : env.ctx.use_int_dot() ? Shader::linear_8da4w_mv_norm_idot
                                            : Shader::linear_8da4w_mv_norm;
  const Kernel& k = env.kernels.get(id, x16 || y16 || h16, spec);
  const float eps = m.norm->attrs.value("eps", 1e-6f);
  // (int4 weight-only: nibbles and scales; linear_8da4w also the weight sums)
  std::vector<uint64_t> rb = {static_cast<uint64_t>(K / 2), static_cast<uint64_t>(K / G) * 4};
  if (!q4w) rb.push_back(static_cast<uint64_t>(K / G) * 4);
  struct Dispatch {
    VkDescriptorSet set;
    MatvecNormPush push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  Phase phase;
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
                  {u32(K), u32(ch.rows), u32(ch.r0), u32(N), 1u, u32(G), 0u, eps},
                  mv.grid(u32(ch.rows), sg)});
    merge(phase, phase_of(k, r));
  }
  auto prepared = std::make_unique<PreparedOp>(
      [ds, &k](VkCommandBuffer cb, int) {
        for (const Dispatch& d : ds) dispatch_flat(cb, k, d.set, d.push, d.groups);
      },
      nullptr);
  prepared->phases = {phase};
  return prepared;
}

std::unique_ptr<PreparedOp> prepare(OpEnv& env, const Match& m, const FusedRun& run) {
  if (m.pat->kind == Kind::PrefillAttention) return prepare_prefill_attention(env, m);
  if (m.pat->kind == Kind::Attention) return prepare_attention(env, m, run.quantize_out);
  if (m.pat->kind == Kind::Tail) return prepare_tail(env, m, run.scratch_in);
  if (m.pat->kind == Kind::Head) return prepare_head(env, m);
  const Program& p = env.program;
  Ctx c{env, *m.mv[0], p};
  c.need(!m.pat->chain_only(),
         "int4 weight-only, biased, post-norm and GeGLU runs fuse only as decode chain stages");
  const bool f16x = c.f16(m.x);
  // The mat-vecs' own outputs (Epi::Add, Swiglu: rounded as the unfused ops store them) and the
  // norm's output dtype (the prologue rounds the normalized row as rms_norm stores it).
  const bool h16 = m.norm && c.f16(m.norm->outputs[0]), o16 = c.f16(m.mv[0]->outputs[0]);
  struct Dispatch {
    VkDescriptorSet set;
    FusedMatvecPush push;
    uint32_t groups;
  };
  std::vector<Dispatch> ds;
  const Kernel* kern = nullptr;
  Phase phase;
  const int outs = m.pat->epi == Epi::Store ? m.pat->matvecs : 1;
  for (int i = 0; i < outs; ++i) {
    const Op& l = *m.mv[i];
    const int32_t y = m.pat->epi == Epi::Store ? l.outputs[0] : m.y;
    const int64_t K = c.width(m.x), N = p.tensors[l.inputs[1]].shape[0];
    const int64_t G = l.attrs["group"].get<int64_t>();
    c.need(c.width(l.inputs[0]) == K && c.width(l.outputs[0]) == N, "fused mat-vec shape");
    const bool y16 = c.f16(y), r16 = m.residual >= 0 && c.f16(m.residual);
    const MatvecShape tn = matvec_shape(env.ctx, K, N);
    const FusedMatvecSpec spec{.x16 = f16x,
                               .y16 = y16,
                               .h16 = h16,
                               .o16 = o16,
                               .r16 = r16,
                               .pro = static_cast<uint32_t>(m.pat->pro),
                               .epi = static_cast<uint32_t>(m.pat->epi),
                               .rps = tn.rps,
                               .bpl = tn.bpl,
                               .parts = tn.parts};
    const bool any16 = f16x || y16 || h16 || o16 || r16;
    if (any16 && !env.ctx.use_fp16()) c.need(false, "fp16 tensors need 16-bit storage");
    kern = &env.kernels.get(
        env.ctx.use_int_dot() ? Shader::linear_8da4w_fused_idot : Shader::linear_8da4w_fused, any16,
        spec);
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
                    {u32(K), u32(ch.rows), u32(ch.r0), u32(G), 0, eps},
                    std::min(tn.max_groups, ceil_div(ch.rows, tn.rps * tn.subgroups))});
      merge(phase, phase_of(*kern, r));
    }
  }
  const Kernel& k = *kern;
  auto prepared = std::make_unique<PreparedOp>(
      [ds, &k](VkCommandBuffer cb, int) {
        for (const Dispatch& d : ds) dispatch_flat(cb, k, d.set, d.push, d.groups);
      },
      nullptr);
  prepared->phases = {phase};
  return prepared;
}

}  // namespace fusion

using namespace fusion;

std::unique_ptr<PreparedOp> prepare_fused(OpEnv& env, const FusedRun& run) {
  const std::string& unfused_family = env.ctx.tuning().corrupt_op;
  Matcher matcher(env.program, env.ctx.info().subgroup_min, unfused_family);
  if (!run.stages.empty()) {
    std::vector<Match> stages;
    for (const FusedRun& st : run.stages)
      if (auto m = rematch(matcher, st, unfused_family)) stages.push_back(*m);
    if (stages.size() != run.stages.size())
      fail("vulkan backend: chain run at op {} no longer matches", run.first);
    return prepare_chain(env, stages);
  }
  if (auto m = rematch(matcher, run, unfused_family)) return prepare(env, *m, run);
  fail("vulkan backend: fused run {} at op {} no longer matches", run.pattern, run.first);
}

}  // namespace vkllm::vk
