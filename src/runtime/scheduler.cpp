#include "runtime/scheduler.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace vkllm::batch {

namespace {

BlockManager make_pool(const SchedulerConfig& c) {
  if (c.max_running < 1) fail("scheduler: max_running must be at least 1 (got {})", c.max_running);
  if (c.step_tokens < c.max_running)
    fail("scheduler: step_tokens {} is below max_running {}: decodes would not fit a step",
         c.step_tokens, c.max_running);
  if (c.max_seq_tokens < 0) fail("scheduler: max_seq_tokens must not be negative");
  if (c.groups.empty()) return BlockManager({{c.num_blocks, 0}}, c.block_tokens, c.step_tokens);
  return BlockManager(c.groups, c.block_tokens, c.step_tokens);
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& cfg) : cfg_(cfg), blocks_(make_pool(cfg)) {}

Scheduler::Request& Scheduler::request(SeqId id, const char* what) {
  auto it = requests_.find(id);
  if (it == requests_.end()) fail("scheduler: {} of unknown request {}", what, id);
  return it->second;
}

const Scheduler::Request& Scheduler::request(SeqId id, const char* what) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) fail("scheduler: {} of unknown request {}", what, id);
  return it->second;
}

void Scheduler::add(SeqId id, std::span<const int32_t> prompt, int max_new_tokens) {
  if (requests_.count(id)) fail("scheduler: request {} already exists", id);
  if (prompt.empty()) fail("scheduler: request {} has an empty prompt", id);
  if (max_new_tokens < 1)
    fail("scheduler: request {} asks for {} new tokens (at least 1)", id, max_new_tokens);
  if (prompt.size() > static_cast<size_t>(INT_MAX / 2) || max_new_tokens > INT_MAX / 2)
    fail("scheduler: request {} is too long", id);
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  if (cfg_.max_seq_tokens > 0 && total > cfg_.max_seq_tokens)
    fail("scheduler: request {} needs {} tokens of context, the limit is {}", id, total,
         cfg_.max_seq_tokens);
  // Alone in the pool it must be admissible at its longest (prompt and all but the last
  // generated token, which is never fed back) with the one spare block admission keeps.
  const int64_t bt = cfg_.block_tokens;
  const int64_t need = (total - 1 + bt - 1) / bt + 1;
  if (!blocks_.fits_alone(total - 1, 1))
    fail("scheduler: request {} needs {} blocks of {} tokens, the pool has {}", id, need, bt,
         blocks_.total_blocks());
  Request r;
  r.tokens.assign(prompt.begin(), prompt.end());
  r.prompt_len = static_cast<int>(prompt.size());
  r.max_new = max_new_tokens;
  requests_.emplace(id, std::move(r));
  waiting_.push_back(id);
}

