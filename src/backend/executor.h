// A backend's interpreter of a program: one forward over T tokens at positions pos..pos+T-1.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"

namespace vkllm {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the program once. Returns the greedy next token (the program's next_token output).
  // If logits_out is not null it receives the vocab logits of the last token (F32).
  // Throws Error if pos + T exceeds the program's max_ctx.
  virtual int32_t forward(const int32_t* ids, int T, int pos, float* logits_out) = 0;
  // The vocab logits (F32) of the last token of the last forward (or of decode_greedy's last
  // step), as forward's logits_out would have received them: for callers that need them only
  // sometimes (a constrained step whose greedy token the constraint refuses).
  virtual void last_logits(float* out) = 0;
  virtual const char* name() const = 0;
  // How many of the first `keep` positions of the KV cache a forward at position keep may
  // continue after (a session rewinding to a prefix of its context): keep, or 0 where a
  // sliding-window layer's ring (ir/kv_ring.h) no longer holds the keys that forward reads.
  virtual int kept_positions(int keep) const { return keep; }
  // Greedy decoding of several steps at once: feeds `first` at position pos, then each step's own
  // argmax, n steps in all, writing the n argmax tokens to out (tokens past an eos among them are
  // the caller's to discard: the KV rows they wrote lie beyond the position it continues from).
  // A backend that keeps the token on the device runs up to greedy_batch() steps per submit
  // (more run step by step).
  virtual int greedy_batch() const { return 1; }
  virtual void decode_greedy(int32_t first, int pos, int n, int32_t* out) {
    for (int i = 0; i < n; ++i) first = out[i] = forward(&first, 1, pos + i, nullptr);
  }
  // Constrained greedy decoding's run ahead (generate()): a submit of n > 1 steps only after
  // constrained_ahead() * (n - 1) argmaxes in a row were allowed, so a refused one wastes at most
  // 1 / constrained_ahead() of the steps before it (plus one).
  virtual int constrained_ahead() const { return kConstrainedAhead; }
  // On an H100 a decode step of Llama-3.2-1B costs about 24 times a submit's own cost (1,132 tok/s
  // at 16 steps a submit, 1,089 at one): a refused argmax at a submit's first step breaks even at
  // 24, at a uniformly random step at about 12.
  static constexpr int kConstrainedAhead = 16;
};

// One batched forward over the rows of several sequences (continuous batching, docs/ir.md
// "Batched forward"). Row t is token ids[t] of sequence seq[t] at position pos[t]; the rows of one
// sequence are consecutive and in position order. The KV caches are a pool of blocks of
// block_tokens rows: position p of sequence s lives in pool row
// block_table[s * table_stride + p / block_tokens] * block_tokens + p % block_tokens. An executor
// with a window pool (window_blocks > 0: the program's sliding-window layers' caches, the window
// group of ir/kv_ring.h's kv_groups, in a pool of their own) finds those caches' rows the same way
// through window_table; its entries for blocks every row's window has passed are never read.
// Every row first writes its k and v there (all rows before any attention reads), then attends to
// positions 0..pos[t] of its own sequence. The rows listed in out_rows (e.g. the last row of each
// sequence) get the argmax of their logits in next_tokens[i], and their vocab logits (F32) in
// logits + i * vocab when logits is not null.
struct BatchForward {
  int T = 0;                              // rows, >= 1
  const int32_t* ids = nullptr;           // [T]
  const int32_t* pos = nullptr;           // [T], 0 <= pos < the program's max_ctx
  const int32_t* seq = nullptr;           // [T], 0 <= seq < n_seqs
  int n_seqs = 0;                         // >= 1
  const int32_t* block_table = nullptr;   // [n_seqs * table_stride] physical block ids
  const int32_t* window_table = nullptr;  // [n_seqs * table_stride] the window pool's, if any
  int table_stride = 0;                   // >= ceil((max pos + 1) / block_tokens)
  const int32_t* out_rows = nullptr;      // [n_out] distinct rows in 0..T-1
  int n_out = 0;                          // >= 1
  int32_t* next_tokens = nullptr;         // [n_out]
  float* logits = nullptr;                // [n_out * vocab] or null
};

// Error with one line unless b fits the pool and max_rows and its rows are well formed (sequence
// ids in range, consecutive positions within a sequence, table entries inside the pool, distinct
// output rows; window_table present exactly where window_blocks > 0, its entries inside the
// window pool). Rows of one sequence need not be adjacent to the other sequences' rows.
void check_batch_forward(const BatchForward& b, int num_blocks, int block_tokens, int max_rows,
                         int max_ctx, int window_blocks = 0);
// Error with one line unless a pool of num_blocks x block_tokens rows and max_rows rows a
// forward are each at least 1.
void check_batch_pool(int num_blocks, int block_tokens, int max_rows);

// The executor of batched forwards: owns the KV block pool (num_blocks x block_tokens rows of
// every KVCache tensor; with window_blocks > 0, window_blocks x block_tokens rows of each cache of
// the window group) and the activations of up to max_rows rows. Throws Error on a malformed
// BatchForward (a block id outside the pool, rows out of order, T > max_rows, ...).
class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  virtual void forward(const BatchForward& b) = 0;
  virtual int num_blocks() const = 0;
  virtual int block_tokens() const = 0;
  virtual int max_rows() const = 0;
  virtual int window_blocks() const = 0;  // 0: one pool for every cache
  virtual const char* name() const = 0;
};

// A program whose weights a backend holds ready (on Vulkan: uploaded to the device once). Every
// executor made from it shares those weights, owns one conversation's state (KV cache,
// activations) and keeps the loaded program alive. Calls on a loaded program and its executors
// must not run concurrently (one device queue).
class LoadedProgram {
 public:
  virtual ~LoadedProgram() = default;
  virtual std::unique_ptr<Executor> make_executor() = 0;
  // A batched executor with its own KV pool (Error when the device lacks the memory, or where
  // window_blocks > 0 and the program has no window group beside its full one).
  virtual std::unique_ptr<BatchExecutor> make_batch_executor(int num_blocks, int block_tokens,
                                                             int max_rows,
                                                             int window_blocks = 0) = 0;
  virtual std::string device_name() const = 0;  // "cpu", or the Vulkan device's name
};

// The CPU reference interpreter (src/backend/cpu/cpu_executor.cpp). The program and the weight
// source must outlive the executor.
std::unique_ptr<Executor> make_cpu_executor(const Program& program, const WeightSource& weights);
// The CPU reference of batched forwards (the oracle of the Vulkan one).
std::unique_ptr<BatchExecutor> make_cpu_batch_executor(const Program& program,
                                                       const WeightSource& weights, int num_blocks,
                                                       int block_tokens, int max_rows,
                                                       int window_blocks = 0);
// Error with one line unless window_blocks is 0, or positive and p has a window group beside its
// full one (kv_groups); returns the group of each tensor whose caches go in the window pool
// (1), the others 0, -1 for tensors that are no KV cache.
std::vector<int> batch_cache_groups(const Program& p, int window_blocks);

}  // namespace vkllm
