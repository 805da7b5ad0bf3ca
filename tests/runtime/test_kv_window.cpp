// The block manager's window group (src/runtime/kv_blocks.h: the sliding-window layers' KV in a
// pool of their own): blocks released past the window, chunked prefill across the window's edge,
// prefix hits that must find every group's KV (shortened or refused where window blocks were
// evicted), admission counting both groups, one-line errors, and a seeded random workload checked
// against a shadow KV memory: every key a scheduled forward reads must still hold its token.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "runtime/kv_blocks.h"

using namespace vkllm;
using namespace vkllm::batch;

namespace {

std::vector<int32_t> window_tokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

template <typename F>
std::string window_error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Window 8, blocks of 4 tokens, forwards of at most 4: a sequence holds at most
// ceil((8 - 1 + 4) / 4) + 1 = 4 window blocks.
constexpr int kW = 8, kBT = 4, kF = 4;

BlockManager two_groups(int full_blocks, int window_blocks, int forward = kF) {
  return BlockManager({{full_blocks, 0}, {window_blocks, kW}}, kBT, forward);
}

int held(const std::vector<BlockId>& t) {
  return static_cast<int>(std::count_if(t.begin(), t.end(), [](BlockId b) { return b >= 0; }));
}

// Computes a sequence's tokens [computed, end) in forwards of at most kF, as the scheduler would.
void run_to(BlockManager& m, SeqId id, int end) {
  for (int b = m.computed(id); b < end; b = std::min(b + kF, end)) {
    m.schedule(id, b, std::min(b + kF, end));
    m.mark_computed(id, std::min(b + kF, end));
  }
}

}  // namespace

TEST(KvWindow, TheBoundOfASequencesWindowBlocks) {
  EXPECT_EQ(window_seq_blocks(kW, kBT, kF), 4);
  // Gemma 3: window 512, blocks of 16, forwards of 512: (511 + 512) / 16 rounded up, plus one.
  EXPECT_EQ(window_seq_blocks(512, 16, 512), 65);
  EXPECT_EQ(window_seq_blocks(1, 1, 1), 2);
  EXPECT_NE(window_error_of([] { window_seq_blocks(0, 16, 512); }).find("must all be positive"),
            std::string::npos);
  EXPECT_NE(window_error_of([] { window_seq_blocks(int64_t(1) << 40, 1, 1); }).find("too long"),
            std::string::npos);
}

// Decode steps from position 0 to 40 (five windows): after each step's schedule the window table
// holds exactly the blocks of positions max(0, p - 7)..p, the earlier entries released; the full
// table holds every block.
TEST(KvWindow, DecodeReleasesBlocksPastTheWindow) {
  BlockManager m = two_groups(64, 8);
  m.add_sequence(1, window_tokens(1, 0));
  for (int p = 0; p < 40; ++p) {
    if (p > 0) m.append(1, window_tokens(1, 100 + p));
    m.schedule(1, p, p + 1);
    const std::vector<BlockId>& w = m.block_table(1, 1);
    const int first = std::max(0, p - kW + 1) / kBT;
    ASSERT_EQ(static_cast<int>(w.size()), p / kBT + 1) << p;
    for (int i = 0; i < static_cast<int>(w.size()); ++i)
      EXPECT_EQ(w[i] == kNoBlock, i < first) << "position " << p << " block " << i;
    EXPECT_LE(m.used_blocks(1), m.seq_blocks(1));
    EXPECT_EQ(static_cast<int>(m.block_table(1, 0).size()), p / kBT + 1);
    EXPECT_EQ(m.used_blocks(0), p / kBT + 1);
    m.mark_computed(1, p + 1);
    ASSERT_NO_THROW(m.check_invariants());
  }
  // 40 positions: 10 full blocks, 2 window blocks (positions 32..39), 8 released.
  EXPECT_EQ(m.used_blocks(0), 10);
  EXPECT_EQ(m.used_blocks(1), 2);
  m.free(1);
  EXPECT_EQ(m.used_blocks(1), 0);
  m.check_invariants();
}

