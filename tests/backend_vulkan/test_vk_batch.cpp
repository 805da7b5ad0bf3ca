// The Vulkan batched forward (docs/ir.md "Batched forward") against the CPU reference's, on the
// scenario of tests/testutil/batch_scenario.h (scattered KV blocks, prefill rows beside decode
// rows, a shuffled row order): every output row's logits within the recipe's NMSE bound and the
// same token unless the CPU's top two are a near tie; and the malformed batches it refuses.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/vulkan/vulkan_executor.h"
#include "runtime/agreement.h"
#include "testutil/batch_scenario.h"
#include "vk_harness.h"

using namespace vkllm;
using namespace vkllm::test;
using toy::Emb;
using toy::Toy;
using toy::ToyConfig;

namespace {

struct Named {
  const char* name;
  ToyConfig cfg;
  // Tuning::attn_batch_gq: -1 the device's rule (lavapipe: a workgroup takes a KV head's group of
  // query heads in every forward), 0 a workgroup a query head.
  int batch_gq = -1;
};

class VulkanBatch : public ::testing::TestWithParam<Named> {};

}  // namespace

TEST_P(VulkanBatch, EqualsTheCpuReference) {
  const ToyConfig& cfg = GetParam().cfg;
  const Toy toy = toy::build_toy(cfg, 31);
  const testutil::BatchScenario sc;
  const int vocab = static_cast<int>(toy::kVocab);
  const uint64_t msgs = vk::validation_message_count();
  const AgreementBounds& bounds = agreement_bounds(toy::toy_recipe(cfg));
  auto cpu = make_cpu_batch_executor(toy.p, toy.w, sc.kBlocks, sc.kBlockTokens, 32);
  const auto want = sc.run_batched(*cpu, vocab);
  {
    VulkanOptions opt = validated();
    opt.tuning.attn_batch_gq = GetParam().batch_gq;
    auto loaded = load_vulkan_program(toy.p, toy.w, opt);
    auto gpu = loaded->make_batch_executor(sc.kBlocks, sc.kBlockTokens, 32);
    EXPECT_STREQ(gpu->name(), "vulkan");
    const auto got = sc.run_batched(*gpu, vocab);
    expect_batch_agrees(got, want, bounds.max_nmse, bounds.max_tie_margin);
  }
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
}

INSTANTIATE_TEST_SUITE_P(
    Toys, VulkanBatch,
    ::testing::Values(
        Named{"f32", {}},
        Named{"a8w4_f16_qknorm", {Lin::A8W4, Emb::Q4, DType::F16, DType::F16, true, false}},
        Named{"q4w_long_rope", {Lin::Q4W, Emb::F16, DType::F32, DType::F16, false, true}},
        Named{"f32_head_a_workgroup", {}, 0},
        Named{"a8w4_f16_qknorm_head_a_workgroup",
              {Lin::A8W4, Emb::Q4, DType::F16, DType::F16, true, false},
              0}),
    [](const auto& p) { return std::string(p.param.name); });

