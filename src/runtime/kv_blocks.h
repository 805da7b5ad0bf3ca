// The KV block manager of continuous batching (docs/serve.md, "Batching core"): the KV cache as
// pools of fixed-size blocks (block_tokens token rows each), a block table per sequence (logical
// block -> physical block id), and a prefix cache over full blocks.
//
// KV groups (docs/serve.md, "Sliding-window layers in the pool"): a model whose sliding-window
// layers (window W) sit beside full-attention ones keeps each kind's caches in a group of its own,
// with its own pool, block table per sequence and prefix cache (ir/kv_ring.h's kv_groups). A full
// group holds every position of a sequence, as a model of one group does. A window group holds
// only what the sequence's next forwards read: schedule(id, begin, end) (the next forward computes
// positions begin..end-1, whose first query reads keys back to begin - W + 1) releases the blocks
// whose every position lies below begin - W + 1 (their table entries become kNoBlock) and
// allocates those up to end. Forwards of at most max_forward_tokens keep a sequence's window
// blocks within window_seq_blocks, and a window group admits a sequence only while every running
// one has that many blocks to itself, so its allocations never fail.
//
// Prefix cache: a full block whose KV has been computed (mark_computed) is published under the
// hash of (its parent block's hash, its token ids), so a block's hash names its whole prefix. A
// new sequence whose tokens start with published blocks takes them (reference count + 1) and
// allocates only the rest. A published block whose last user frees it stays in the cache,
// evictable in least-recently-freed order, until the pool needs a block. A lookup checks the
// block's stored token ids and its parent's identity (a window group: its parent's hash, the parent
// may be released), so a hash collision never shares KV. A hit of n blocks is taken only where
// every group holds the KV its first forward reads: a full group all n blocks, a window group those
// holding positions n * block_tokens - W + 1 onwards; the hit is shortened to the longest n for
// which that holds (0: none).
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
// A window group's table entry for a block released past the window.
inline constexpr BlockId kNoBlock = -1;

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

// One KV group: its pool's blocks and its layers' window (0: full attention).
struct KvGroupConfig {
  int num_blocks = 0;
  int64_t window = 0;
};

// The most blocks of block_tokens a sequence holds in a window group of window W whose forwards
// compute at most max_forward_tokens positions: ceil((W - 1 + max_forward_tokens) / block_tokens)
// + 1 (the window's keys before a forward's first position, the forward's own, one block of
// alignment). Error on a non-positive argument or an overflow of int.
int window_seq_blocks(int64_t window, int block_tokens, int max_forward_tokens);

class BlockManager {
 public:
  // One full group: num_blocks >= 1, block_tokens >= 1; Error otherwise.
  BlockManager(int num_blocks, int block_tokens);
  // One or two groups, at most one of each kind (window 0 and window > 0), each of at least one
  // block (a window group of at least window_seq_blocks); max_forward_tokens >= 1 (the most
  // positions one schedule() covers). Error otherwise.
  BlockManager(const std::vector<KvGroupConfig>& groups, int block_tokens, int max_forward_tokens);

  int block_tokens() const { return block_tokens_; }
  int groups() const { return static_cast<int>(pools_.size()); }
  // Group g's window (0: full attention). Error on a group out of range (as every g below).
  int64_t window(int g) const { return pool(g).window; }
  int total_blocks(int g = 0) const { return static_cast<int>(pool(g).blocks.size()); }
  // Blocks held by at least one sequence.
  int used_blocks(int g = 0) const { return pool(g).used; }
  // Blocks holding nothing.
  int free_blocks(int g = 0) const { return static_cast<int>(pool(g).free.size()); }
  // Published blocks that no sequence holds (evictable); free + cached + used == total.
  int cached_blocks(int g = 0) const { return static_cast<int>(pool(g).lru.size()); }
  // The most blocks one sequence holds in group g: window_seq_blocks for a window group, 0 (no
  // bound) for a full one.
  int seq_blocks(int g) const { return pool(g).seq_blocks; }

