// The KV block manager (src/runtime/kv_blocks.h): block sizes against a published model's figure,
// prefix sharing, eviction order, refusals, and a seeded random workload checked against a
// simulated KV memory (every shared row must hold the sharer's token; no sequence may write a
// row another sequence holds).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "runtime/kv_blocks.h"

using namespace vkllm;
using namespace vkllm::batch;

namespace {

std::vector<int32_t> seq_tokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(KvBlocks, BlockBytesMatchLlama3_8B) {
  // Llama 3 8B: 32 layers, 8 KV heads of 128, f16: 128 KiB of K and V per token (the figure
  // vLLM and llama.cpp print for it), so a 16-token block is 2 MiB.
  KvGeometry g{32, 8, 128, 2};
  EXPECT_EQ(kv_block_bytes(g, 1), 128u * 1024);
  EXPECT_EQ(kv_block_bytes(g, 16), 2u * 1024 * 1024);
  EXPECT_EQ(kv_blocks_for_budget(uint64_t(1) << 30, g, 16), 512);
  EXPECT_EQ(kv_blocks_for_budget((uint64_t(1) << 30) - 1, g, 16), 511);
  EXPECT_NE(error_of([&] {
              kv_block_bytes({0, 8, 128, 2}, 16);
            }).find("must all be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] { kv_block_bytes(g, -1); }).find("must all be positive"),
            std::string::npos);
  KvGeometry huge{1 << 30, 1 << 30, 1 << 30, 8};
  EXPECT_NE(error_of([&] { kv_block_bytes(huge, 16); }).find("overflows"), std::string::npos);
}

TEST(KvBlocks, AppendAllocatesWhenTheLastBlockFills) {
  BlockManager m(4, 16);
  m.add_sequence(1, seq_tokens(16, 0));
  EXPECT_EQ(m.block_table(1).size(), 1u);
  m.append(1, seq_tokens(1, 100));
  EXPECT_EQ(m.block_table(1).size(), 2u);
  m.append(1, seq_tokens(15, 200));
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_TRUE(m.can_append(1, 32));
  EXPECT_FALSE(m.can_append(1, 33));
  m.check_invariants();
  EXPECT_EQ(m.used_blocks(), 2);
  EXPECT_EQ(m.free_blocks(), 2);
}

TEST(KvBlocks, TwoSequencesShareTheFullBlocksOfAPrompt) {
  BlockManager m(16, 16);
  auto prompt = seq_tokens(40, 1000);
  EXPECT_EQ(m.add_sequence(1, prompt), 0);
  // Before its KV is computed nothing is shared.
  EXPECT_EQ(m.add_cost(prompt).cached_tokens, 0);
  m.mark_computed(1, 40);
  EXPECT_EQ(m.add_cost(prompt).cached_tokens, 32);
  EXPECT_EQ(m.add_cost(prompt).blocks, 1);
  EXPECT_EQ(m.add_sequence(2, prompt), 32);
  const auto& a = m.block_table(1);
  const auto& b = m.block_table(2);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);  // the partial third block is private
  EXPECT_EQ(m.used_blocks(), 4);
  m.check_invariants();
  // A prompt that diverges inside the second block shares only the first.
  auto other = prompt;
  other[20] = -5;
  EXPECT_EQ(m.add_sequence(3, other), 16);
  EXPECT_EQ(m.block_table(3)[0], a[0]);
  EXPECT_NE(m.block_table(3)[1], a[1]);
  m.free(1);
  m.free(2);
  m.free(3);
  m.check_invariants();
  EXPECT_EQ(m.used_blocks(), 0);
  // Freed, the published blocks stay cached (3's own blocks were never computed).
  EXPECT_EQ(m.cached_blocks(), 2);
  EXPECT_EQ(m.free_blocks() + m.cached_blocks(), 16);
  EXPECT_EQ(m.add_sequence(4, prompt), 32);
}

TEST(KvBlocks, ThePrefixHitNeverCoversTheLastToken) {
  BlockManager m(8, 16);
  auto prompt = seq_tokens(32, 7);
  m.add_sequence(1, prompt);
  m.mark_computed(1, 32);
  // Both blocks are full and published, but the second holds the last token: it is recomputed
  // in a private block.
  EXPECT_EQ(m.add_sequence(2, prompt), 16);
  EXPECT_EQ(m.block_table(2)[0], m.block_table(1)[0]);
  EXPECT_NE(m.block_table(2)[1], m.block_table(1)[1]);
  // A longer prompt takes both.
  auto longer = prompt;
  longer.push_back(3);
  EXPECT_EQ(m.add_sequence(3, longer), 32);
  m.check_invariants();
}

TEST(KvBlocks, EvictionTakesFreeBlocksFirstThenLeastRecentlyFreedTailFirst) {
  BlockManager m(6, 4);
  auto a = seq_tokens(9, 0);    // blocks a0 a1 full, a2 partial
  auto b = seq_tokens(9, 100);  // b0 b1 full, b2 partial
  m.add_sequence(1, a);
  m.mark_computed(1, 9);
  m.add_sequence(2, b);
  m.mark_computed(2, 9);
  const auto ta = m.block_table(1);
  const auto tb = m.block_table(2);
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.cached_blocks(), 4);
  EXPECT_EQ(m.free_blocks(), 2);
  // 3 new blocks: the 2 free ones, then a1 (A freed first, its tail before its head).
  m.add_sequence(3, seq_tokens(12, 500));
  std::set<BlockId> t3(m.block_table(3).begin(), m.block_table(3).end());
  EXPECT_TRUE(t3.count(ta[1]));
  EXPECT_FALSE(t3.count(ta[0]));
  EXPECT_EQ(m.add_cost(a).cached_tokens, 4);  // a0 survives, a1 is gone
  EXPECT_EQ(m.add_cost(b).cached_tokens, 8);
  // Next in line: a0, then b1.
  m.append(3, seq_tokens(1, 900));
  EXPECT_EQ(m.block_table(3).back(), ta[0]);
  m.append(3, seq_tokens(4, 900));
  EXPECT_EQ(m.block_table(3).back(), tb[1]);
  EXPECT_EQ(m.add_cost(b).cached_tokens, 4);
  m.check_invariants();
  // Taking b0 by a hit removes it from the evictable list (3's blocks were never computed, so
  // they go back to the free list).
  m.free(3);
  EXPECT_EQ(m.cached_blocks(), 1);
  EXPECT_EQ(m.add_sequence(4, std::vector<int32_t>(b.begin(), b.begin() + 5)), 4);
  EXPECT_EQ(m.block_table(4)[0], tb[0]);
  EXPECT_EQ(m.cached_blocks(), 0);
  EXPECT_EQ(m.free_blocks(), 4);
  EXPECT_EQ(m.used_blocks(), 2);
  m.check_invariants();
}

