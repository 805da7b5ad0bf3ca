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

BlockManager::BlockManager(int num_blocks, int block_tokens) : block_tokens_(block_tokens) {
  if (num_blocks < 1 || block_tokens < 1)
    fail("kv blocks: need at least one block of at least one token (got {} blocks of {})",
         num_blocks, block_tokens);
  blocks_.resize(num_blocks);
  free_.reserve(num_blocks);
  // Reversed so that allocation hands out block 0 first (readable tables in tests and logs).
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int BlockManager::blocks_for(int64_t tokens) const {
  return static_cast<int>((tokens + block_tokens_ - 1) / block_tokens_);
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
  Hit hit;
  // Only full blocks before the last token: the sequence computes at least its last token (its
  // logits give the next one), and that row must land in a private block.
  const size_t full = tokens.empty() ? 0 : (tokens.size() - 1) / block_tokens_;
  uint64_t parent_hash = 0, parent_uid = 0;
  for (size_t i = 0; i < full; ++i) {
    auto part = tokens.subspan(i * block_tokens_, block_tokens_);
    uint64_t h = block_hash(parent_hash, part);
    auto it = cache_.find(h);
    if (it == cache_.end()) break;
    const Block& b = blocks_[it->second];
    if (b.parent_uid != parent_uid ||
        !std::equal(part.begin(), part.end(), b.tokens.begin(), b.tokens.end()))
      break;  // a collision: not this prefix
    hit.blocks.push_back(it->second);
    if (b.refs == 0) ++hit.revived;
    parent_hash = h;
    parent_uid = b.uid;
  }
  return hit;
}

BlockManager::AddCost BlockManager::add_cost(std::span<const int32_t> tokens) const {
  Hit hit = find_prefix(tokens);
  int n = static_cast<int>(hit.blocks.size());
  return {blocks_for(static_cast<int64_t>(tokens.size())) - n + hit.revived, n * block_tokens_};
}

bool BlockManager::can_add(std::span<const int32_t> tokens, int reserve_blocks) const {
  return add_cost(tokens).blocks + int64_t(std::max(reserve_blocks, 0)) <=
         free_blocks() + cached_blocks();
}

BlockId BlockManager::allocate() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    if (lru_.empty()) fail("kv blocks: the pool is exhausted (an internal accounting error)");
    b = lru_.front();
    lru_.pop_front();
    Block& e = blocks_[b];
    cache_.erase(e.hash);
    e = Block{};
  }
  blocks_[b].refs = 1;
  ++used_;
  return b;
}

void BlockManager::release(BlockId id) {
  Block& b = blocks_[id];
  if (--b.refs > 0) return;
  --used_;
  if (b.published) {
    lru_.push_back(id);
    b.lru_pos = std::prev(lru_.end());
  } else {
    free_.push_back(id);
  }
}

int BlockManager::add_sequence(SeqId id, std::span<const int32_t> tokens) {
  if (seqs_.count(id)) fail("kv blocks: sequence {} already exists", id);
  if (tokens.empty()) fail("kv blocks: sequence {} has no tokens", id);
  Hit hit = find_prefix(tokens);
  const int n_hit = static_cast<int>(hit.blocks.size());
  const int need = blocks_for(static_cast<int64_t>(tokens.size())) - n_hit + hit.revived;
  if (need > free_blocks() + cached_blocks())
    fail("kv blocks: sequence {} needs {} blocks, {} are available", id, need,
         free_blocks() + cached_blocks());
  Seq s;
  s.tokens.assign(tokens.begin(), tokens.end());
  for (BlockId b : hit.blocks) {
    Block& blk = blocks_[b];
    if (blk.refs++ == 0) {
      lru_.erase(blk.lru_pos);
      ++used_;
    }
    s.table.push_back(b);
    s.chain_hash = blk.hash;
    s.chain_uid = blk.uid;
  }
  s.published = n_hit;
  s.computed = n_hit * block_tokens_;
  while (static_cast<int>(s.table.size()) < blocks_for(static_cast<int64_t>(tokens.size())))
    s.table.push_back(allocate());
  seqs_.emplace(id, std::move(s));
  return n_hit * block_tokens_;
}

bool BlockManager::can_append(SeqId id, int k) const {
  const Seq& s = seq(id, "can_append");
  if (k < 0) return false;
  int need =
      blocks_for(static_cast<int64_t>(s.tokens.size()) + k) - static_cast<int>(s.table.size());
  return need <= free_blocks() + cached_blocks();
}

void BlockManager::append(SeqId id, std::span<const int32_t> tokens) {
  Seq& s = seq(id, "append");
  if (!can_append(id, static_cast<int>(tokens.size())))
    fail("kv blocks: sequence {} cannot grow by {} tokens: {} blocks are available", id,
         tokens.size(), free_blocks() + cached_blocks());
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  while (static_cast<int>(s.table.size()) < blocks_for(static_cast<int64_t>(s.tokens.size())))
    s.table.push_back(allocate());
}

