// Decode chains (linear_8da4w_chain.comp): consecutive fused runs as the stages of one persistent
// dispatch over a resident grid, its stage table holding the buffers' device addresses.
#include <algorithm>
#include <cstdio>

#include "backend/vulkan/vk_fusion.h"
#include "core/error.h"

namespace vkllm::vk {

namespace fusion {

namespace {

// Two batches of units in flight a subgroup (linear_8da4w_chain.comp PIPE): a batch's loads are
// issued before the batch before it is summed. Measured on the H200:
// two batches of 2 units +2.5-4% over one batch of 4 (the previous default), two batches of 4
// slower.
constexpr uint32_t kChainPipe = 1;

// 32-weight blocks a lane in a chain unit (linear_8da4w_chain.comp UB). Measured on the H200:
// two blocks a unit make int4 weight-only chains 12% faster and 8da4w
// chains 10-15% slower (their row loop holds the int8 row's words too), so q4w chains take 2 and
// the others 1. VKLLM_CHAIN_UB=1|2 overrides (measurement, and the fusion case table).
uint32_t chain_ub(bool q4w, const Tuning& tune) {
  if (tune.chain_ub == 1 || tune.chain_ub == 2) return tune.chain_ub;
  return q4w ? 2 : 1;
}

// Units in a batch: four blocks a lane in flight, in two batches of 2 one-block units (or 1
// two-block unit) or one batch of 4 (deeper batches measured slower).
uint32_t chain_depth(uint32_t ub) {
  return (kChainPipe ? 2 : 4) / ub;
}

// One row loop compiled for each epilogue (one loop for all measured 10% slower).
constexpr uint32_t kChainSpecialize = 1;

// How rows are dealt to subgroups (linear_8da4w_chain.comp DEAL): 1 deals neighbouring rows to
// different workgroups, so that a stage's rows past the grid's first round spread over every SM.
// Measured on the H200 (with attention stages and the norm weight loaded
// before the sync): tg128 +1.0% Phi-4-mini, +0.4% Llama-3.2-1B, +1.3% Qwen3 (int4 weight-only
// chains: +0.7%). VKLLM_CHAIN_DEAL=0|1 overrides (measurement).
uint32_t chain_deal(const Tuning& tune) {
  return tune.chain_deal ? 1 : 0;
}

// The grid sync between two chain stages in two halves (linear_8da4w_chain.comp SPLIT_SYNC): a
// workgroup arrives when its rows are done and sets up the next stage before it waits. Measured on
// the H200 (measured): tg128 +3.1% Phi-4-mini, +3.0% Llama-3.2-1B, +0.4% Qwen3
// with 8da4w stages, -7% with q4w stages, so chains with q4w stages keep the whole sync.
// VKLLM_CHAIN_SPLIT_SYNC=0|1 overrides (measurement).
uint32_t chain_split_sync(bool q4w, const Tuning& tune) {
  if (tune.chain_split_sync >= 0) return tune.chain_split_sync == 1 ? 1 : 0;
  return q4w ? 0 : 1;
}

// The chain kernel's module: int8 dot products or not, the clock (a measurement build's), 512
// threads or 256.
Shader chain_shader(bool idot, bool clock, bool w512) {
  if (clock) {
    if (idot)
      return w512 ? Shader::linear_8da4w_chain_idot_clock_w512
                  : Shader::linear_8da4w_chain_idot_clock;
    if (!w512) return Shader::linear_8da4w_chain_clock;
    fail("vulkan: no chain clock module without int8 dot products at 512 threads");
  }
  if (idot) return w512 ? Shader::linear_8da4w_chain_idot_w512 : Shader::linear_8da4w_chain_idot;
  return w512 ? Shader::linear_8da4w_chain_w512 : Shader::linear_8da4w_chain;
}

}  // namespace

// One persistent dispatch for the chain's stages: the stage table with the buffers' device
// addresses.
std::unique_ptr<PreparedOp> prepare_chain(OpEnv& env, const std::vector<Match>& stages) {
  const Program& p = env.program;
  Context& ctx = env.ctx;
  Ctx c{env, stages.front().attn ? *stages.front().attn : *stages.front().mv[0], p};
  const Tuning& tune = ctx.tuning();
  const uint32_t groups = chain_groups(ctx.info(), tune);
  c.need(groups > 0 && ctx.use_buffer_address(), "decode chains need a resident grid");
  const uint32_t sg = std::max<uint32_t>(1, ctx.info().subgroup_size);
  auto addr = [&](int32_t t) { return ctx.address(c.buf(t)); };
  std::vector<uint32_t> table(stages.size() * kChainWords, 0);
  auto put = [&](size_t at, uint64_t a) {
    table[at] = static_cast<uint32_t>(a);
    table[at + 1] = static_cast<uint32_t>(a >> 32);
  };
  bool any16 = false, any_q4w = false, all_q4w = true, any_int8 = false;
  bool any_post = false;               // post-norm stages or GeGLU epilogues (Gemma 3's)
  uint32_t xv = chain_xv(0);           // the float row's vec4s (linear_8da4w_chain.comp XV)
  uint32_t att_hd = 0, att_flags = 0;  // the attention stages' (linear_8da4w_chain.comp ATT_HD)
  bool any_ring = false;  // a stage's caches are a sliding layer's ring (ATT_FLAGS 128)
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
      const uint32_t fl = attention_flags(p, m);
      c.need(att_hd == 0 || (att_hd == u32(a.hd) && att_flags == fl),
             "a chain's attention stages share one head dim and dtypes");
      att_hd = u32(a.hd);
      att_flags = fl;
      any_ring = any_ring || a.rows < a.ctx;
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
      const uint32_t words[] = {u32(a.H),      u32(a.Hkv),    a.S,   a.C,
                                a.R,           a.orig,        a.ctx, fbits(a.scale),
                                fbits(a.qeps), fbits(a.keps), a.win, a.rows};
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
    const bool q4w = m.pat->q4w();
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
    const bool add = m.pat->epi == Epi::Add, post = m.pat->pro == Pro::PostNorm;
    any_post = any_post || post || m.pat->epi == Epi::Geglu;
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
    if (add || post) flag(c.f16(m.residual), 8);
    const int32_t sum = post ? m.add->outputs[0] : m.x;  // (what a post-norm stage stores)
    if (post) {
      flag(c.f16(m.post->outputs[0]), 512);
      flag(c.f16(sum), 1024);
    }
    const bool bias = m.pat->bias;
    if (bias) flags |= 256;
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
      const bool own = static_cast<int>(k) < outs && m.pat->epi == Epi::Store;
      const int32_t y = bias ? m.biased[k] : own ? l.outputs[0] : m.y;
      put(mat + 8, addr(y));
      if (bias) {  // the mat-vec's output as it would be stored, plus the fp32 bias
        c.need(c.f16(l.outputs[0]) == c.f16(m.mv[0]->outputs[0]),
               "a bias stage's mat-vec outputs share one dtype");
        put(at + 48 + 2 * k, addr(m.bias[k]));
        reads.push_back(c.buf(m.bias[k]));
      }
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
    put(at + 12, add || post ? addr(m.residual) : addr(m.x));
    if (add || post) reads.push_back(c.buf(m.residual));
    // A post-norm stage: its norm's weight and eps, and the sum it stores.
    put(at + 14, post ? addr(m.post->inputs[1]) : addr(m.x));
    table[at + 46] = fbits(post ? m.post->attrs.value("eps", 1e-6f) : 0.0f);
    put(at + 54, addr(sum));
    if (post) writes.push_back(c.buf(sum));
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
  const uint32_t ub = chain_ub(all_q4w, tune);
  const Kernel& k =
      env.kernels.get(chain_shader(ctx.use_int_dot(), clock, chain_wg(tune) == 512), any16,
                      ChainSpec{.depth = chain_depth(ub),
                                .spin_limit = grid_spin_limit(ctx.info()),
                                .measure = tune.chain_noload ? 1u : 0u,
                                .specialize = kChainSpecialize,
                                .xv = xv,
                                .q4w = any_q4w ? 1u : 0u,
                                .pipe = kChainPipe,
                                .deal = chain_deal(tune),
                                .ub = ub,
                                .att_hd = att_hd,
                                .att_flags = att_flags | (any_ring ? 128u : 0u),
                                .split_sync = chain_split_sync(any_q4w, tune),
                                .int8 = any_int8 ? 1u : 0u,
                                .post = any_post ? 1u : 0u});
  std::vector<BufRange> r = {{env.chain_sync.buf, 0, env.chain_sync.size}, {tab.buf, 0, tab.size}};
  if (clock) r.push_back({env.chain_clock.buf.buf, 0, env.chain_clock.buf.size});
  VkDescriptorSet set = env.kernels.make_set(k, r);
  const uint32_t n = u32(static_cast<int64_t>(stages.size()));
  auto prepared = std::make_unique<PreparedOp>(
      [set, &k, n, groups](VkCommandBuffer cb, int) {
        dispatch_flat(cb, k, set, ChainPush{n}, groups);
      },
      nullptr);
  // The stages' tensors, read and written through the table's addresses, with the bindings'.
  Phase phase = phase_of(k, r);
  merge(phase, {reads, writes});
  prepared->phases = {phase};
  return prepared;
}

}  // namespace fusion

using namespace fusion;

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

}  // namespace vkllm::vk