TEST(KvBlocks, MisuseIsAnErrorOfOneLine) {
  BlockManager m(2, 4);
  m.add_sequence(1, seq_tokens(5, 0));
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"already exists", [&] { m.add_sequence(1, seq_tokens(1, 0)); }},
      {"has no tokens", [&] { m.add_sequence(2, {}); }},
      {"needs 1 blocks, 0 are available", [&] { m.add_sequence(2, seq_tokens(1, 0)); }},
      {"cannot grow by 4 tokens", [&] { m.append(1, seq_tokens(4, 0)); }},
      {"append of unknown sequence 9", [&] { m.append(9, seq_tokens(1, 0)); }},
      {"block_table of unknown sequence 9", [&] { m.block_table(9); }},
      {"marks 6 tokens computed", [&] { m.mark_computed(1, 6); }},
      {"free of unknown sequence 9", [&] { m.free(9); }},
      {"at least one block", [&] { BlockManager(0, 16); }},
      {"at least one block", [&] { BlockManager(4, 0); }},
  };
  for (const auto& [want, f] : cases) {
    std::string e = error_of(f);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  m.mark_computed(1, 3);
  EXPECT_NE(error_of([&] { m.mark_computed(1, 2); }).find("has 3 computed"), std::string::npos);
  m.free(1);
  EXPECT_NE(error_of([&] { m.free(1); }).find("free of unknown sequence 1"), std::string::npos);
  m.check_invariants();
  EXPECT_EQ(m.used_blocks(), 0);
}