void BlockManager::mark_computed(SeqId id, int n) {
  Seq& s = seq(id, "mark_computed");
  if (n < s.computed || n > static_cast<int>(s.tokens.size()))
    fail("kv blocks: sequence {} marks {} tokens computed, it has {} computed of {}", id, n,
         s.computed, s.tokens.size());
  s.computed = n;
  const int full = n / block_tokens_;
  for (; s.published < full; ++s.published) {
    if (s.chain_broken) continue;
    const BlockId b = s.table[s.published];
    Block& blk = blocks_[b];
    auto part = std::span<const int32_t>(s.tokens).subspan(
        static_cast<size_t>(s.published) * block_tokens_, block_tokens_);
    const uint64_t h = block_hash(s.chain_hash, part);
    if (blk.published || cache_.count(h)) {
      // Another sequence published this content first (or a collision): keep the block
      // private; the blocks after it cannot be reached through the cache either.
      s.chain_broken = !blk.published;
      if (blk.published) {
        s.chain_hash = blk.hash;
        s.chain_uid = blk.uid;
      }
      continue;
    }
    blk.published = true;
    blk.hash = h;
    blk.uid = next_uid_++;
    blk.parent_uid = s.chain_uid;
    blk.tokens.assign(part.begin(), part.end());
    cache_.emplace(h, b);
    s.chain_hash = h;
    s.chain_uid = blk.uid;
  }
}

void BlockManager::free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("kv blocks: free of unknown sequence {} (never added or freed)", id);
  // Last block first, so the LRU list evicts a sequence's tail before its (more shared) head.
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b) release(*b);
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

const std::vector<BlockId>& BlockManager::block_table(SeqId id) const {
  return seq(id, "block_table").table;
}
const std::vector<int32_t>& BlockManager::tokens(SeqId id) const {
  return seq(id, "tokens").tokens;
}
int BlockManager::computed(SeqId id) const {
  return seq(id, "computed").computed;
}

void BlockManager::check_invariants() const {
  const int n = total_blocks();
  std::vector<int> refs(n, 0);
  for (const auto& [id, s] : seqs_) {
    if (static_cast<int>(s.table.size()) != blocks_for(static_cast<int64_t>(s.tokens.size())))
      fail("kv invariant: sequence {} has {} blocks for {} tokens", id, s.table.size(),
           s.tokens.size());
    if (s.computed > static_cast<int>(s.tokens.size()))
      fail("kv invariant: sequence {} computed {} of {} tokens", id, s.computed, s.tokens.size());
    for (size_t i = 0; i < s.table.size(); ++i) {
      BlockId b = s.table[i];
      if (b < 0 || b >= n) fail("kv invariant: sequence {} holds block {} out of range", id, b);
      if (std::count(s.table.begin(), s.table.end(), b) != 1)
        fail("kv invariant: sequence {} holds block {} twice", id, b);
      ++refs[b];
      // A shared block is full, published and holds this sequence's tokens at that place.
      const Block& blk = blocks_[b];
      if (blk.published &&
          !std::equal(blk.tokens.begin(), blk.tokens.end(), s.tokens.begin() + i * block_tokens_))
        fail("kv invariant: block {} of sequence {} holds other tokens", b, id);
      if (blk.refs > 1 && !blk.published)
        fail("kv invariant: block {} is shared but not published", b);
    }
  }
  std::vector<int> where(n, 0);  // 1: free list, 2: LRU list
  for (BlockId b : free_) {
    if (b < 0 || b >= n || where[b]) fail("kv invariant: free list holds block {} badly", b);
    where[b] = 1;
    if (blocks_[b].published) fail("kv invariant: free block {} is published", b);
  }
  for (BlockId b : lru_) {
    if (b < 0 || b >= n || where[b]) fail("kv invariant: cached list holds block {} badly", b);
    where[b] = 2;
    if (!blocks_[b].published) fail("kv invariant: cached block {} is not published", b);
  }
  int used = 0;
  for (int b = 0; b < n; ++b) {
    if (refs[b] != blocks_[b].refs)
      fail("kv invariant: block {} counts {} references, the tables hold {}", b, blocks_[b].refs,
           refs[b]);
    if (refs[b] > 0 && where[b]) fail("kv invariant: block {} is held and also listed free", b);
    if (refs[b] == 0 && !where[b])
      fail("kv invariant: block {} is lost (neither held nor free)", b);
    if (refs[b] > 0) ++used;
    if (blocks_[b].published) {
      auto it = cache_.find(blocks_[b].hash);
      if (it == cache_.end() || it->second != b)
        fail("kv invariant: published block {} is missing from the cache map", b);
    }
  }
  if (used != used_) fail("kv invariant: {} blocks in use, counted {}", used, used_);
  for (const auto& [h, b] : cache_)
    if (b < 0 || b >= n || !blocks_[b].published || blocks_[b].hash != h)
      fail("kv invariant: the cache map names block {} wrongly", b);
  if (used_ + free_blocks() + cached_blocks() != n)
    fail("kv invariant: used {} + free {} + cached {} != {}", used_, free_blocks(), cached_blocks(),
         n);
}

}  // namespace vkllm::batch
