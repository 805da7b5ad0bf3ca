#include "runtime/kv_blocks.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace vkllm::batch {

uint64_t kv_block_bytes(const KvGeometry& g, int block_tokens) {
  if (g.layers <= 0 || g.kv_heads <= 0 || g.head_dim <= 0 || g.dtype_bytes <= 0 ||
      block_tokens <= 0)
    fail(
        "kv block size: layers {}, kv heads {}, head dim {}, dtype bytes {}, block tokens {} "
        "must all be positive",
        g.layers, g.kv_heads, g.head_dim, g.dtype_bytes, block_tokens);
  uint64_t n = 2;  // K and V
  for (uint64_t f : {uint64_t(g.layers), uint64_t(g.kv_heads), uint64_t(g.head_dim),
                     uint64_t(g.dtype_bytes), uint64_t(block_tokens)})
    if (mul_overflows(n, f, &n)) fail("kv block size overflows 64 bits");
  return n;
}

int kv_blocks_for_budget(uint64_t budget_bytes, const KvGeometry& g, int block_tokens) {
  uint64_t n = budget_bytes / kv_block_bytes(g, block_tokens);
  return static_cast<int>(std::min<uint64_t>(n, INT32_MAX));
}

int window_seq_blocks(int64_t window, int block_tokens, int max_forward_tokens) {
  if (window < 1 || block_tokens < 1 || max_forward_tokens < 1)
    fail("kv blocks: window {}, block tokens {}, forward tokens {} must all be positive", window,
         block_tokens, max_forward_tokens);
  const int64_t n = (window - 1 + max_forward_tokens + block_tokens - 1) / block_tokens + 1;
  if (n > INT32_MAX / 2) fail("kv blocks: a window of {} tokens is too long", window);
  return static_cast<int>(n);
}

BlockManager::BlockManager(int num_blocks, int block_tokens)
    : BlockManager(std::vector<KvGroupConfig>{{num_blocks, 0}}, block_tokens, INT_MAX) {}

BlockManager::BlockManager(const std::vector<KvGroupConfig>& groups, int block_tokens,
                           int max_forward_tokens)
    : block_tokens_(block_tokens), max_forward_tokens_(max_forward_tokens) {
  if (block_tokens < 1 || max_forward_tokens < 1 || groups.empty() || groups[0].num_blocks < 1)
    fail(
        "kv blocks: need at least one block of at least one token (got {} blocks of {}, forwards "
        "of {})",
        groups.empty() ? 0 : groups[0].num_blocks, block_tokens, max_forward_tokens);
  if (groups.empty() || groups.size() > 2 ||
      (groups.size() == 2 && (groups[0].window > 0) == (groups[1].window > 0)))
    fail("kv blocks: {} groups (one or two: at most one full and one windowed)", groups.size());
  for (const KvGroupConfig& g : groups) {
    if (g.window < 0) fail("kv blocks: a group of window {}", g.window);
    Pool q;
    q.window = g.window;
    q.seq_blocks = g.window > 0 ? window_seq_blocks(g.window, block_tokens, max_forward_tokens) : 0;
    if (g.num_blocks < std::max(1, q.seq_blocks))
      fail("kv blocks: need at least {} blocks of {} tokens in a group of window {} (got {})",
           std::max(1, q.seq_blocks), block_tokens, g.window, g.num_blocks);
    q.blocks.resize(g.num_blocks);
    q.free.reserve(g.num_blocks);
    // Reversed so that allocation hands out block 0 first (readable tables in tests and logs).
    for (int b = g.num_blocks - 1; b >= 0; --b) q.free.push_back(b);
    pools_.push_back(std::move(q));
  }
}

const BlockManager::Pool& BlockManager::pool(int g) const {
  if (g < 0 || g >= groups()) fail("kv blocks: group {} of {}", g, groups());
  return pools_[static_cast<size_t>(g)];
}

int BlockManager::blocks_for(int64_t tokens) const {
  return static_cast<int>((tokens + block_tokens_ - 1) / block_tokens_);
}

int BlockManager::first_read_block(const Pool& q, int64_t pos) const {
  if (q.window == 0) return 0;
  return static_cast<int>(std::max<int64_t>(0, pos - q.window + 1) / block_tokens_);
}

