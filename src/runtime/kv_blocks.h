// The KV block manager of continuous batching (docs/serve.md, "Batching core"): the KV cache as a
// pool of fixed-size blocks (block_tokens token rows each), a block table per sequence (logical
// block -> physical block id), and a prefix cache over full blocks.
//
// Prefix cache: a full block whose KV has been computed (mark_computed) is published under the
// hash of (its parent block's hash, its token ids), so a block's hash names its whole prefix. A
// new sequence whose tokens start with published blocks takes them (reference count + 1) and
// allocates only the rest. A published block whose last user frees it stays in the cache,
// evictable in least-recently-freed order, until the pool needs a block. A lookup checks the
// block's stored token ids and its parent's identity, so a hash collision never shares KV.
//
// No copy-on-write: only full, computed blocks are ever shared, and a sequence writes KV only into
// positions it has not computed yet, all of which lie in its own blocks: the blocks after its
// shared prefix are allocated for it alone, and a prefix hit never covers the sequence's last
// token (add_sequence), so its next KV row always lands in a private block.
//
// Pure bookkeeping (no device memory), not thread-safe. Every misuse is an Error with one line.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace vkllm::batch {

using SeqId = uint64_t;
using BlockId = int32_t;

// The KV cache's shape per token row.
struct KvGeometry {
  int layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int dtype_bytes = 0;  // 2 for f16, 4 for f32
};

// Bytes of one block: layers x kv_heads x head_dim x 2 (K and V) x dtype_bytes x block_tokens.
// Error on a non-positive field or an overflow of 64 bits.
uint64_t kv_block_bytes(const KvGeometry& g, int block_tokens);
// How many whole blocks fit in budget_bytes (at most INT32_MAX); Error as kv_block_bytes.
int kv_blocks_for_budget(uint64_t budget_bytes, const KvGeometry& g, int block_tokens);

class BlockManager {
 public:
  // num_blocks >= 1, block_tokens >= 1; Error otherwise.
  BlockManager(int num_blocks, int block_tokens);

  int block_tokens() const { return block_tokens_; }
  int total_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks held by at least one sequence.
  int used_blocks() const { return used_; }
  // Blocks holding nothing.
  int free_blocks() const { return static_cast<int>(free_.size()); }
  // Published blocks that no sequence holds (evictable); free + cached + used == total.
  int cached_blocks() const { return static_cast<int>(lru_.size()); }

  // Blocks a new sequence with these tokens takes from the pool (its new blocks plus the cached
  // blocks its prefix hit revives), and the tokens it finds computed.
  struct AddCost {
    int blocks = 0;
    int cached_tokens = 0;
  };
  AddCost add_cost(std::span<const int32_t> tokens) const;
  // Whether add_sequence(tokens) fits and leaves reserve_blocks blocks to spare.
  bool can_add(std::span<const int32_t> tokens, int reserve_blocks) const;
  // A new sequence holding `tokens` (non-empty): takes the published blocks of its longest cached
  // prefix of full blocks (never the block of its last token) and allocates the rest. Returns the
  // number of tokens whose KV it found computed (a multiple of block_tokens). Error on a known id,
  // empty tokens, or too few blocks.
  int add_sequence(SeqId id, std::span<const int32_t> tokens);
  // Appends token rows to sequence id, allocating blocks as its last one fills; Error when the
  // pool cannot supply them (nothing changes then).
  void append(SeqId id, std::span<const int32_t> tokens);
  // Whether k more tokens fit in sequence id.
  bool can_append(SeqId id, int k) const;
  // The first n tokens of id have their KV written: publishes its full blocks among them. n only
  // grows and is at most the sequence's length; Error otherwise.
  void mark_computed(SeqId id, int n);
  // Releases id's blocks: published ones stay cached (the sequence's last block is evicted
  // first), the others go back to the free list. Error on an unknown id (a double free).
  void free(SeqId id);

  bool has(SeqId id) const { return seqs_.count(id) != 0; }
  const std::vector<BlockId>& block_table(SeqId id) const;
  const std::vector<int32_t>& tokens(SeqId id) const;
  int computed(SeqId id) const;
  int sequences() const { return static_cast<int>(seqs_.size()); }

  // Recounts everything from the sequences' tables and the cache; Error naming the first broken
  // invariant.
  void check_invariants() const;

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0;
    uint64_t uid = 0;         // unique per publication (parents are checked by uid)
    uint64_t parent_uid = 0;  // 0: the first block of a sequence
    std::vector<int32_t> tokens;
    std::list<BlockId>::iterator lru_pos;  // valid while published with refs == 0
  };
  struct Seq {
    std::vector<BlockId> table;
    std::vector<int32_t> tokens;
    int computed = 0;
    int published = 0;  // leading blocks whose publication was decided
    uint64_t chain_hash = 0;
    uint64_t chain_uid = 0;
    bool chain_broken = false;  // a block was not published: none after it is either
  };
  struct Hit {
    std::vector<BlockId> blocks;
    int revived = 0;  // of them, blocks on the LRU list
  };
  Hit find_prefix(std::span<const int32_t> tokens) const;
  static uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);
  BlockId allocate();
  void release(BlockId b);
  const Seq& seq(SeqId id, const char* what) const;
  Seq& seq(SeqId id, const char* what);
  int blocks_for(int64_t tokens) const;

  int block_tokens_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;
  std::list<BlockId> lru_;  // front: evicted first
  std::unordered_map<uint64_t, BlockId> cache_;
  std::unordered_map<SeqId, Seq> seqs_;
  int used_ = 0;
  uint64_t next_uid_ = 1;
};

}  // namespace vkllm::batch