// A 20-token prompt in chunks of 4: a chunk releases only the blocks wholly below its first
// position - 7; the chunk crossing the window's edge (8..11) still reads position 1 (block 0).
TEST(KvWindow, ChunkedPrefillAcrossTheWindowEdge) {
  BlockManager m = two_groups(64, 8);
  m.add_sequence(1, window_tokens(20, 0));
  const std::vector<std::pair<int, std::vector<bool>>> want = {
      {0, {false}},
      {4, {false, false}},
      {8, {false, false, false}},               // reads 1..11: block 0 kept
      {12, {true, false, false, false}},        // reads 5..15: block 0 released
      {16, {true, true, false, false, false}},  // reads 9..19
  };
  for (const auto& [begin, released] : want) {
    m.schedule(1, begin, begin + 4);
    const std::vector<BlockId>& w = m.block_table(1, 1);
    ASSERT_EQ(w.size(), released.size()) << begin;
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i] == kNoBlock, released[i]) << begin;
    m.mark_computed(1, begin + 4);
    m.check_invariants();
  }
  // A longer forward than the bound was made for, and one that would read released keys.
  EXPECT_NE(window_error_of([&] { m.schedule(1, 12, 17); }).find("at most 4 a forward"),
            std::string::npos);
  EXPECT_NE(window_error_of([&] { m.schedule(1, 12, 16); }).find("was released"),
            std::string::npos);
}

// A finished sequence's blocks stay in both groups' prefix caches; a new sequence with the same
// prompt takes the full group's blocks and the window group's blocks its first forward reads
// (the others kNoBlock); as the window pool evicts those, the hit is shortened, then refused.
TEST(KvWindow, PrefixHitsNeedEveryGroupsKv) {
  BlockManager m = two_groups(64, 6);
  const std::vector<int32_t> a = window_tokens(24, 500);
  m.add_sequence(1, a);
  run_to(m, 1, 24);
  m.free(1);
  EXPECT_EQ(m.cached_blocks(0), 6);
  EXPECT_EQ(m.cached_blocks(1), 6);  // released ones first (0, 1, 2), then the tail (5, 4, 3)
  std::vector<int32_t> b = a;
  b.push_back(7);
  EXPECT_EQ(m.add_cost(b).cached_tokens, 24);  // blocks 4 and 5 hold positions 17..23

  // Another sequence's window blocks evict A's: its first three forwards take 0, 1, 2; its
  // fourth releases its own first block and takes A's block 5.
  m.add_sequence(2, window_tokens(28, 900));
  run_to(m, 2, 12);
  EXPECT_EQ(m.add_cost(b).cached_tokens, 24);
  run_to(m, 2, 16);
  // A hit of 6 blocks reads positions 17..23 (blocks 4, 5): 5 is gone; of 5 blocks, 13..19
  // (blocks 3, 4): there.
  EXPECT_EQ(m.add_cost(b).cached_tokens, 20);
  // The full group: 5 blocks revived from the cache and 2 new ones.
  EXPECT_EQ(m.add_cost(b).blocks, 7);
  run_to(m, 2, 20);  // evicts block 4: no hit finds its window
  EXPECT_EQ(m.add_cost(b).cached_tokens, 0);
  m.free(2);

  // The shortened hit, taken: a fresh pool of the same history stopped at 16.
  BlockManager n = two_groups(64, 6);
  n.add_sequence(1, a);
  run_to(n, 1, 24);
  n.free(1);
  n.add_sequence(2, window_tokens(28, 900));
  run_to(n, 2, 16);
  ASSERT_EQ(n.add_sequence(3, b), 20);
  const std::vector<BlockId>& w = n.block_table(3, 1);
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[0], kNoBlock);
  EXPECT_EQ(w[2], kNoBlock);
  EXPECT_GE(w[3], 0);
  EXPECT_GE(w[4], 0);
  EXPECT_EQ(n.block_table(3, 0).size(), 7u);
  EXPECT_EQ(n.computed(3), 20);
  n.check_invariants();
  // Its next forward starts at 20 and reads from 13 (block 3) on.
  n.schedule(3, 20, 24);
  n.mark_computed(3, 24);
  n.check_invariants();
}

