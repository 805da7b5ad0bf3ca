// Sliding-window layers' KV caches as rings (docs/ir.md "KV caches"). An attention op with a
// `window` W reads only the last W positions of each query, so its caches may hold fewer rows than
// the context: R rows, position j at row j % R. A forward of T tokens at positions p..p+T-1
// writes T rows and its first query still reads keys back to p - W + 1, so a ring keeps every key
// a forward reads while T <= R - W + 1; executors split longer forwards into chunks of at most
// that many tokens (ring_forward_tokens). Caches of max_ctx rows (or more) are plain: row j % R
// is row j.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "ir/program.h"

namespace vkllm {

// The tokens of one forward a ring is sized for: a window-W layer's caches get
// W + kRingForwardTokens rows (the Vulkan executor's default largest forward).
inline constexpr int64_t kRingForwardTokens = 512;

// The rows of the caches of a layer with window `window` (<= 0: none) at a context of max_ctx
// positions: min(max_ctx, window + forward_tokens), or max_ctx without a window.
int64_t ring_rows(int64_t max_ctx, int64_t window, int64_t forward_tokens = kRingForwardTokens);

// An attention op's window (its `window` attribute; 0 when it has none or it is not positive).
int64_t attention_window(const Op& o);

// p with each KV cache that only windowed attention ops read shrunk to ring_rows of the largest
// of their windows (the other caches keep their rows). Throws Error on a malformed program.
// (Tests pass fewer forward_tokens for small rings.)
Program with_ring_caches(const Program& p, int64_t forward_tokens = kRingForwardTokens);

// The rows of attention op o's caches (inputs 3 and 4). Error unless both caches have the same
// rows and those are at least p.max_ctx, or (a ring) at least the op's window.
int64_t attention_cache_rows(const Program& p, const Op& o);

// The most tokens one forward of p may write so that every ring keeps the keys its queries read:
// the least R - W + 1 over the attention ops with ring caches, p.max_ctx where there is none.
// Error where an op's caches are malformed (attention_cache_rows).
int ring_forward_tokens(const Program& p);

// The KV groups of a batched pool (docs/serve.md "Sliding-window layers in the pool"): the caches
// that only windowed attention ops read (the sliding-window layers') form the window group, the
// others the full group. Full comes first; a program with caches of one kind has one group.
struct KvGroups {
  std::vector<int64_t> windows;  // per group: 0 (full attention) or the largest window of its ops
  std::vector<int> of_tensor;    // per tensor: its group, -1 where it is no KV cache
  std::vector<uint64_t> bytes_per_token;  // per group: K and V bytes of one position, all layers
  int size() const { return static_cast<int>(windows.size()); }
};
// Error on a malformed program (Program::validate) or one without KV caches.
KvGroups kv_groups(const Program& p);

// What a single sequence's rings still hold, for continuing after a rewind (a session keeping a
// prefix of its context): forwards write every position from theirs on, so a ring of R rows holds
// position j while no position j + R or later has been written since j was. A forward at position
// d reads keys back to d - W + 1, so continuing at d needs every ring to still hold them.
class RingState {
 public:
  explicit RingState(const Program& p);  // (attention_cache_rows' errors)
  // A forward (or a submit of decode steps) wrote positions pos..pos+T-1.
  void wrote(int pos, int T);
  // How many of the first `keep` positions a forward at position keep may continue after: keep,
  // or 0 (a fresh start) where some ring lost keys that forward reads.
  int kept(int keep) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> rings_;  // (rows, window) of each ring op
  int64_t end_ = 0;  // the end of the positions written since the last forward at position 0
};

}  // namespace vkllm