// One sequence alone, one row a forward (the batch of one): the same tokens as the CPU's.
TEST(VulkanBatchChecks, OneRowForwardsAndRefusals) {
  const Toy toy = toy::build_toy({Lin::A8W4, Emb::Q4}, 5);
  auto loaded = load_vulkan_program(toy.p, toy.w, validated());
  auto gpu = loaded->make_batch_executor(4, 8, 4);
  auto cpu = make_cpu_batch_executor(toy.p, toy.w, 4, 8, 4);
  const int32_t table[4] = {3, 0, 2, 1}, seq = 0, row = 0;
  int32_t tok_g = 7, tok_c = 7;
  for (int32_t p = 0; p < 20; ++p) {
    int32_t ng = -1, nc = -1;
    BatchForward b;
    b.T = 1;
    b.pos = &p;
    b.seq = &seq;
    b.n_seqs = 1;
    b.block_table = table;
    b.table_stride = 4;
    b.out_rows = &row;
    b.n_out = 1;
    b.ids = &tok_g;
    b.next_tokens = &ng;
    gpu->forward(b);
    b.ids = &tok_c;
    b.next_tokens = &nc;
    cpu->forward(b);
    ASSERT_EQ(ng, nc) << "position " << p;
    tok_g = ng;
    tok_c = nc;
  }
  const int32_t ids[5] = {1, 2, 3, 4, 5}, pos[5] = {0, 1, 2, 3, 4}, seqs[5] = {0, 0, 0, 0, 0};
  int32_t next = 0;
  BatchForward b;
  b.T = 5;
  b.ids = ids;
  b.pos = pos;
  b.seq = seqs;
  b.n_seqs = 1;
  b.block_table = table;
  b.table_stride = 4;
  b.out_rows = &row;
  b.n_out = 1;
  b.next_tokens = &next;
  EXPECT_THROW(gpu->forward(b), Error);  // 5 rows, the executor takes 4
  EXPECT_THROW(loaded->make_batch_executor(4, 8, 1 << 20), Error);
}