uint64_t BlockManager::block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent's hash and the token ids, then a 64-bit finalizer (splitmix64).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

BlockManager::Hit BlockManager::find_prefix(std::span<const int32_t> tokens) const {
  // Only full blocks before the last token: the sequence computes at least its last token (its
  // logits give the next one), and that row must land in a private block.
  const int full = tokens.empty() ? 0 : static_cast<int>((tokens.size() - 1) / block_tokens_);
  std::vector<uint64_t> hash(static_cast<size_t>(full));  // the chain's hash of each block
  uint64_t parent = 0;
  for (int i = 0; i < full; ++i)
    hash[i] = parent =
        block_hash(parent, tokens.subspan(static_cast<size_t>(i) * block_tokens_, block_tokens_));
  auto part = [&](int i) {
    return tokens.subspan(static_cast<size_t>(i) * block_tokens_, block_tokens_);
  };
  auto same = [&](const Block& b, int i) {
    auto t = part(i);
    return std::equal(t.begin(), t.end(), b.tokens.begin(), b.tokens.end());
  };
  // cached[g][i]: group g's block holding block i of this prefix, or kNoBlock.
  std::vector<std::vector<BlockId>> cached(pools_.size());
  int n = full;
  for (size_t g = 0; g < pools_.size(); ++g) {
    const Pool& q = pools_[g];
    cached[g].assign(static_cast<size_t>(full), kNoBlock);
    uint64_t parent_uid = 0;
    for (int i = 0; i < full; ++i) {
      auto it = q.cache.find(hash[i]);
      if (it == q.cache.end()) {
        if (q.window == 0) break;
        continue;
      }
      const Block& b = q.blocks[it->second];
      const bool parent_ok =
          q.window == 0 ? b.parent_uid == parent_uid : b.parent_hash == (i > 0 ? hash[i - 1] : 0);
      if (!parent_ok || !same(b, i)) {  // a collision: not this prefix
        if (q.window == 0) break;
        continue;
      }
      cached[g][i] = it->second;
      parent_uid = b.uid;
    }
  }
  // The longest n whose first forward finds what it reads in every group.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t g = 0; g < pools_.size(); ++g) {
      auto ok = [&](int m) {
        for (int i = first_read_block(pools_[g], int64_t(m) * block_tokens_); i < m; ++i)
          if (cached[g][i] == kNoBlock) return false;
        return true;
      };
      while (n > 0 && !ok(n)) --n, changed = true;
    }
  }
  Hit hit;
  hit.n = n;
  hit.hash = n > 0 ? hash[n - 1] : 0;
  for (size_t g = 0; g < pools_.size(); ++g) {
    const int first = std::min(n, first_read_block(pools_[g], int64_t(n) * block_tokens_));
    hit.first.push_back(first);
    hit.ids.emplace_back(cached[g].begin() + first, cached[g].begin() + n);
    int revived = 0;
    for (BlockId b : hit.ids.back()) revived += pools_[g].blocks[b].refs == 0;
    hit.revived.push_back(revived);
  }
  return hit;
}

int BlockManager::full_need(std::span<const int32_t> tokens, const Hit& hit, int g) const {
  return blocks_for(static_cast<int64_t>(tokens.size())) - hit.n + hit.revived[g];
}

BlockManager::AddCost BlockManager::add_cost(std::span<const int32_t> tokens) const {
  const Hit hit = find_prefix(tokens);
  AddCost c{0, hit.n * block_tokens_};
  for (int g = 0; g < groups(); ++g)
    if (pools_[g].window == 0) c.blocks = std::max(c.blocks, full_need(tokens, hit, g));
  return c;
}

bool BlockManager::can_add(std::span<const int32_t> tokens, int reserve_blocks) const {
  const Hit hit = find_prefix(tokens);
  for (int g = 0; g < groups(); ++g) {
    const Pool& q = pools_[g];
    if (q.window == 0 ? full_need(tokens, hit, g) + int64_t(std::max(reserve_blocks, 0)) >
                            int64_t(q.free.size() + q.lru.size())
                      : int64_t(sequences() + 1) * q.seq_blocks > int64_t(q.blocks.size()))
      return false;
  }
  return true;
}