void Scheduler::cancel(SeqId id) {
  request(id, "cancel");
  auto w = std::find(waiting_.begin(), waiting_.end(), id);
  if (w != waiting_.end()) {
    waiting_.erase(w);
  } else {
    blocks_.free(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  }
  requests_.erase(id);
}

void Scheduler::preempt(SeqId id, StepPlan& plan) {
  Request& r = request(id, "preempt");
  blocks_.free(id);
  r.computed = 0;
  r.prefilled = false;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++preemptions_;
}

void Scheduler::finish(SeqId id) {
  blocks_.free(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  requests_.erase(id);
  ++finished_;
}

StepPlan Scheduler::step() {
  for (SeqId id : running_)
    if (requests_.at(id).due)
      fail("scheduler: request {} has not reported the token of the last step", id);
  ++steps_;
  StepPlan plan;
  // The last plan ran: its KV can be shared.
  for (SeqId id : running_) blocks_.mark_computed(id, requests_.at(id).computed);

  // KV slots for the tokens sampled last step, oldest sequence first; preempt from the newest.
  for (size_t i = 0; i < running_.size(); ++i) {
    const SeqId id = running_[i];
    Request& r = requests_.at(id);
    const size_t have = blocks_.tokens(id).size();
    const int k = static_cast<int>(r.tokens.size() - have);
    if (k == 0) continue;
    bool self = false;
    while (!blocks_.can_append(id, k)) {
      const SeqId victim = running_.back();
      preempt(victim, plan);
      if (victim == id) {
        self = true;
        break;
      }
    }
    if (self) break;  // it was the newest: nothing runs after it
    blocks_.append(id, std::span<const int32_t>(r.tokens).subspan(have));
  }

  int budget = cfg_.step_tokens;
  auto schedule_chunk = [&](SeqId id, Request& r) {
    const int n = static_cast<int>(r.tokens.size());
    const int len = std::min(n - r.computed, budget);
    if (len <= 0) return;
    Work w{id, r.computed, r.computed + len, r.computed + len == n};
    blocks_.schedule(id, w.begin, w.end);
    if (w.samples) r.prefilled = r.due = true;
    r.computed = w.end;
    budget -= len;
    plan.prefill.push_back(w);
  };
  for (SeqId id : running_) {
    Request& r = requests_.at(id);
    if (!r.prefilled) continue;
    const int n = static_cast<int>(r.tokens.size());
    plan.decode.push_back({id, n - 1, n, true});
    blocks_.schedule(id, n - 1, n);
    r.computed = n;
    r.due = true;
    --budget;
  }
  for (SeqId id : running_) {
    Request& r = requests_.at(id);
    if (!r.prefilled && budget > 0 && r.computed < static_cast<int>(r.tokens.size()))
      schedule_chunk(id, r);
  }
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && static_cast<int>(running_.size()) < cfg_.max_running &&
           budget > 0) {
      const SeqId id = waiting_.front();
      Request& r = requests_.at(id);
      if (!blocks_.can_add(r.tokens, 1)) break;  // first come first served: the head waits
      const int cached = blocks_.add_sequence(id, r.tokens);
      waiting_.pop_front();
      running_.push_back(id);
      r.computed = cached;
      prefix_hit_tokens_ += cached;
      plan.admitted.push_back({id, cached});
      schedule_chunk(id, r);
    }
  }
  plan.tokens = cfg_.step_tokens - budget;
  return plan;
}

bool Scheduler::on_token(SeqId id, int32_t token, bool is_eos) {
  Request& r = request(id, "on_token");
  if (!r.due) fail("scheduler: request {} has no token due (on_token twice or before a step)", id);
  r.due = false;
  r.tokens.push_back(token);
  const int generated = static_cast<int>(r.tokens.size()) - r.prompt_len;
  if (is_eos || generated >= r.max_new) {
    blocks_.mark_computed(id, r.computed);  // the plan ran: keep its KV for the prefix cache
    finish(id);
    return true;
  }
  return false;
}

SchedulerCounters Scheduler::counters() const {
  SchedulerCounters c;
  c.running = static_cast<int>(running_.size());
  c.waiting = static_cast<int>(waiting_.size());
  c.blocks_used = blocks_.used_blocks();
  c.blocks_free = blocks_.free_blocks();
  c.blocks_cached = blocks_.cached_blocks();
  if (blocks_.groups() == 2) {
    c.window_blocks_used = blocks_.used_blocks(1);
    c.window_blocks_free = blocks_.free_blocks(1);
    c.window_blocks_cached = blocks_.cached_blocks(1);
  }
  c.prefix_hit_tokens = prefix_hit_tokens_;
  c.preemptions = preemptions_;
  c.steps = steps_;
  c.finished = finished_;
  return c;
}

const std::vector<int32_t>& Scheduler::tokens(SeqId id) const {
  return request(id, "tokens").tokens;
}

int Scheduler::generated(SeqId id) const {
  const Request& r = request(id, "generated");
  return static_cast<int>(r.tokens.size()) - r.prompt_len;
}

bool Scheduler::running(SeqId id) const {
  request(id, "running");
  return std::find(running_.begin(), running_.end(), id) != running_.end();
}

}  // namespace vkllm::batch