// Admission counts both groups: the window pool admits a sequence only while every running one
// has its bound of blocks (here 8 blocks: two sequences), whatever room the full pool has; the
// full pool refuses as before.
TEST(KvWindow, AdmissionWithBothGroups) {
  BlockManager m = two_groups(64, 8);
  EXPECT_TRUE(m.can_add(window_tokens(5, 0), 1));
  m.add_sequence(1, window_tokens(5, 0));
  EXPECT_TRUE(m.can_add(window_tokens(5, 50), 1));
  m.add_sequence(2, window_tokens(5, 50));
  EXPECT_FALSE(m.can_add(window_tokens(1, 99), 0));  // the window pool: 3 x 4 > 8
  m.free(2);
  EXPECT_TRUE(m.can_add(window_tokens(1, 99), 0));

  BlockManager f = two_groups(3, 40);
  EXPECT_TRUE(f.can_add(window_tokens(8, 0), 1));
  EXPECT_FALSE(f.can_add(window_tokens(9, 0), 1));  // the full pool: 3 blocks + 1 spare > 3
  EXPECT_TRUE(f.fits_alone(8, 1));
  EXPECT_FALSE(f.fits_alone(9, 1));
}

TEST(KvWindow, MisuseIsAnErrorOfOneLine) {
  BlockManager m = two_groups(8, 8);
  m.add_sequence(1, window_tokens(6, 0));
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"at most 4 a forward", [&] { m.schedule(1, 0, 5); }},
      {"schedules positions [3, 3)", [&] { m.schedule(1, 3, 3); }},
      {"schedules positions [4, 7) of 6", [&] { m.schedule(1, 4, 7); }},
      {"schedule of unknown sequence 9", [&] { m.schedule(9, 0, 1); }},
      {"group 2 of 2", [&] { m.block_table(1, 2); }},
      {"group -1 of 2", [&] { m.total_blocks(-1); }},
      {"need at least 4 blocks of 4 tokens in a group of window 8 (got 3)",
       [&] { two_groups(8, 3); }},
      {"2 groups (one or two",
       [&] {
         BlockManager({{4, 0}, {4, 0}}, 4, 4);
       }},
      {"2 groups (one or two",
       [&] {
         BlockManager({{4, 8}, {4, 8}}, 4, 4);
       }},
      {"3 groups",
       [&] {
         BlockManager({{4, 0}, {4, 8}, {4, 0}}, 4, 4);
       }},
      {"a group of window -1",
       [&] {
         BlockManager({{4, -1}}, 4, 4);
       }},
      {"at least one block",
       [&] {
         BlockManager({{4, 0}, {4, 8}}, 4, 0);
       }},
  };
  for (const auto& [want, f] : cases) {
    const std::string e = window_error_of(f);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  m.check_invariants();
}