  // What a new sequence with these tokens takes from the full groups' pools (its new blocks plus
  // the cached blocks its prefix hit revives; the most over the full groups), and the tokens it
  // finds computed.
  struct AddCost {
    int blocks = 0;
    int cached_tokens = 0;
  };
  AddCost add_cost(std::span<const int32_t> tokens) const;
  // Whether add_sequence(tokens) fits, leaving reserve_blocks blocks to spare in each full group,
  // and each window group has room for seq_blocks of every sequence, this one included.
  bool can_add(std::span<const int32_t> tokens, int reserve_blocks) const;
  // Whether a sequence of `tokens` tokens alone fits the pools with reserve_blocks to spare in
  // each full group.
  bool fits_alone(int64_t tokens, int reserve_blocks) const;
  // A new sequence holding `tokens` (non-empty): takes the published blocks of its longest cached
  // prefix of full blocks (never the block of its last token; in a window group only the blocks
  // that prefix's next forward reads) and allocates the rest in the full groups. Returns the
  // number of tokens whose KV it found computed (a multiple of block_tokens). Error on a known id,
  // empty tokens, or too few blocks.
  int add_sequence(SeqId id, std::span<const int32_t> tokens);
  // Appends token rows to sequence id, allocating full groups' blocks as its last one fills;
  // Error when the pool cannot supply them (nothing changes then).
  void append(SeqId id, std::span<const int32_t> tokens);
  // Whether k more tokens fit in sequence id.
  bool can_append(SeqId id, int k) const;
  // Sequence id's next forward computes positions [begin, end): each window group releases the
  // blocks below begin - W + 1 and allocates those up to end. Error unless 0 <= begin < end <=
  // the sequence's length, end - begin <= max_forward_tokens, and no block that forward reads was
  // released.
  void schedule(SeqId id, int begin, int end);
  // The first n tokens of id have their KV written: publishes its full blocks among them. n only
  // grows and is at most the sequence's length; Error otherwise.
  void mark_computed(SeqId id, int n);
  // Releases id's blocks: published ones stay cached (the sequence's last block is evicted
  // first), the others go back to the free list. Error on an unknown id (a double free).
  void free(SeqId id);

  bool has(SeqId id) const { return seqs_.count(id) != 0; }
  // Sequence id's table in group g (a window group's: kNoBlock for released blocks, and only up
  // to the last scheduled forward's end).
  const std::vector<BlockId>& block_table(SeqId id, int g = 0) const;
  const std::vector<int32_t>& tokens(SeqId id) const;
  int computed(SeqId id) const;
  int sequences() const { return static_cast<int>(seqs_.size()); }

  // Recounts everything from the sequences' tables and the caches; Error naming the first broken
  // invariant.
  void check_invariants() const;

 private:
  struct Block {
    int refs = 0;
    bool published = false;
    uint64_t hash = 0;
    uint64_t uid = 0;          // unique per publication (parents are checked by uid)
    uint64_t parent_uid = 0;   // 0: the first block of a sequence
    uint64_t parent_hash = 0;  // (a window group checks its parent by hash)
    std::vector<int32_t> tokens;
    std::list<BlockId>::iterator lru_pos;  // valid while published with refs == 0
  };
  struct Pool {
    int64_t window = 0;
    int seq_blocks = 0;
    std::vector<Block> blocks;
    std::vector<BlockId> free;
    std::list<BlockId> lru;  // front: evicted first
    std::unordered_map<uint64_t, BlockId> cache;
    int used = 0;
  };
  // A sequence's blocks in one group.
  struct Table {
    std::vector<BlockId> ids;
    int released = 0;   // leading entries released past the window (kNoBlock)
    int published = 0;  // leading blocks whose publication was decided
    uint64_t chain_hash = 0;
    uint64_t chain_uid = 0;
    bool chain_broken = false;  // a block was not published: none after it is either
  };
  struct Seq {
    std::vector<Table> tables;  // by group
    std::vector<int32_t> tokens;
    int computed = 0;
  };
  struct Hit {
    int n = 0;                              // blocks of the prefix
    uint64_t hash = 0;                      // the hash of its last block (0: none)
    std::vector<std::vector<BlockId>> ids;  // by group: blocks [first(g), n)
    std::vector<int> first;                 // by group: the first block it takes
    std::vector<int> revived;               // by group: of them, blocks on the LRU list
  };
  Hit find_prefix(std::span<const int32_t> tokens) const;
  // The first block a forward at position pos reads in pool q (0 for a full group).
  int first_read_block(const Pool& q, int64_t pos) const;
  static uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);
  BlockId allocate(Pool& q);
  void release(Pool& q, BlockId b);
  void publish(Pool& q, Table& t, const Seq& s, int full);
  const Pool& pool(int g) const;
  const Seq& seq(SeqId id, const char* what) const;
  Seq& seq(SeqId id, const char* what);
  int blocks_for(int64_t tokens) const;
  int full_need(std::span<const int32_t> tokens, const Hit& hit, int g) const;

  int block_tokens_;
  int max_forward_tokens_;
  std::vector<Pool> pools_;
  std::unordered_map<SeqId, Seq> seqs_;
  uint64_t next_uid_ = 1;
};

}  // namespace vkllm::batch