bool BlockManager::fits_alone(int64_t tokens, int reserve_blocks) const {
  for (const Pool& q : pools_)
    if (q.window == 0
            ? blocks_for(tokens) + int64_t(std::max(reserve_blocks, 0)) > int64_t(q.blocks.size())
            : q.seq_blocks > static_cast<int>(q.blocks.size()))
      return false;
  return true;
}

BlockId BlockManager::allocate(Pool& q) {
  BlockId b;
  if (!q.free.empty()) {
    b = q.free.back();
    q.free.pop_back();
  } else {
    if (q.lru.empty()) fail("kv blocks: the pool is exhausted (an internal accounting error)");
    b = q.lru.front();
    q.lru.pop_front();
    Block& e = q.blocks[b];
    q.cache.erase(e.hash);
    e = Block{};
  }
  q.blocks[b].refs = 1;
  ++q.used;
  return b;
}

void BlockManager::release(Pool& q, BlockId id) {
  Block& b = q.blocks[id];
  if (--b.refs > 0) return;
  --q.used;
  if (b.published) {
    q.lru.push_back(id);
    b.lru_pos = std::prev(q.lru.end());
  } else {
    q.free.push_back(id);
  }
}

int BlockManager::add_sequence(SeqId id, std::span<const int32_t> tokens) {
  if (seqs_.count(id)) fail("kv blocks: sequence {} already exists", id);
  if (tokens.empty()) fail("kv blocks: sequence {} has no tokens", id);
  const Hit hit = find_prefix(tokens);
  for (int g = 0; g < groups(); ++g) {
    const Pool& q = pools_[g];
    const int avail = static_cast<int>(q.free.size() + q.lru.size());
    const int need = q.window == 0 ? full_need(tokens, hit, g) : hit.revived[g];
    if (need > avail)
      fail("kv blocks: sequence {} needs {} blocks, {} are available", id, need, avail);
  }
  Seq s;
  s.tokens.assign(tokens.begin(), tokens.end());
  for (int g = 0; g < groups(); ++g) {
    Pool& q = pools_[g];
    Table t;
    t.ids.assign(static_cast<size_t>(hit.first[g]), kNoBlock);
    t.released = hit.first[g];
    for (BlockId b : hit.ids[g]) {
      Block& blk = q.blocks[b];
      if (blk.refs++ == 0) {
        q.lru.erase(blk.lru_pos);
        ++q.used;
      }
      t.ids.push_back(b);
      t.chain_uid = blk.uid;
    }
    t.published = hit.n;
    t.chain_hash = hit.hash;
    if (q.window == 0)
      while (static_cast<int>(t.ids.size()) < blocks_for(static_cast<int64_t>(tokens.size())))
        t.ids.push_back(allocate(q));
    s.tables.push_back(std::move(t));
  }
  s.computed = hit.n * block_tokens_;
  seqs_.emplace(id, std::move(s));
  return hit.n * block_tokens_;
}

bool BlockManager::can_append(SeqId id, int k) const {
  const Seq& s = seq(id, "can_append");
  if (k < 0) return false;
  for (int g = 0; g < groups(); ++g) {
    const Pool& q = pools_[g];
    if (q.window > 0) continue;
    const int need = blocks_for(static_cast<int64_t>(s.tokens.size()) + k) -
                     static_cast<int>(s.tables[g].ids.size());
    if (need > static_cast<int>(q.free.size() + q.lru.size())) return false;
  }
  return true;
}

void BlockManager::append(SeqId id, std::span<const int32_t> tokens) {
  Seq& s = seq(id, "append");
  if (!can_append(id, static_cast<int>(tokens.size())))
    fail("kv blocks: sequence {} cannot grow by {} tokens: {} blocks are available", id,
         tokens.size(), free_blocks() + cached_blocks());
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  for (int g = 0; g < groups(); ++g) {
    if (pools_[g].window > 0) continue;
    std::vector<BlockId>& ids = s.tables[g].ids;
    while (static_cast<int>(ids.size()) < blocks_for(static_cast<int64_t>(s.tokens.size())))
      ids.push_back(allocate(pools_[g]));
  }
}