// A batched executor's one-row forwards take the decode plan's fused runs (the mat-vec runs as
// decode chains of two workgroups here, forced: lavapipe has none by default), and every forward
// the attention runs (the q/k norms and ropes in the batched KV store and attention): the same
// logits, bit for bit, as the unfused batched executor's, over a prompt, decode steps that cross
// KV blocks and a forward of two sequences at other positions; the profile shows the chains and
// attention runs.
// The third toy's layer 0 has Gemma 3's sliding window of 5 keys: the prompt (positions 0-5)
// reaches and passes it, the decode steps (6-20) are past it, the second sequence's prompt
// (0-2) below it.
TEST(VulkanBatchChecks, OneRowForwardsTakeTheDecodeChains) {
  for (const ToyConfig& cfg : {ToyConfig{Lin::A8W4, Emb::Q4, DType::F16, DType::F16, true, false},
                               ToyConfig{Lin::Q4W, Emb::F16, DType::F32, DType::F16, false, true},
                               ToyConfig{Lin::A8W4, Emb::Q4, DType::F16, DType::F16, true, false,
                                         48, 96, nullptr, 64, 16, false, 5}}) {
    SCOPED_TRACE(::testing::Message()
                 << "toy: " << (cfg.lin == Lin::A8W4 ? "a8w4" : "q4w")
                 << (cfg.act == DType::F16 ? " f16" : " f32") << (cfg.qk_norm ? " qk_norm" : "")
                 << (cfg.partial_long_rope ? " long_rope" : "") << (cfg.window ? " window" : ""));
    const Toy toy = toy::build_toy(cfg, 9);
    const int vocab = static_cast<int>(toy::kVocab);
    // prompt_only: the prompt's forward alone, every fusion but the prefill attention runs.
    auto run = [&](bool fused, std::string* profile, bool prompt_only = false) {
      VulkanOptions o = validated();
      o.no_fusion = !fused;
      o.tuning.chain_groups = 2;
      if (prompt_only) o.tuning.no_fuse = {"prefill"};
      o.profile = true;
      std::vector<float> all;
      ::testing::internal::CaptureStderr();
      {
        auto gpu = load_vulkan_program(toy.p, toy.w, o)->make_batch_executor(4, 8, 8);
        const int32_t table[4] = {2, 0, 3, 1}, seq[6] = {}, row = 0;
        std::vector<float> l(static_cast<size_t>(vocab));
        const int32_t prompt[6] = {3, 9, 4, 1, 7, 2}, pos0[6] = {0, 1, 2, 3, 4, 5};
        int32_t next = -1, last = 5;
        BatchForward b;
        b.T = 6;
        b.ids = prompt;
        b.pos = pos0;
        b.seq = seq;
        b.n_seqs = 1;
        b.block_table = table;
        b.table_stride = 4;
        b.out_rows = &last;
        b.n_out = 1;
        b.next_tokens = &next;
        b.logits = l.data();
        gpu->forward(b);
        all.insert(all.end(), l.begin(), l.end());
        for (int32_t p = 6; p < 20 && !prompt_only; ++p) {
          int32_t id = next;
          b.T = 1;
          b.ids = &id;
          b.pos = &p;
          b.out_rows = &row;
          gpu->forward(b);
          all.insert(all.end(), l.begin(), l.end());
          all.push_back(static_cast<float>(next));
        }
        if (!prompt_only) {
          // Sequence 0's next step beside sequence 1's three-token prompt (block 1).
          const int32_t ids2[4] = {next, 5, 6, 8}, pos2[4] = {20, 0, 1, 2}, seq2[4] = {0, 1, 1, 1};
          const int32_t table2[8] = {2, 0, 3, 1, 1, 0, 0, 0}, outs[2] = {0, 3};
          int32_t next2[2] = {-1, -1};
          std::vector<float> l2(static_cast<size_t>(2 * vocab));
          b.T = 4;
          b.ids = ids2;
          b.pos = pos2;
          b.seq = seq2;
          b.n_seqs = 2;
          b.block_table = table2;
          b.out_rows = outs;
          b.n_out = 2;
          b.next_tokens = next2;
          b.logits = l2.data();
          gpu->forward(b);
          all.insert(all.end(), l2.begin(), l2.end());
        }
      }
      *profile = ::testing::internal::GetCapturedStderr();
      return all;
    };
    std::string pu, pf;
    const std::vector<float> unfused = run(false, &pu), fused = run(true, &pf);
    ASSERT_EQ(fused.size(), unfused.size());
    // Where they differ: the prompt's logits, the decode steps' logits and tokens, the forward of
    // two sequences.
    const size_t parts[] = {0, static_cast<size_t>(vocab), fused.size() - 2 * vocab, fused.size()};
    size_t differ = 0, in_part[3] = {}, first = fused.size();
    for (size_t i = 0; i < fused.size(); ++i)
      if (fused[i] != unfused[i]) {
        ++differ;
        first = std::min(first, i);
        for (int k = 0; k < 3; ++k) in_part[k] += i >= parts[k] && i < parts[k + 1];
      }
    EXPECT_EQ(differ, 0u) << "of " << fused.size() << " logits and tokens: prompt " << in_part[0]
                          << ", decode steps " << in_part[1] << ", two sequences " << in_part[2]
                          << "; first at " << first << " ("
                          << (first < fused.size() ? fused[first] : 0.f) << " against "
                          << (first < fused.size() ? unfused[first] : 0.f) << ")";
    // The prompt's forward with every fusion but the prefill attention runs: the unfused bits too
    // (where the whole fused plan differs, this says whether the attention runs are why).
    std::string pn;
    const std::vector<float> no_runs = run(true, &pn, true);
    size_t prompt_differ = 0;
    for (size_t i = 0; i < static_cast<size_t>(vocab); ++i)
      prompt_differ += no_runs[i] != unfused[i];
    EXPECT_EQ(prompt_differ, 0u) << "the prompt's logits without the prefill attention runs";
    EXPECT_NE(pf.find("decode: "), std::string::npos) << pf;
    EXPECT_NE(pf.find(" chain: "), std::string::npos) << pf;
    EXPECT_EQ(pu.find(" chain: "), std::string::npos) << pu;
    EXPECT_NE(pf.find("rope x2+attention, prefill"), std::string::npos) << pf;
    EXPECT_EQ(pu.find("rope x2+attention, prefill"), std::string::npos) << pu;
    // Both layers' attention runs (the windowed one's too), in either plan.
    const std::string att =
        std::string(cfg.qk_norm ? "rms_norm x2+rope x2+attention" : "rope x2+attention") +
        ", prefill";
    for (const char* plan : {"prefill", "decode"}) {
      EXPECT_EQ(profile_steps(pf, plan, att), 2) << plan << "\n" << pf;
      EXPECT_EQ(profile_steps(pf, plan, "attention"), 0) << plan << "\n" << pf;
    }
  }
}