// A random workload over a small pool, with prompts drawn from a few shared prefixes. A shadow
// KV memory records the token written at every (block, row); a sequence's computed rows are
// written when it marks them computed, and each admission's prefix hit is checked against it.
TEST(KvBlocks, RandomWorkloadKeepsInvariantsAndSharedRowsCorrect) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const int bt = 1 + static_cast<int>(rng() % 8), n_blocks = 24 + static_cast<int>(rng() % 24);
    BlockManager m(n_blocks, bt);
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) prefixes.push_back(seq_tokens(bt * (1 + i * 2), 1000 * (i + 1)));
    std::map<SeqId, std::vector<int32_t>> live;  // the shadow: tokens per sequence
    std::map<std::pair<BlockId, int>, int32_t> kv;
    SeqId next = 1;
    uint64_t hits = 0;
    auto holders = [&](BlockId b) {
      int n = 0;
      for (const auto& [id, t] : live)
        for (BlockId x : m.block_table(id)) n += x == b;
      return n;
    };
    for (int op = 0; op < 3000; ++op) {
      const uint32_t r = rng() % 10;
      if (r < 3 || live.empty()) {
        std::vector<int32_t> t;
        if (rng() % 3) t = prefixes[rng() % prefixes.size()];
        const int extra = 1 + static_cast<int>(rng() % (3 * bt));
        for (int i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(rng() % 4));
        if (!m.can_add(t, 0)) {
          EXPECT_THROW(m.add_sequence(next, t), Error);
          continue;
        }
        const int cached = m.add_sequence(next, t);
        ASSERT_EQ(cached % bt, 0);
        ASSERT_LT(cached, static_cast<int>(t.size()));
        const auto& table = m.block_table(next);
        for (int p = 0; p < cached; ++p) ASSERT_EQ((kv[{table[p / bt], p % bt}]), t[p]) << p;
        hits += cached;
        live[next++] = t;
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const SeqId id = it->first;
        auto& t = it->second;
        if (r < 6) {
          std::vector<int32_t> more(1 + rng() % (2 * bt));
          for (auto& x : more) x = static_cast<int32_t>(rng() % 4);
          if (m.can_append(id, static_cast<int>(more.size()))) {
            m.append(id, more);
            t.insert(t.end(), more.begin(), more.end());
          } else {
            EXPECT_THROW(m.append(id, more), Error);
          }
        } else if (r < 9) {
          const int c = m.computed(id);
          const int n = c + static_cast<int>(rng() % (t.size() - c + 1));
          const auto& table = m.block_table(id);
          for (int p = c; p < n; ++p) {
            ASSERT_EQ(holders(table[p / bt]), 1) << "a write into a shared block";
            kv[{table[p / bt], p % bt}] = t[p];
          }
          m.mark_computed(id, n);
        } else {
          m.free(id);
          live.erase(it);
        }
      }
      ASSERT_NO_THROW(m.check_invariants());
      for (const auto& [id, t] : live) ASSERT_EQ(m.tokens(id), t);
    }
    EXPECT_GT(hits, 0u);
    for (const auto& [id, t] : live) m.free(id);
    m.check_invariants();
    EXPECT_EQ(m.used_blocks(), 0);
    EXPECT_EQ(m.free_blocks() + m.cached_blocks(), n_blocks);
    EXPECT_EQ(m.sequences(), 0);
  }
}

}  // namespace