void BlockManager::schedule(SeqId id, int begin, int end) {
  Seq& s = seq(id, "schedule");
  if (begin < 0 || begin >= end || end > static_cast<int>(s.tokens.size()) ||
      end - begin > max_forward_tokens_)
    fail("kv blocks: sequence {} schedules positions [{}, {}) of {} (at most {} a forward)", id,
         begin, end, s.tokens.size(), max_forward_tokens_);
  for (int g = 0; g < groups(); ++g) {
    Pool& q = pools_[g];
    if (q.window == 0) continue;
    Table& t = s.tables[g];
    const int first = first_read_block(q, begin);
    if (first < t.released)
      fail("kv blocks: sequence {} schedules position {}, whose window's block {} was released", id,
           begin, t.released - 1);
    for (; t.released < std::min<int>(first, static_cast<int>(t.ids.size())); ++t.released) {
      BlockId& b = t.ids[static_cast<size_t>(t.released)];
      release(q, b);
      b = kNoBlock;
    }
    const int want = blocks_for(end);
    const int room = static_cast<int>(q.free.size() + q.lru.size());
    if (want - static_cast<int>(t.ids.size()) > room)
      fail("kv blocks: sequence {} needs {} window blocks, {} are available", id,
           want - static_cast<int>(t.ids.size()), room);
    while (static_cast<int>(t.ids.size()) < want) {
      // (a block below the window is never read: it is not allocated)
      if (static_cast<int>(t.ids.size()) < first) {
        t.ids.push_back(kNoBlock);
        t.released = static_cast<int>(t.ids.size());
      } else {
        t.ids.push_back(allocate(q));
      }
    }
  }
}

void BlockManager::publish(Pool& q, Table& t, const Seq& s, int full) {
  for (; t.published < full; ++t.published) {
    if (t.chain_broken) continue;
    const BlockId b = t.ids[static_cast<size_t>(t.published)];
    auto part = std::span<const int32_t>(s.tokens).subspan(
        static_cast<size_t>(t.published) * block_tokens_, block_tokens_);
    const uint64_t h = block_hash(t.chain_hash, part);
    if (b == kNoBlock) {  // released past the window before its KV was computed: none after it
      t.chain_broken = true;
      continue;
    }
    Block& blk = q.blocks[b];
    if (blk.published || q.cache.count(h)) {
      // Another sequence published this content first (or a collision): keep the block
      // private; the blocks after it cannot be reached through the cache either.
      t.chain_broken = !blk.published;
      if (blk.published) {
        t.chain_hash = blk.hash;
        t.chain_uid = blk.uid;
      }
      continue;
    }
    blk.published = true;
    blk.hash = h;
    blk.uid = next_uid_++;
    blk.parent_uid = t.chain_uid;
    blk.parent_hash = t.chain_hash;
    blk.tokens.assign(part.begin(), part.end());
    q.cache.emplace(h, b);
    t.chain_hash = h;
    t.chain_uid = blk.uid;
  }
}

void BlockManager::mark_computed(SeqId id, int n) {
  Seq& s = seq(id, "mark_computed");
  if (n < s.computed || n > static_cast<int>(s.tokens.size()))
    fail("kv blocks: sequence {} marks {} tokens computed, it has {} computed of {}", id, n,
         s.computed, s.tokens.size());
  s.computed = n;
  for (int g = 0; g < groups(); ++g) {
    Table& t = s.tables[g];
    // (a window group's blocks past its last scheduled forward hold nothing yet)
    publish(pools_[g], t, s, std::min<int>(n / block_tokens_, static_cast<int>(t.ids.size())));
  }
}

void BlockManager::free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("kv blocks: free of unknown sequence {} (never added or freed)", id);
  // Last block first, so the LRU list evicts a sequence's tail before its (more shared) head.
  for (int g = 0; g < groups(); ++g) {
    const std::vector<BlockId>& ids = it->second.tables[g].ids;
    for (auto b = ids.rbegin(); b != ids.rend(); ++b)
      if (*b != kNoBlock) release(pools_[g], *b);
  }
  seqs_.erase(it);
}

const BlockManager::Seq& BlockManager::seq(SeqId id, const char* what) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("kv blocks: {} of unknown sequence {}", what, id);
  return it->second;
}

BlockManager::Seq& BlockManager::seq(SeqId id, const char* what) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("kv blocks: {} of unknown sequence {}", what, id);
  return it->second;
}