// One full group built through the groups constructor is the plain pool: the same tables, hits
// and counts as BlockManager(num_blocks, block_tokens) over a seeded workload.
TEST(KvWindow, OneGroupIsThePlainPool) {
  std::mt19937 rng(7);
  BlockManager a(40, 4), b({{40, 0}}, 4, 512);
  EXPECT_EQ(b.groups(), 1);
  std::vector<SeqId> live;
  for (SeqId id = 1; id < 400; ++id) {
    const uint32_t r = rng() % 4;
    if (r == 0 && !live.empty()) {
      const size_t k = rng() % live.size();
      a.free(live[k]);
      b.free(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    if (r == 1 && !live.empty()) {
      const SeqId s = live[rng() % live.size()];
      const int n = static_cast<int>(a.tokens(s).size());
      a.mark_computed(s, n);
      b.mark_computed(s, n);
      if (a.can_append(s, 3)) {
        a.append(s, window_tokens(3, 7));
        b.append(s, window_tokens(3, 7));
      }
      continue;
    }
    std::vector<int32_t> t = window_tokens(4 * static_cast<int>(rng() % 4), 0);
    for (int i = 0, e = 1 + static_cast<int>(rng() % 6); i < e; ++i)
      t.push_back(static_cast<int32_t>(rng() % 3));
    ASSERT_EQ(a.can_add(t, 1), b.can_add(t, 1));
    if (!a.can_add(t, 1)) continue;
    ASSERT_EQ(a.add_sequence(id, t), b.add_sequence(id, t));
    live.push_back(id);
    ASSERT_EQ(a.block_table(id), b.block_table(id));
    ASSERT_EQ(a.used_blocks(), b.used_blocks());
    ASSERT_EQ(a.cached_blocks(), b.cached_blocks());
  }
  a.check_invariants();
  b.check_invariants();
}

// Sequences admitted, grown by decode tokens and prefilled in chunks of 1..kF, freed, over a
// small window pool, with a shadow KV memory per group written at mark_computed: every forward
// scheduled finds the keys it reads (positions begin - 7 .. begin - 1) in its window table's
// blocks holding its own tokens, every prefix hit's rows too, and no sequence ever holds more
// than its bound of window blocks.
TEST(KvWindow, RandomWorkloadReadsEveryKeyItsWindowNeeds) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    BlockManager m = two_groups(80, 14);
    std::map<SeqId, std::vector<int32_t>> live;
    std::map<std::pair<BlockId, int>, int32_t> kv[2];  // (block, row) -> token, by group
    const std::vector<int32_t> shared = window_tokens(12, 300);
    SeqId next = 1;
    int hits = 0, releases = 0;
    auto reads = [&](SeqId id, int begin) {  // the keys a forward at begin reads
      const auto& t = live.at(id);
      for (int p = std::max(0, begin - kW + 1); p < begin; ++p) {
        const BlockId wb = m.block_table(id, 1).at(static_cast<size_t>(p / kBT));
        ASSERT_GE(wb, 0) << "position " << p << " released before a forward at " << begin;
        ASSERT_EQ((kv[1][{wb, p % kBT}]), t[static_cast<size_t>(p)]) << p;
        ASSERT_EQ((kv[0][{m.block_table(id, 0)[static_cast<size_t>(p / kBT)], p % kBT}]),
                  t[static_cast<size_t>(p)])
            << p;
      }
    };
    for (int op = 0; op < 2000; ++op) {
      const uint32_t r = rng() % 10;
      if (r < 2 || live.empty()) {
        std::vector<int32_t> t;
        if (rng() % 2) t = shared;
        for (int i = 0, e = 1 + static_cast<int>(rng() % 10); i < e; ++i)
          t.push_back(static_cast<int32_t>(rng() % 3));
        if (!m.can_add(t, 0)) continue;
        const SeqId id = next++;
        const int cached = m.add_sequence(id, t);
        live[id] = t;
        hits += cached > 0;
        reads(id, cached);
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const SeqId id = it->first;
        auto& t = it->second;
        const int c = m.computed(id), n = static_cast<int>(t.size());
        if (r < 8 && c < n) {  // a forward of the next 1..kF tokens
          const int e = std::min(n, c + 1 + static_cast<int>(rng() % kF));
          auto released = [&] {
            const auto& w = m.block_table(id, 1);
            return std::count(w.begin(), w.end(), kNoBlock);
          };
          const auto before = released();
          m.schedule(id, c, e);
          releases += released() > before;
          reads(id, c);
          for (int g = 0; g < 2; ++g)
            for (int p = c; p < e; ++p)
              kv[g][{m.block_table(id, g)[static_cast<size_t>(p / kBT)], p % kBT}] =
                  t[static_cast<size_t>(p)];
          m.mark_computed(id, e);
        } else if (r < 9 && c == n) {  // a decode token
          const std::vector<int32_t> more = {static_cast<int32_t>(rng() % 3)};
          if (!m.can_append(id, 1)) continue;
          m.append(id, more);
          t.push_back(more[0]);
        } else {
          m.free(id);
          live.erase(it);
        }
      }
      ASSERT_NO_THROW(m.check_invariants());
      for (const auto& [id, t] : live) ASSERT_LE(held(m.block_table(id, 1)), m.seq_blocks(1)) << id;
    }
    EXPECT_GT(hits, 0);
    EXPECT_GT(releases, 0);
  }
}
