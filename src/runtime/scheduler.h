// The continuous-batching scheduler (docs/serve.md, "Batching core"): pure policy over a
// BlockManager, driven step by step by its caller (no threads, no device).
//
// A step is one batched forward pass. The caller loops:
//   plan = step();  run the plan on the device;  on_token(id, token, is_eos) for every sampling
//   item of the plan;  add()/cancel() whenever requests come and go.
// The plan is assumed executed when the next step() begins: that step publishes its KV to the
// prefix cache and appends the reported tokens.
//
// Policy, per step, under a budget of step_tokens tokens:
//   1. Every running sequence that finished its prefill decodes one token (1 token of budget
//      each; step_tokens >= max_running, so decodes always fit and a stream never stalls while
//      others prefill). Before that, each gets a KV slot for its newly sampled token; when the
//      pool has no block left, the most recently admitted running sequence is preempted: its
//      blocks are freed and it goes back to the front of the waiting queue, to recompute its
//      prompt and the tokens it generated when readmitted (vLLM's recompute preemption). Older
//      sequences keep their progress; a sequence alone in the pool always fits (add() checks).
//   2. Running sequences still prefilling get the next chunk of their tokens, oldest first, as
//      far as the remaining budget goes (chunked prefill, as Sarathi-Serve).
//   3. Waiting requests are admitted first-come first-served while the budget lasts, fewer than
//      max_running run, and the request's blocks (those its prefix hit does not cover) plus one
//      spare fit; the head of the queue waits for room rather than being overtaken. No admission
//      in a step that preempted. An admitted request's first chunk starts after its cached prefix.
// Every work item of the plan is announced to the block manager (BlockManager::schedule): a window
// group (sliding-window layers, kv_blocks.h) releases the blocks the sequence's window has passed
// and allocates the item's own; admission and the preemption rule above count the full groups'
// blocks, a window group admitting while it has room for every running sequence's bounded need.
// A prefill chunk that reaches the end of the sequence's tokens samples a token (its last
// position's logits), as every decode does. A sequence leaves when on_token reports eos or its
// max_new_tokens-th token, or on cancel(); its blocks are freed at once.
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv_blocks.h"

namespace vkllm::batch {

struct SchedulerConfig {
  int num_blocks = 0;      // the pool (kv_blocks_for_budget)
  int block_tokens = 16;   // token rows per block
  int max_running = 8;     // sequences in the batch at once (--parallel)
  int step_tokens = 512;   // tokens one step computes, decodes and prefill chunks together
  int max_seq_tokens = 0;  // prompt + max_new_tokens limit (the model's context); 0: none
  // The KV groups (kv_blocks.h); empty: one full group of num_blocks blocks.
  std::vector<KvGroupConfig> groups;
};

// Work on one sequence in a step: compute the KV of its tokens [begin, end). `samples`: end is
// the sequence's length, so the caller samples the next token from position end - 1.
struct Work {
  SeqId id = 0;
  int begin = 0;
  int end = 0;
  bool samples = false;
};

struct Admission {
  SeqId id = 0;
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

struct StepPlan {
  std::vector<Work> decode;   // one token each, always sampling
  std::vector<Work> prefill;  // prompt chunks (after a preemption: prompt and generated tokens)
  std::vector<Admission> admitted;
  std::vector<SeqId> preempted;
  int tokens = 0;  // tokens computed this step (<= step_tokens)
  bool empty() const { return decode.empty() && prefill.empty(); }
};

struct SchedulerCounters {
  int running = 0;
  int waiting = 0;
  int blocks_used = 0;
  int blocks_free = 0;
  int blocks_cached = 0;
  // The window group's (sliding-window layers'), where the pool has one beside the full group.
  int window_blocks_used = 0;
  int window_blocks_free = 0;
  int window_blocks_cached = 0;
  uint64_t prefix_hit_tokens = 0;  // tokens whose KV admission found in the prefix cache
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  uint64_t finished = 0;
};

class Scheduler {
 public:
  // Error on a config that cannot work (no blocks, step_tokens < max_running, ...).
  explicit Scheduler(const SchedulerConfig& cfg);

  // A new request, queued. Error on a known id, an empty prompt, max_new_tokens < 1, or a
  // request that could not fit the pool even alone (or exceeds max_seq_tokens).
  void add(SeqId id, std::span<const int32_t> prompt, int max_new_tokens);
  // Removes a waiting or running request and frees its blocks. Error on an unknown id.
  void cancel(SeqId id);
  // The next step's plan (see the policy above). Error when a sampling item of the previous
  // plan was not reported with on_token.
  StepPlan step();
  // The token sampled for id by the last plan. Returns true when the request is done (eos or
  // max_new_tokens): it has left and its blocks are free. Error when id has no token due.
  bool on_token(SeqId id, int32_t token, bool is_eos);

  // Whether nothing waits or runs.
  bool idle() const { return waiting_.empty() && running_.empty(); }
  SchedulerCounters counters() const;
  const BlockManager& blocks() const { return blocks_; }
  // The request's tokens (prompt, then generated) and its generated count; Error on unknown id.
  const std::vector<int32_t>& tokens(SeqId id) const;
  int generated(SeqId id) const;
  bool running(SeqId id) const;

 private:
  struct Request {
    std::vector<int32_t> tokens;  // prompt then generated
    int prompt_len = 0;
    int max_new = 0;
    int computed = 0;        // tokens scheduled for KV (the last plan counts as run)
    bool prefilled = false;  // its prefill's last chunk was scheduled: it decodes
    bool due = false;        // the last plan sampled for it; on_token pending
  };
  void preempt(SeqId id, StepPlan& plan);
  void finish(SeqId id);
  Request& request(SeqId id, const char* what);
  const Request& request(SeqId id, const char* what) const;

  SchedulerConfig cfg_;
  BlockManager blocks_;
  std::unordered_map<SeqId, Request> requests_;
  std::deque<SeqId> waiting_;
  std::vector<SeqId> running_;  // admission order: the back is preempted first
  uint64_t prefix_hit_tokens_ = 0, preemptions_ = 0, steps_ = 0, finished_ = 0;
};

}  // namespace vkllm::batch