const std::vector<BlockId>& BlockManager::block_table(SeqId id, int g) const {
  pool(g);
  return seq(id, "block_table").tables[static_cast<size_t>(g)].ids;
}
const std::vector<int32_t>& BlockManager::tokens(SeqId id) const {
  return seq(id, "tokens").tokens;
}
int BlockManager::computed(SeqId id) const {
  return seq(id, "computed").computed;
}

void BlockManager::check_invariants() const {
  for (int g = 0; g < groups(); ++g) {
    const Pool& q = pools_[g];
    const int n = static_cast<int>(q.blocks.size());
    std::vector<int> refs(n, 0);
    for (const auto& [id, s] : seqs_) {
      const Table& t = s.tables[g];
      const int want = blocks_for(static_cast<int64_t>(s.tokens.size()));
      if (q.window == 0 ? static_cast<int>(t.ids.size()) != want
                        : static_cast<int>(t.ids.size()) > want)
        fail("kv invariant: sequence {} has {} blocks of group {} for {} tokens", id, t.ids.size(),
             g, s.tokens.size());
      if (s.computed > static_cast<int>(s.tokens.size()))
        fail("kv invariant: sequence {} computed {} of {} tokens", id, s.computed, s.tokens.size());
      int held = 0;
      for (size_t i = 0; i < t.ids.size(); ++i) {
        BlockId b = t.ids[i];
        if ((b == kNoBlock) != (static_cast<int>(i) < t.released))
          fail("kv invariant: sequence {} entry {} of group {} is {} ({} released)", id, i, g, b,
               t.released);
        if (b == kNoBlock) continue;
        if (b < 0 || b >= n) fail("kv invariant: sequence {} holds block {} out of range", id, b);
        if (std::count(t.ids.begin(), t.ids.end(), b) != 1)
          fail("kv invariant: sequence {} holds block {} twice", id, b);
        ++refs[b];
        ++held;
        // A shared block is full, published and holds this sequence's tokens at that place.
        const Block& blk = q.blocks[b];
        if (blk.published &&
            !std::equal(blk.tokens.begin(), blk.tokens.end(), s.tokens.begin() + i * block_tokens_))
          fail("kv invariant: block {} of sequence {} holds other tokens", b, id);
        if (blk.refs > 1 && !blk.published)
          fail("kv invariant: block {} is shared but not published", b);
      }
      if (q.window > 0 && held > q.seq_blocks)
        fail("kv invariant: sequence {} holds {} window blocks, the bound is {}", id, held,
             q.seq_blocks);
    }
    std::vector<int> where(n, 0);  // 1: free list, 2: LRU list
    for (BlockId b : q.free) {
      if (b < 0 || b >= n || where[b]) fail("kv invariant: free list holds block {} badly", b);
      where[b] = 1;
      if (q.blocks[b].published) fail("kv invariant: free block {} is published", b);
    }
    for (BlockId b : q.lru) {
      if (b < 0 || b >= n || where[b]) fail("kv invariant: cached list holds block {} badly", b);
      where[b] = 2;
      if (!q.blocks[b].published) fail("kv invariant: cached block {} is not published", b);
    }
    int used = 0;
    for (int b = 0; b < n; ++b) {
      if (refs[b] != q.blocks[b].refs)
        fail("kv invariant: block {} counts {} references, the tables hold {}", b, q.blocks[b].refs,
             refs[b]);
      if (refs[b] > 0 && where[b]) fail("kv invariant: block {} is held and also listed free", b);
      if (refs[b] == 0 && !where[b])
        fail("kv invariant: block {} is lost (neither held nor free)", b);
      if (refs[b] > 0) ++used;
      if (q.blocks[b].published) {
        auto it = q.cache.find(q.blocks[b].hash);
        if (it == q.cache.end() || it->second != b)
          fail("kv invariant: published block {} is missing from the cache map", b);
      }
    }
    if (used != q.used) fail("kv invariant: {} blocks in use, counted {}", used, q.used);
    for (const auto& [h, b] : q.cache)
      if (b < 0 || b >= n || !q.blocks[b].published || q.blocks[b].hash != h)
        fail("kv invariant: the cache map names block {} wrongly", b);
    if (q.used + static_cast<int>(q.free.size() + q.lru.size()) != n)
      fail("kv invariant: used {} + free {} + cached {} != {}", q.used, q.free.size(), q.lru.size(),
           n);
  }
}

}  // namespace vkllm::batch
