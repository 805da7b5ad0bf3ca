// Gemma 3's sliding-window attention on Vulkan against the CPU reference, on the tiny-gemma3 twin
// (window 8, layers alternating windowed / global): prefill chunks ending below, at and past the
// window and one crossing its edge, decode steps from below the window to past it, and the
// batched executor's paged attention (the CPU's batched forward first checked against one
// single-sequence forward per sequence); the fused attention runs against the unfused program;
// the attention op alone over a long context; and the sliding layers' caches as rings
// (ir/kv_ring.h): the ring program against the full caches' on both backends, bit for bit, and
// the attention op alone over a ring wrapped several times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <span>

#include "artifact/reader.h"
#include "backend/cpu/kernels.h"
#include "backend/executor.h"
#include "backend/vulkan/vulkan_executor.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "hf/synth.h"
#include "ir/kv_ring.h"
#include "runtime/agreement.h"
#include "testutil/batch_scenario.h"
#include "testutil/tiny_checkpoint.h"
#include "testutil/window_scenario.h"
#include "vk_harness.h"
#include "vkllm/vkllm.h"

namespace vkllm::test::gemma3 {
namespace {

// The non-quantized artifact of the twin (a small tokenizer in place of the fixture's) at a
// context of `ctx`, written once per process and removed at its exit.
// softcap > 0: the checkpoint's final_logit_softcapping.
struct Artifact {
  std::string root, path;
  explicit Artifact(int ctx, double softcap = 0)
      : root(testutil::temp_dir("vkgemma3")), path(root + "/tiny-gemma3.vkllm") {
    SynthOptions so;
    so.preset = "tiny-gemma3";
    so.out_dir = root + "/twin";
    so.no_tokenizer = true;
    so.final_logit_softcapping = softcap;
    synth_write(so);
    write_text_file(so.out_dir + "/tokenizer.json", testutil::tiny_tokenizer_json());
    RecipeOptions o;
    o.recipe = "non-quantized";
    o.max_context = ctx;
    export_checkpoint(so.out_dir, path, o);
  }
  ~Artifact() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};
const std::string& artifact() {
  static const Artifact a(64);
  return a.path;
}

// A prompt in chunks of max_tokens, then greedy decode steps: the same ids on both backends,
// logits within the recipe's bound at every step.
void agree(const std::vector<int32_t>& prompt, int max_tokens, int steps,
           const std::string& path = artifact()) {
  ArtifactReader r(path);
  ASSERT_EQ(r.desc().layer_window, (std::vector<int>{8, 0, 8, 0}));
  const int vocab = r.desc().vocab;
  const double bound = agreement_bounds("non-quantized").max_nmse;
  const uint64_t msgs = vk::validation_message_count();
  VulkanOptions opt = validated();
  opt.max_tokens = max_tokens;
  auto gpu = make_vulkan_executor(r.program(), r, opt);
  auto cpu = make_cpu_executor(r.program(), r);
  std::vector<float> lc(static_cast<size_t>(vocab)), lg(lc.size());
  int32_t c = cpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lc.data());
  int32_t g = gpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, lg.data());
  ASSERT_EQ(g, c);
  EXPECT_LE(nmse(lg, lc), bound);
  int pos = static_cast<int>(prompt.size());
  for (int i = 0; i < steps; ++i, ++pos) {
    c = cpu->forward(&c, 1, pos, lc.data());
    g = gpu->forward(&g, 1, pos, lg.data());
    ASSERT_EQ(g, c) << "position " << pos;
    EXPECT_LE(nmse(lg, lc), bound) << "position " << pos;
  }
  gpu.reset();
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// The twin's program with its sliding layers' caches as rings of window + 4 rows (12 rows: a
// forward writes at most 5 tokens), so that short runs wrap them several times.
constexpr int64_t kRingTokens = 4, kRingRows = 12;
Program ring_program(const Program& p) {
  Program q = with_ring_caches(p, kRingTokens);
  for (const Op& op : q.ops) {
    if (op.family != "attention") continue;
    EXPECT_EQ(q.tensors[op.inputs[3]].shape[0], op.attrs.contains("window") ? kRingRows : 64)
        << q.tensors[op.inputs[3]].name;
  }
  return q;
}

// The ring runs' sequence: an 11-token prompt (chunks of 5 across the window's edge and the
// ring's first wrap), decode steps to position 25, a 7-token forward at 26 (chunks of 5 and 2,
// well past several wraps), decode steps to 44. Each forward's logits and token, in order.
std::vector<float> ring_run(Executor& e, int vocab) {
  std::vector<float> all, l(static_cast<size_t>(vocab));
  auto keep = [&](int32_t t) {
    all.insert(all.end(), l.begin(), l.end());
    all.push_back(static_cast<float>(t));
    return t;
  };
  const std::vector<int32_t> prompt = {5, 17, 299, 0, 42, 262143, 7, 100, 3, 2, 11};
  int32_t t = keep(e.forward(prompt.data(), 11, 0, l.data()));
  for (int pos = 11; pos < 26; ++pos) t = keep(e.forward(&t, 1, pos, l.data()));
  const std::vector<int32_t> more = {t, 8, 1000, 77, 6, 31337, 12};
  t = keep(e.forward(more.data(), 7, 26, l.data()));
  for (int pos = 33; pos < 45; ++pos) t = keep(e.forward(&t, 1, pos, l.data()));
  return all;
}

size_t differing(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

}  // namespace

// Chunks of 5: positions 0-4 (below the window), 5-9 (crossing its edge: position 7 sees exactly
// 8 keys, 8 and 9 drop the first ones), 10; then decode steps at 11-16.
TEST(VulkanGemma3, ChunkedPrefillAcrossTheWindowEdge) {
  agree({5, 17, 299, 0, 42, 262143, 7, 100, 3, 2, 11}, 5, 6);
}

// One chunk of exactly the window (positions 0-7), then decode steps from 8 to 13.
TEST(VulkanGemma3, PrefillAtTheWindowThenDecodePastIt) {
  agree({9, 8, 7, 6, 5, 4, 3, 2}, 8, 6);
}

// A two-token prompt, then decode steps from below the window (2-7) to past it (8-13).
TEST(VulkanGemma3, DecodeFromBelowToPastTheWindow) {
  agree({1000, 2}, 8, 12);
}

// The batched forward (paged KV blocks, rows of several sequences; positions up to 15): the CPU's
// batched forward equals one CPU forward per sequence, and Vulkan's batched forward agrees with it.
TEST(VulkanGemma3, BatchedForwardWithWindows) {
  ArtifactReader r(artifact());
  const int vocab = r.desc().vocab;
  const testutil::BatchScenario sc;
  auto cpu = make_cpu_batch_executor(r.program(), r, sc.kBlocks, sc.kBlockTokens, 32);
  const auto want = sc.run_batched(*cpu, vocab);
  const auto single = sc.run_single([&] { return make_cpu_executor(r.program(), r); }, vocab);
  ASSERT_EQ(single.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].token, single[i].token) << i;
    EXPECT_LE(nmse(want[i].logits, single[i].logits), 1e-10) << i;
  }
  const AgreementBounds& bounds = agreement_bounds("non-quantized");
  const uint64_t msgs = vk::validation_message_count();
  {
    auto loaded = load_vulkan_program(r.program(), r, validated());
    auto gpu = loaded->make_batch_executor(sc.kBlocks, sc.kBlockTokens, 32);
    const auto got = sc.run_batched(*gpu, vocab);
    expect_batch_agrees(got, want, bounds.max_nmse, bounds.max_tie_margin);
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// The sliding layers' KV in a window pool of their own (the batched engine's KV groups): the
// scheduler's plans for five requests running to 4-7 windows' positions, the window pool of 20
// blocks holding 5 a request, its blocks released past the window and handed to other requests.
// The CPU's batched forward equals one CPU forward per request (a prefix hit's prompt prefilled
// first), and Vulkan's agrees with it, with the fused attention runs and without.
TEST(VulkanGemma3, BatchedWindowPoolReleasesAndReusesBlocks) {
  ArtifactReader r(artifact());
  const int vocab = r.desc().vocab;
  const testutil::WindowScenario sc;
  auto cpu = make_cpu_batch_executor(r.program(), r, sc.kFullBlocks, sc.kBlockTokens, 32,
                                     sc.kWindowBlocks);
  EXPECT_EQ(cpu->window_blocks(), sc.kWindowBlocks);
  const auto want = sc.run_batched(*cpu, vocab);
  const auto single = sc.run_single([&] { return make_cpu_executor(r.program(), r); }, want, vocab);
  ASSERT_EQ(single.size(), want.out.size());
  ASSERT_GT(want.out.size(), 100u);
  for (size_t i = 0; i < single.size(); ++i) {
    EXPECT_EQ(want.out[i].seq, single[i].seq) << i;
    EXPECT_EQ(want.out[i].token, single[i].token) << i;
    EXPECT_LE(nmse(want.out[i].logits, single[i].logits), 1e-10) << i;
  }
  // Positions up to 56 need 14 blocks each in the full pool, at most 5 in the window pool.
  EXPECT_GT(want.most_full_used, sc.kWindowBlocks);
  EXPECT_LE(want.most_window_per_seq, 5);
  EXPECT_LE(want.most_window_used, sc.kWindowBlocks);
  EXPECT_GT(want.window_blocks_shared_over_time, 5);
  EXPECT_EQ(want.prefix_hit_tokens, 40u);  // request 5's 10 blocks, in both pools
  const AgreementBounds& bounds = agreement_bounds("non-quantized");
  const uint64_t msgs = vk::validation_message_count();
  for (const bool fused : {true, false}) {  // the attention runs, and the unfused attention ops
    SCOPED_TRACE(fused ? "fused" : "unfused");
    VulkanOptions o = validated();
    o.no_fusion = !fused;
    auto loaded = load_vulkan_program(r.program(), r, o);
    auto gpu = loaded->make_batch_executor(sc.kFullBlocks, sc.kBlockTokens, 32, sc.kWindowBlocks);
    const auto got = sc.run_batched(*gpu, vocab);
    expect_batch_agrees(got.out, want.out, bounds.max_nmse, bounds.max_tie_margin);
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// The continuous-batching Engine on the twin at a context of 64 (blocks of 4, steps of 8: the
// sliding layers' pool holds 5 blocks a request, the full layers' 16): requests decoding to 4-7
// windows' positions, arriving while others run, one sharing another's prefix, on the CPU and on
// Vulkan: each request's tokens are those a Session gives it alone on the same backend, the
// window pool's blocks in use stay within 5 a running request while the full pool's grow, and the
// pool's figures are the split of docs/serve.md. A sixth request, added when the first finishes,
// continues the first's tokens: its prefix hit takes blocks of both pools.
TEST(VulkanGemma3, EngineWithAWindowPoolMatchesEachAlone) {
  for (const char* backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    ModelOptions mo;
    mo.backend = backend;
    auto m = Model::open(artifact(), mo);
    EngineOptions eo;
    eo.max_sequences = 4;
    eo.block_tokens = 4;
    eo.step_tokens = 8;
    Engine e(m, eo);
    const uint64_t row = 2 * 256 * 4;  // K and V of one position, one layer
    EngineStats st = e.stats();
    EXPECT_EQ(st.kv_window, 8);
    EXPECT_EQ(st.kv_blocks_total, 4 * 16 + 1);
    EXPECT_EQ(st.kv_window_blocks_total, 4 * 5);
    EXPECT_EQ(st.kv_block_bytes, 2 * row * 4);  // two global layers, blocks of 4
    EXPECT_EQ(st.kv_window_block_bytes, 2 * row * 4);
    if (std::string(backend) == "cpu") {  // a budget: two sequences' bounded need, split
      EngineOptions eb = eo;
      eb.kv_budget_bytes = 2 * (16 + 5) * (2 * row * 4) + 100;
      const EngineStats sb = Engine(m, eb).stats();
      EXPECT_EQ(sb.kv_window_blocks_total, 2 * 5);
      EXPECT_EQ(sb.kv_blocks_total, 32);  // (the budget less 10 window blocks) / block bytes
      eb.kv_budget_bytes = 5 * (2 * row * 4);
      try {
        Engine too_small(m, eb);
        ADD_FAILURE() << "a budget of one sequence's window blocks and no full block";
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("cannot hold the sliding-window layers' 5 blocks"),
                  std::string::npos)
            << err.what();
      }
    }
    const std::vector<int> lens = {13, 5, 21, 3, 17}, news = {40, 50, 30, 45, 25},
                           arrive = {0, 0, 2, 6, 200};
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 5; ++i)
      prompts.push_back(testutil::WindowScenario::ids(lens[i], i == 4 ? 1 : i + 1));
    std::map<uint64_t, size_t> which;
    std::vector<std::vector<int32_t>> got(6);
    std::vector<int> news6 = news;
    news6.push_back(10);
    size_t done = 0;
    int most_window = 0, most_full = 0, cached = 0;
    auto add = [&](size_t j) {
      GenerationOptions go;
      go.max_new_tokens = news6[j];
      go.stop_at_eos = false;
      which[e.add(prompts[j], go)] = j;
    };
    for (int step = 0; done < 6 && step < 2000; ++step) {
      for (size_t j = 0; j < 5; ++j)
        if (arrive[j] == step) add(j);
      for (const EngineEvent& ev : e.step()) {
        const size_t j = which.at(ev.request);
        if (ev.token >= 0) got[j].push_back(ev.token);
        done += ev.finished;
        EXPECT_NE(ev.finish_reason, "error") << ev.text;
        if (j == 5 && ev.finished) cached = ev.cached_tokens;
        if (j == 0 && ev.finished) {  // the first's tokens (its last never fed back) and one more
          prompts.push_back(prompts[0]);
          prompts.back().insert(prompts.back().end(), got[0].begin(), got[0].end() - 1);
          prompts.back().push_back(7);
          add(5);
        }
      }
      st = e.stats();
      EXPECT_LE(st.kv_window_blocks_used, 5 * st.active) << step;
      most_window = std::max(most_window, st.kv_window_blocks_used);
      most_full = std::max(most_full, st.kv_blocks_used);
    }
    EXPECT_EQ(done, 6u);
    EXPECT_GT(most_full, 3 * 5);
    EXPECT_GT(most_window, 0);
    EXPECT_EQ(cached, 52);  // the first's 53 tokens with KV: 13 blocks
    for (size_t j = 0; j < 6; ++j) {
      GenerationOptions go;
      go.max_new_tokens = news6[j];
      go.stop_at_eos = false;
      Session s(m);
      EXPECT_EQ(got[j], s.generate(prompts[j], go)) << "request " << j;
    }
  }
}

// The fused attention runs (each layer's q/k norms, ropes and attention, vk_fusion.h) against the
// unfused program on the twin, bit for bit: the chunked prompt and decode steps of
// ChunkedPrefillAcrossTheWindowEdge on the single-sequence executor, and the batched scenario on
// the batched executor; every layer's attention fused, the sliding ones too (the profiles' plans).
TEST(VulkanGemma3, FusedRunsEqualTheUnfusedProgram) {
  ArtifactReader r(artifact());
  const int vocab = r.desc().vocab, layers = 4;
  const std::string run = "rms_norm x2+rope x2+attention";
  const uint64_t msgs = vk::validation_message_count();
  auto options = [](bool fused, int max_tokens) {
    VulkanOptions o = validated();
    o.no_fusion = !fused;
    o.profile = true;
    o.max_tokens = max_tokens;
    return o;
  };
  auto single = [&](bool fused, std::string* profile) {
    std::vector<float> all, l(static_cast<size_t>(vocab));
    ::testing::internal::CaptureStderr();
    {
      auto gpu = make_vulkan_executor(r.program(), r, options(fused, 5));  // chunks of 5
      const std::vector<int32_t> prompt = {5, 17, 299, 0, 42, 262143, 7, 100, 3, 2, 11};
      int32_t t = gpu->forward(prompt.data(), static_cast<int>(prompt.size()), 0, l.data());
      all = l;
      for (int pos = static_cast<int>(prompt.size()); pos < 17; ++pos) {
        t = gpu->forward(&t, 1, pos, l.data());
        all.insert(all.end(), l.begin(), l.end());
        all.push_back(static_cast<float>(t));
      }
    }
    *profile = ::testing::internal::GetCapturedStderr();
    return all;
  };
  auto batched = [&](bool fused, std::string* profile) {
    const testutil::BatchScenario sc;
    std::vector<float> all;
    ::testing::internal::CaptureStderr();
    {
      auto gpu = load_vulkan_program(r.program(), r, options(fused, 32))
                     ->make_batch_executor(sc.kBlocks, sc.kBlockTokens, 32);
      for (const auto& o : sc.run_batched(*gpu, vocab)) {
        all.insert(all.end(), o.logits.begin(), o.logits.end());
        all.push_back(static_cast<float>(o.token));
      }
    }
    *profile = ::testing::internal::GetCapturedStderr();
    return all;
  };
  for (const bool batch : {false, true}) {
    std::string pu, pf;
    const std::vector<float> unfused = batch ? batched(false, &pu) : single(false, &pu);
    const std::vector<float> fused = batch ? batched(true, &pf) : single(true, &pf);
    ASSERT_EQ(fused.size(), unfused.size());
    size_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += fused[i] != unfused[i];
    EXPECT_EQ(differ, 0u) << "of " << fused.size() << " logits and tokens";
    // (The batched executor runs every forward on its prefill plan here: no decode runs.)
    EXPECT_EQ(profile_steps(pu, "decode", "attention") + profile_steps(pu, "prefill", "attention"),
              batch ? layers : 2 * layers)
        << pu;
    if (!batch) {
      EXPECT_EQ(profile_steps(pf, "decode", run), layers) << pf;
      EXPECT_EQ(profile_steps(pf, "decode", "attention"), 0) << pf;
      // Prefill runs where the device has a prefill attention kernel for head dim 256.
      const int prefill = profile_steps(pf, "prefill", run + ", prefill");
      EXPECT_TRUE(prefill == 0 || prefill == layers) << pf;
    } else {
      EXPECT_EQ(profile_steps(pf, "prefill", run + ", prefill"), layers) << pf;
      EXPECT_EQ(profile_steps(pf, "prefill", "attention"), 0) << pf;
    }
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// One windowed attention op over caches of `rows` rows (dtype `cache`): q, k, v and the caches'
// contents as given; returns the ids of the key cache and the output.
struct AttentionCase {
  int32_t kc, y;
};
AttentionCase add_windowed_attention(Case& c, DType cache, int H, int Hkv, int hd, int64_t rows,
                                     int win, float scale, const std::vector<float>& q,
                                     const std::vector<float>& k, const std::vector<float>& v,
                                     const std::vector<float>& kc, const std::vector<float>& vc) {
  const int64_t W = int64_t(Hkv) * hd;
  auto enc = [&](const std::vector<float>& f) {
    return cache == DType::F16 ? bytes_f16(f) : bytes_f32(f);
  };
  const int32_t tq = c.add("q", DType::F32, TensorKind::Activation, {-1, H * hd}, bytes_f32(q));
  const int32_t tk = c.add("k", DType::F32, TensorKind::Activation, {-1, W}, bytes_f32(k));
  const int32_t tv = c.add("v", DType::F32, TensorKind::Activation, {-1, W}, bytes_f32(v));
  const int32_t tkc = c.add("kc", cache, TensorKind::KVCache, {rows, W}, enc(kc));
  const int32_t tvc = c.add("vc", cache, TensorKind::KVCache, {rows, W}, enc(vc));
  const int32_t ty = c.add("o", DType::F32, TensorKind::Activation, {-1, int64_t(H) * hd});
  c.op("attention", {tq, tk, tv, tkc, tvc}, ty,
       {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", hd}, {"scale", scale}, {"window", win}});
  return {tkc, ty};
}

// The attention op with a window alone, against the CPU reference's: a long context (the decode
// step's keys in several parts, some wholly before the window), a window that is no multiple of
// the 64-key tiles, prefill rows below, at and past it, grouped-query heads, fp32 and fp16 caches.
TEST(VulkanGemma3, WindowedAttentionOp) {
  const int H = 4, Hkv = 2, hd = 64, ctx = 512, win = 37;
  const int64_t W = int64_t(Hkv) * hd;
  for (const DType cache : {DType::F32, DType::F16})
    for (const auto& [T, pos] :
         {std::pair{1, 20}, {1, 36}, {1, 37}, {1, 300}, {1, 511}, {40, 0}, {30, 100}}) {
      SCOPED_TRACE(::testing::Message()
                   << "T " << T << " pos " << pos << " cache " << dtype_name(cache));
      std::mt19937 rng(static_cast<unsigned>(T * 1000 + pos));
      Case c;
      c.p.max_ctx = ctx;
      auto q = rand_vec(rng, static_cast<size_t>(T * H * hd)),
           k = rand_vec(rng, static_cast<size_t>(T * W)),
           v = rand_vec(rng, static_cast<size_t>(T * W));
      auto kc = rand_vec(rng, static_cast<size_t>(ctx * W)),
           vc = rand_vec(rng, static_cast<size_t>(ctx * W));
      if (cache == DType::F16) kc = round_f16(kc), vc = round_f16(vc);
      const float scale = 0.125f;
      const AttentionCase ac =
          add_windowed_attention(c, cache, H, Hkv, hd, ctx, win, scale, q, k, v, kc, vc);
      std::vector<float> want(q.size()), full(q.size());
      auto kc2 = kc, vc2 = vc;
      cpu::attention(q.data(), k.data(), v.data(), T, pos, kc.data(), vc.data(),
                     cache == DType::F16, H, Hkv, hd, scale, want.data(), win);
      cpu::attention(q.data(), k.data(), v.data(), T, pos, kc2.data(), vc2.data(),
                     cache == DType::F16, H, Hkv, hd, scale, full.data());
      OpRun r(c, T, validated());
      r.forward(T, pos);
      const std::vector<float> got = r.read(ac.y, T);
      EXPECT_LE(nmse(got, want), 1e-10);
      if (pos + T > win) {
        EXPECT_GT(nmse(got, full), 1e-4);  // the window cut something off
      }
    }
}

// The sliding layers' caches as rings of 12 rows (window 8) against the full caches, on Vulkan:
// the same forwards in chunks of 5 give the same bits, fused (decode runs and chains, prefill
// runs) and unfused; and the ring agrees with the CPU reference (the same tokens, logits within
// the recipe's bound), as do greedy decode steps submitted several at once.
TEST(VulkanGemma3, RingCachesEqualFullCaches) {
  ArtifactReader r(artifact());
  const int vocab = r.desc().vocab;
  const Program ring = ring_program(r.program());
  EXPECT_EQ(ring_forward_tokens(ring), 5);
  const uint64_t msgs = vk::validation_message_count();
  const std::vector<float> cpu = ring_run(*make_cpu_executor(ring, r), vocab);
  const double bound = agreement_bounds("non-quantized").max_nmse;
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    VulkanOptions o = validated();
    o.no_fusion = !fused;
    o.max_tokens = 5;  // the ring's chunks, for the full caches too
    const std::vector<float> full = ring_run(*make_vulkan_executor(r.program(), r, o), vocab);
    o.max_tokens = 0;  // (the ring sets the chunks)
    auto gpu = make_vulkan_executor(ring, r, o);
    const std::vector<float> got = ring_run(*gpu, vocab);
    EXPECT_EQ(differing(got, full), 0u) << "of " << got.size() << " logits and tokens";
    const size_t row = static_cast<size_t>(vocab) + 1;
    ASSERT_EQ(got.size(), cpu.size());
    for (size_t i = 0; i < got.size() / row; ++i) {
      const std::span<const float> g(got.data() + i * row, row), c(cpu.data() + i * row, row);
      ASSERT_EQ(g.back(), c.back()) << "forward " << i;
      EXPECT_LE(nmse(std::vector<float>(g.begin(), g.end() - 1),
                     std::vector<float>(c.begin(), c.end() - 1)),
                bound)
          << "forward " << i;
    }
    // Greedy steps a submit (at most the ring's 5) from position 45 on: the CPU's tokens.
    auto cpu_ex = make_cpu_executor(ring, r);
    ring_run(*cpu_ex, vocab);
    const int n = gpu->greedy_batch();
    EXPECT_LE(n, 5);
    int32_t first = static_cast<int32_t>(got.back()), c_first = first;
    for (int pos = 45; pos < 60; pos += n) {
      std::vector<int32_t> out(static_cast<size_t>(n)), want(out.size());
      gpu->decode_greedy(first, pos, n, out.data());
      cpu_ex->decode_greedy(c_first, pos, n, want.data());
      ASSERT_EQ(out, want) << "steps from position " << pos;
      first = c_first = out.back();
    }
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

// The attention op alone with a window of 37 over ring caches of 77 rows (forwards of at most 41
// tokens) at a context of 512: decode steps below the ring, at its edge and wrapped (up to six
// times), prefill rows below, at and past the window, one of 41 tokens that wraps the ring in its
// middle; fp32 and fp16 caches. The CPU reference over the ring gives the bits it gives over full
// caches, Vulkan over the ring the bits of Vulkan over full caches and the CPU's within 1e-10,
// and both store the forward's keys and values at rows pos % 77.
TEST(VulkanGemma3, WindowedAttentionOpOverARing) {
  const int H = 4, Hkv = 2, hd = 64, ctx = 512, win = 37, R = 77;
  ASSERT_EQ(ring_rows(ctx, win, 40), R);
  const int64_t W = int64_t(Hkv) * hd;
  for (const DType cache : {DType::F32, DType::F16})
    for (const auto& [T_, pos_] : {std::pair{1, 20},
                                   {1, 76},
                                   {1, 77},
                                   {1, 78},
                                   {1, 300},
                                   {1, 511},
                                   {40, 0},
                                   {41, 36},
                                   {30, 100},
                                   {41, 60},
                                   {41, 470}}) {
      const int T = T_, pos = pos_;  // (lambdas do not capture structured bindings in clang 14)
      SCOPED_TRACE(::testing::Message()
                   << "T " << T << " pos " << pos << " cache " << dtype_name(cache));
      std::mt19937 rng(static_cast<unsigned>(T * 1000 + pos));
      auto q = rand_vec(rng, static_cast<size_t>(T * H * hd)),
           k = rand_vec(rng, static_cast<size_t>(T * W)),
           v = rand_vec(rng, static_cast<size_t>(T * W));
      auto kc = rand_vec(rng, static_cast<size_t>(ctx * W)),
           vc = rand_vec(rng, static_cast<size_t>(ctx * W));
      // The ring as the positions before `pos` left it: row r holds the last position j < pos
      // with j % R == r (other rows: values of no position).
      auto kr = rand_vec(rng, static_cast<size_t>(R * W)), vr = rand_vec(rng, kr.size());
      for (int j = 0; j < pos; ++j) {
        std::copy_n(kc.begin() + j * W, W, kr.begin() + (j % R) * W);
        std::copy_n(vc.begin() + j * W, W, vr.begin() + (j % R) * W);
      }
      if (cache == DType::F16)
        kc = round_f16(kc), vc = round_f16(vc), kr = round_f16(kr), vr = round_f16(vr);
      const float scale = 0.125f;
      std::vector<float> want(q.size()), want_ring(q.size());
      auto kc2 = kc, vc2 = vc, kr2 = kr, vr2 = vr;
      cpu::attention(q.data(), k.data(), v.data(), T, pos, kc2.data(), vc2.data(),
                     cache == DType::F16, H, Hkv, hd, scale, want.data(), win);
      cpu::attention(q.data(), k.data(), v.data(), T, pos, kr2.data(), vr2.data(),
                     cache == DType::F16, H, Hkv, hd, scale, want_ring.data(), win, R);
      EXPECT_EQ(differing(want_ring, want), 0u);
      for (int t = 0; t < T; ++t)
        ASSERT_TRUE(std::equal(kc2.begin() + (pos + t) * W, kc2.begin() + (pos + t + 1) * W,
                               kr2.begin() + ((pos + t) % R) * W))
            << "CPU ring store of position " << pos + t;
      auto device = [&](int rows, const std::vector<float>& kcache,
                        const std::vector<float>& vcache, std::vector<float>* kout) {
        Case c;
        c.p.max_ctx = ctx;
        const AttentionCase ac =
            add_windowed_attention(c, cache, H, Hkv, hd, rows, win, scale, q, k, v, kcache, vcache);
        OpRun run(c, T, validated());
        run.forward(T, pos);
        *kout = run.read(ac.kc, rows);
        return run.read(ac.y, T);
      };
      std::vector<float> kfull, kring;
      const std::vector<float> full = device(ctx, kc, vc, &kfull);
      const std::vector<float> got = device(R, kr, vr, &kring);
      EXPECT_EQ(differing(got, full), 0u);
      EXPECT_LE(nmse(got, want_ring), 1e-10);
      EXPECT_EQ(kring, kr2) << "the device's ring after the store";
    }
}

// final_logit_softcapping on the twin: the capped checkpoint's logits are transformers'
// cap * tanh(logits / cap) of the plain one's on the CPU (the same weights), the cap (below the
// largest logits) changes them, and Vulkan agrees with the CPU on them, prefill and decode.
TEST(VulkanGemma3, FinalLogitSoftcapping) {
  constexpr double kCap = 2.0;
  static const Artifact capped(64, kCap);
  ArtifactReader plain(artifact()), r(capped.path);
  const int vocab = r.desc().vocab;
  size_t caps = 0;
  for (const Op& op : r.program().ops) caps += op.family == "softcap";
  ASSERT_EQ(caps, 1u);
  auto cpu_plain = make_cpu_executor(plain.program(), plain);
  auto cpu_capped = make_cpu_executor(r.program(), r);
  const std::vector<int32_t> prompt = {2, 17, 301, 5};
  std::vector<float> raw(static_cast<size_t>(vocab)), got(raw.size());
  cpu_plain->forward(prompt.data(), 4, 0, raw.data());
  cpu_capped->forward(prompt.data(), 4, 0, got.data());
  float most = 0, moved = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const float want = std::tanh(raw[i] / float(kCap)) * float(kCap);
    ASSERT_EQ(got[i], want) << i << ": raw " << raw[i];
    most = std::max(most, std::abs(raw[i]));
    moved = std::max(moved, std::abs(got[i] - raw[i]));
  }
  EXPECT_GT(most, kCap) << "the cap would change no logit much";
  EXPECT_GT(moved, 0.1f);
  agree(prompt, 4, 3, capped.path);
}

// The memory figure (ModelInfo::kv_cache_bytes, `vkllm bench`'s kv_cache_mib): the twin at a
// context of 1,024 holds its two global layers' caches of 1,024 rows and its two sliding layers'
// rings of 8 + 512 = 520 rows (K and V, 256 fp32 values a row), on both backends; at a context of
// 300 (shorter than a ring) every layer's 300 rows. A session on the ring model generates the
// CPU's tokens on Vulkan over 560 positions (the 520-row rings wrapped).
TEST(VulkanGemma3, MemoryFigureCountsTheRings) {
  static const Artifact a(1024);     // (its sliding layers' rings shorter than its context)
  const uint64_t row = 2 * 256 * 4;  // K and V of one position, one layer
  for (const char* backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    ModelOptions mo;
    mo.backend = backend;
    auto m = Model::open(a.path, mo);
    EXPECT_EQ(m->info().context_length, 1024);
    EXPECT_EQ(m->info().kv_cache_bytes, row * (2 * 1024 + 2 * 520));
    mo.context_length = 300;
    EXPECT_EQ(Model::open(a.path, mo)->info().kv_cache_bytes, row * 4 * 300);
  }
  std::vector<int32_t> prompt(540);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 131 + 7) % 500);
  GenerationOptions go;
  go.max_new_tokens = 20;
  go.stop_at_eos = false;
  std::vector<std::vector<int32_t>> outs;
  for (const char* backend : {"cpu", "vulkan"}) {
    ModelOptions mo;
    mo.backend = backend;
    Session s(Model::open(a.path, mo));
    outs.push_back(s.generate(prompt, go));
  }
  EXPECT_EQ(outs[0].size(), 20u);
  EXPECT_EQ(outs[1], outs[0]);
}

}  // namespace vkllm::test::gemma3
