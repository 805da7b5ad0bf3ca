// The checks every BatchExecutor runs on a BatchForward before it touches a buffer.
#include <vector>

#include "backend/executor.h"
#include "core/error.h"
#include "ir/kv_ring.h"

namespace vkllm {

void check_batch_forward(const BatchForward& b, int num_blocks, int block_tokens, int max_rows,
                         int max_ctx, int window_blocks) {
  if (b.T < 1 || b.T > max_rows)
    fail("batch forward: {} rows (this executor takes 1..{})", b.T, max_rows);
  if (!b.ids || !b.pos || !b.seq || !b.block_table || !b.out_rows || !b.next_tokens)
    fail("batch forward: a required array is missing");
  if (b.n_seqs < 1 || b.table_stride < 1)
    fail("batch forward: {} sequences with a block table stride of {} (each must be >= 1)",
         b.n_seqs, b.table_stride);
  if (b.n_out < 1 || b.n_out > b.T) fail("batch forward: {} output rows for {} rows", b.n_out, b.T);
  for (int64_t i = 0; i < static_cast<int64_t>(b.n_seqs) * b.table_stride; ++i)
    if (b.block_table[i] < 0 || b.block_table[i] >= num_blocks)
      fail("batch forward: block table entry {} is {}, outside the pool of {} blocks", i,
           b.block_table[i], num_blocks);
  if ((window_blocks > 0) != (b.window_table != nullptr))
    fail("batch forward: a window table {} with a window pool of {} blocks",
         b.window_table ? "given" : "missing", window_blocks);
  if (b.window_table)
    for (int64_t i = 0; i < static_cast<int64_t>(b.n_seqs) * b.table_stride; ++i)
      if (b.window_table[i] < 0 || b.window_table[i] >= window_blocks)
        fail("batch forward: window table entry {} is {}, outside the window pool of {} blocks", i,
             b.window_table[i], window_blocks);
  for (int t = 0; t < b.T; ++t) {
    const int32_t s = b.seq[t], p = b.pos[t];
    if (s < 0 || s >= b.n_seqs)
      fail("batch forward: row {} names sequence {} of {}", t, s, b.n_seqs);
    if (p < 0 || p >= max_ctx)
      fail("batch forward: row {} is at position {}, outside the context of {}", t, p, max_ctx);
    if (p / block_tokens >= b.table_stride)
      fail("batch forward: row {} at position {} needs block {} of a table of {}", t, p,
           p / block_tokens, b.table_stride);
    if (t > 0 && b.seq[t - 1] == s && b.pos[t - 1] + 1 != p)
      fail("batch forward: rows {} and {} of sequence {} are not consecutive positions", t - 1, t,
           s);
  }
  std::vector<bool> seen(static_cast<size_t>(b.T), false);
  for (int i = 0; i < b.n_out; ++i) {
    const int32_t r = b.out_rows[i];
    if (r < 0 || r >= b.T || seen[static_cast<size_t>(r)])
      fail("batch forward: output row {} is out of range or repeated", r);
    seen[static_cast<size_t>(r)] = true;
  }
}

std::vector<int> batch_cache_groups(const Program& p, int window_blocks) {
  if (window_blocks < 0) fail("batch executor: a window pool of {} blocks", window_blocks);
  const KvGroups g = kv_groups(p);
  if (window_blocks > 0 && (g.size() != 2 || g.windows[0] != 0))
    fail(
        "batch executor: a window pool of {} blocks, but the program has no sliding-window "
        "layers beside full ones",
        window_blocks);
  std::vector<int> of = g.of_tensor;
  if (window_blocks == 0)
    for (int& k : of) k = k < 0 ? -1 : 0;
  return of;
}

void check_batch_pool(int num_blocks, int block_tokens, int max_rows) {
  if (num_blocks < 1 || block_tokens < 1 || max_rows < 1)
    fail("batch executor: {} blocks of {} rows and {} rows a forward (each must be >= 1)",
         num_blocks, block_tokens, max_rows);
}

}  // namespace vkllm
