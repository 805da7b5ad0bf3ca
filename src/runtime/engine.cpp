// The public continuous-batching Engine (include/vkllm/vkllm.h): a batch::Scheduler over the
// model's BatchExecutor. Each step runs the scheduler's plan as one BatchForward (decode rows and
// prefill chunks of every running request), then picks each sampling request's token exactly as
// generate() does for one sequence (its own Sampler, constraint, eos, stop strings), so a request's
// tokens do not depend on the others in the batch.
//
// add() and cancel() only queue under `mu` (any thread); step() alone touches the scheduler and
// the requests, and publishes the counters back under `mu`.
#include <algorithm>
#include <climits>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "grammar/grammar.h"
#include "ir/kv_ring.h"
#include "runtime/constraint.h"
#include "runtime/model_impl.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "vkllm/vkllm.h"

namespace vkllm {

namespace {

// The pools of an engine (docs/serve.md, "Sliding-window layers in the pool"): one for every
// cache, or, where the sliding-window layers' window holds fewer blocks than the context, the full
// layers' pool (group 0) and the sliding layers' (group 1).
struct Pools {
  std::vector<batch::KvGroupConfig> groups;  // (one: a full group of every cache)
  uint64_t block_bytes = 0, window_block_bytes = 0;
};

Pools plan_pools(const Program& p, const EngineOptions& o) {
  const KvGroups kg = kv_groups(p);
  const uint64_t bt = static_cast<uint64_t>(o.block_tokens);
  const uint64_t seq_blocks = (static_cast<uint64_t>(p.max_ctx) + bt - 1) / bt;
  const uint64_t n = static_cast<uint64_t>(o.max_sequences);
  uint64_t all = 0;
  for (uint64_t b : kg.bytes_per_token) all += b;
  if (all == 0) fail("the model's program has no KV cache");
  const bool split = kg.size() == 2 && kg.bytes_per_token[0] > 0 && kg.bytes_per_token[1] > 0 &&
                     static_cast<uint64_t>(batch::window_seq_blocks(kg.windows[1], o.block_tokens,
                                                                    o.step_tokens)) < seq_blocks;
  Pools r;
  r.block_bytes = (split ? kg.bytes_per_token[0] : all) * bt;
  uint64_t window = 0;  // the window pool's blocks
  uint64_t budget = o.kv_budget_bytes;
  if (split) {
    const int64_t w = kg.windows[1];
    const uint64_t wseq =
        static_cast<uint64_t>(batch::window_seq_blocks(w, o.block_tokens, o.step_tokens));
    r.window_block_bytes = kg.bytes_per_token[1] * bt;
    if (budget == 0) {
      window = wseq * n;
    } else {
      // As many sequences' bounded window as the budget holds sequences at the full context
      // (at least one, at most max_sequences); the full layers' pool takes the rest.
      const uint64_t whole = budget / (r.block_bytes * seq_blocks + r.window_block_bytes * wseq);
      window = wseq * std::clamp<uint64_t>(whole, 1, n);
      if (window * r.window_block_bytes >= budget)
        fail(
            "engine: a KV budget of {} bytes cannot hold the sliding-window layers' {} blocks of "
            "{} bytes that one sequence needs",
            budget, wseq, r.window_block_bytes);
      budget -= window * r.window_block_bytes;
    }
  }
  // The default: every sequence at the full context, plus the spare block admission keeps.
  uint64_t blocks = o.kv_budget_bytes > 0 ? budget / r.block_bytes : seq_blocks * n + 1;
  if (blocks < 2)
    fail("engine: a KV budget of {} bytes holds {} blocks of {} bytes; at least 2 are needed",
         o.kv_budget_bytes, blocks, r.block_bytes);
  r.groups.push_back({static_cast<int>(std::min<uint64_t>(blocks, INT32_MAX / 2)), 0});
  if (split)
    r.groups.push_back(
        {static_cast<int>(std::min<uint64_t>(window, INT32_MAX / 2)), kg.windows[1]});
  return r;
}

}  // namespace

struct __attribute__((visibility("hidden"))) Engine::Impl {
  struct Req {
    Req(const Tokenizer& tok, const GenerationOptions& o)
        : opts(o), sampler(sampling_params(o)), dec(tok), stop(o.stop) {}
    std::vector<int32_t> prompt;
    GenerationOptions opts;
    int max_new = 0;
    Sampler sampler;
    bool needs_logits = false;
    std::vector<int> eos;
    StreamDecoder dec;
    StopMatcher stop;
    std::unique_ptr<grammar::Matcher> matcher;
    std::string raw;  // the reply's text before the stop matcher (to name the stop string met)
    int generated = 0;
    int cached = 0;
  };

  std::shared_ptr<Model> model;
  EngineOptions opt;
  int max_ctx = 0, vocab = 0;
  uint64_t block_bytes = 0, window_block_bytes = 0;
  std::unique_ptr<BatchExecutor> ex;
  std::unique_ptr<batch::Scheduler> sched;
  std::unordered_map<uint64_t, std::unique_ptr<Req>> reqs;  // step() only
  std::vector<float> logits;                                // step() only

  mutable std::mutex mu;  // guards what follows
  std::vector<std::pair<uint64_t, std::unique_ptr<Req>>> added;
  std::vector<uint64_t> cancelled;
  EngineStats snapshot;
  uint64_t next_id = 1;

  Model::Impl& m() const { return *model->impl_; }
  void publish();
  std::vector<EngineEvent> step();
  // Picks the next token of request id from its row's outputs; fills ev (finished or not).
  bool sample(uint64_t id, Req& r, int32_t greedy, float* row_logits, EngineEvent& ev);
};

Engine::Engine(std::shared_ptr<Model> model, const EngineOptions& o)
    : impl_(std::make_unique<Impl>()) {
  if (!model) fail("an engine needs a model (Model::open returned none)");
  Impl& e = *impl_;
  e.model = std::move(model);
  e.opt = o;
  Model::Impl& m = e.m();
  const Program& p = m.program();
  e.max_ctx = static_cast<int>(p.max_ctx);
  e.vocab = m.info.vocab_size;
  if (o.max_sequences < 1)
    fail("engine: max_sequences must be at least 1 (got {})", o.max_sequences);
  if (o.block_tokens < 1 || o.block_tokens > 4096)
    fail("engine: block_tokens {} must be in [1, 4096]", o.block_tokens);
  if (o.step_tokens < o.max_sequences || o.step_tokens > 65536)
    fail("engine: step_tokens {} must be in [max_sequences {}, 65536]", o.step_tokens,
         o.max_sequences);
  const Pools pools = plan_pools(p, o);
  e.block_bytes = pools.block_bytes;
  e.window_block_bytes = pools.window_block_bytes;
  batch::SchedulerConfig sc;
  sc.num_blocks = pools.groups[0].num_blocks;
  sc.groups = pools.groups;
  sc.block_tokens = o.block_tokens;
  sc.max_running = o.max_sequences;
  sc.step_tokens = o.step_tokens;
  // The last generated token is never fed back: a request holds up to max_ctx + 1 tokens.
  sc.max_seq_tokens = e.max_ctx + 1;
  e.sched = std::make_unique<batch::Scheduler>(sc);
  {
    std::lock_guard<std::mutex> lock(m.run_mu);
    e.ex = m.loaded->make_batch_executor(sc.num_blocks, sc.block_tokens, sc.step_tokens,
                                         sc.groups.size() == 2 ? sc.groups[1].num_blocks : 0);
  }
  e.publish();
}

Engine::~Engine() {
  std::lock_guard<std::mutex> lock(impl_->m().run_mu);
  impl_->ex.reset();
}

const std::shared_ptr<Model>& Engine::model() const {
  return impl_->model;
}

uint64_t Engine::add(const std::vector<int32_t>& prompt, const GenerationOptions& opts) {
  Impl& e = *impl_;
  Model::Impl& m = e.m();
  check_generation_options(opts);
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  for (int32_t id : prompt)
    if (id < 0 || id >= e.vocab)
      fail("prompt token id {} is outside the vocabulary [0, {})", id, e.vocab);
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= e.max_ctx)
    fail("the prompt has {} tokens but the context holds {}", prompt.size(), e.max_ctx);
  auto r = std::make_unique<Impl::Req>(m.tokenizer(), opts);
  r->prompt = prompt;
  // As generate(): at most max_ctx - n + 1 tokens (the last one is never fed).
  r->max_new = static_cast<int>(std::min<int64_t>(opts.max_new_tokens, e.max_ctx - n + 1));
  const int64_t bt = e.opt.block_tokens;
  const int64_t need = (n + r->max_new - 1 + bt - 1) / bt + 1;
  if (!e.sched->blocks().fits_alone(n + r->max_new - 1, 1))
    fail("the request needs {} KV blocks of {} tokens, the pool has {} (raise the KV budget)", need,
         bt, e.sched->blocks().total_blocks());
  r->sampler.add_context(prompt);
  r->needs_logits = sampling_params(opts).needs_logits() || opts.constraint != nullptr;
  if (opts.stop_at_eos) r->eos.assign(m.info.eos_ids.begin(), m.info.eos_ids.end());
  if (opts.constraint)
    r->matcher = std::make_unique<grammar::Matcher>(opts.constraint->grammar, m.token_index());
  std::lock_guard<std::mutex> lock(e.mu);
  const uint64_t id = e.next_id++;
  e.added.emplace_back(id, std::move(r));
  return id;
}

void Engine::cancel(uint64_t request) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cancelled.push_back(request);
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->added.empty() && impl_->cancelled.empty() && impl_->snapshot.active == 0 &&
         impl_->snapshot.waiting == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineStats s = impl_->snapshot;
  s.waiting += static_cast<int>(impl_->added.size());
  return s;
}

std::vector<EngineEvent> Engine::step() {
  return impl_->step();
}

void Engine::Impl::publish() {
  const batch::SchedulerCounters c = sched->counters();
  std::lock_guard<std::mutex> lock(mu);
  snapshot.active = c.running;
  snapshot.waiting = c.waiting;
  snapshot.kv_blocks_used = c.blocks_used;
  snapshot.kv_blocks_cached = c.blocks_cached;
  snapshot.kv_blocks_total = sched->blocks().total_blocks();
  snapshot.block_tokens = opt.block_tokens;
  snapshot.kv_block_bytes = block_bytes;
  const batch::BlockManager& bm = sched->blocks();
  if (bm.groups() == 2) {
    snapshot.kv_window = static_cast<int>(bm.window(1));
    snapshot.kv_window_blocks_used = c.window_blocks_used;
    snapshot.kv_window_blocks_cached = c.window_blocks_cached;
    snapshot.kv_window_blocks_total = bm.total_blocks(1);
    snapshot.kv_window_block_bytes = window_block_bytes;
  }
  snapshot.prefix_hit_tokens = c.prefix_hit_tokens;
  snapshot.preemptions = c.preemptions;
  snapshot.steps = c.steps;
}

bool Engine::Impl::sample(uint64_t id, Req& r, int32_t greedy, float* row_logits, EngineEvent& ev) {
  ev.request = id;
  const int k = r.generated;
  const int pos = static_cast<int>(r.prompt.size()) + k;  // KV rows before this token
  int32_t next = 0;
  bool ended = false, token = true;
  std::string reason;
  if (r.matcher) {
    const int left = std::max(1, std::min(r.max_new - k, max_ctx - pos + 1));
    next = pick_constrained(
        r.sampler, *r.matcher, greedy, [&] { return row_logits; }, vocab, left);
    if (r.matcher->is_eos(next) && r.matcher->complete()) {
      ended = true, token = false, reason = "stop";
    } else if (!r.matcher->accept_token(next)) {
      fail("the constraint refused token {} that its own mask allowed (a bug)", next);
    }
  } else {
    next = r.sampler.pick(greedy, r.needs_logits ? row_logits : nullptr, vocab);
  }
  if (!ended && std::find(r.eos.begin(), r.eos.end(), next) != r.eos.end())
    ended = true, token = false, reason = "stop";
  if (token) {
    ev.token = next;
    ++r.generated;
    std::string piece = r.dec.push(next);
    if (!r.stop.empty()) {
      r.raw += piece;
      piece = r.stop.push(piece);
    }
    ev.text = std::move(piece);
    if (r.stop.stopped()) {
      ended = true, reason = "stop";
      size_t at = std::string::npos;
      for (const std::string& s : r.opts.stop)
        if (const size_t j = r.raw.find(s); j < at) at = j, ev.stop = s;
    } else if (r.matcher && r.matcher->finished()) {
      ended = true, reason = "stop";
    } else if (r.generated >= r.max_new) {
      ended = true, reason = "length";
    }
  }
  ev.generated_tokens = r.generated;
  ev.cached_tokens = r.cached;
  if (sched->on_token(id, next, ended) && !ended) ended = true, reason = "length";
  if (ended) {
    std::string tail = r.dec.flush();
    if (!r.stop.empty()) {
      tail = r.stop.push(tail);
      tail += r.stop.flush();
    }
    ev.text += tail;
    ev.finished = true;
    ev.finish_reason = reason;
  }
  return ended;
}

std::vector<EngineEvent> Engine::Impl::step() {
  std::vector<EngineEvent> events;
  decltype(added) adds;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu);
    adds.swap(added);
    cancels.swap(cancelled);
  }
  const auto end_event = [&](uint64_t id, const std::string& reason, const std::string& text,
                             int generated) {
    EngineEvent ev;
    ev.request = id;
    ev.finished = true;
    ev.finish_reason = reason;
    ev.text = text;
    ev.generated_tokens = generated;
    events.push_back(std::move(ev));
  };
  for (auto& [id, r] : adds) {
    if (r->max_new <= 0) {
      end_event(id, "length", "", 0);
      continue;
    }
    try {
      sched->add(id, r->prompt, r->max_new);
      reqs.emplace(id, std::move(r));
    } catch (const Error& err) {
      end_event(id, "error", err.what(), 0);
    }
  }
  for (uint64_t id : cancels) {
    auto it = reqs.find(id);
    if (it == reqs.end()) continue;
    sched->cancel(id);
    end_event(id, "cancelled", "", it->second->generated);
    reqs.erase(it);
  }
  if (sched->idle()) {
    publish();
    return events;
  }
  const batch::StepPlan plan = sched->step();
  for (const batch::Admission& a : plan.admitted) reqs.at(a.id)->cached = a.cached_tokens;
  if (plan.empty()) {
    publish();
    return events;
  }
  // The rows: every work item's tokens, sequences numbered in plan order.
  std::vector<int32_t> ids, pos, seq, out_rows, table, window_table;
  std::vector<uint64_t> out_ids;
  std::vector<batch::SeqId> seqs;
  bool want_logits = false;
  for (const auto* list : {&plan.decode, &plan.prefill})
    for (const batch::Work& w : *list) {
      const std::vector<int32_t>& toks = sched->tokens(w.id);
      const int s = static_cast<int>(seqs.size());
      seqs.push_back(w.id);
      for (int p = w.begin; p < w.end; ++p) {
        ids.push_back(toks[static_cast<size_t>(p)]);
        pos.push_back(p);
        seq.push_back(s);
      }
      if (w.samples) {
        out_rows.push_back(static_cast<int32_t>(ids.size()) - 1);
        out_ids.push_back(w.id);
        want_logits = want_logits || reqs.at(w.id)->needs_logits;
      }
    }
  // A step of prefill chunks alone still needs an output row (its token is not used).
  if (out_rows.empty()) out_rows.push_back(static_cast<int32_t>(ids.size()) - 1);
  // The block tables, one row per sequence in each group; the entries a window group released or
  // has not allocated yet (past its scheduled forward) are never read: block 0 stands in.
  const batch::BlockManager& bm = sched->blocks();
  size_t stride = 1;
  for (batch::SeqId id : seqs)
    for (int g = 0; g < bm.groups(); ++g) stride = std::max(stride, bm.block_table(id, g).size());
  for (int g = 0; g < bm.groups(); ++g) {
    std::vector<int32_t>& t = g == 0 ? table : window_table;
    t.assign(seqs.size() * stride, 0);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const std::vector<batch::BlockId>& ids_g = bm.block_table(seqs[s], g);
      for (size_t i = 0; i < ids_g.size(); ++i)
        t[s * stride + i] = std::max<batch::BlockId>(ids_g[i], 0);
    }
  }
  std::vector<int32_t> next(out_rows.size());
  if (want_logits) logits.resize(out_rows.size() * static_cast<size_t>(vocab));
  BatchForward b;
  b.T = static_cast<int>(ids.size());
  b.ids = ids.data();
  b.pos = pos.data();
  b.seq = seq.data();
  b.n_seqs = static_cast<int>(seqs.size());
  b.block_table = table.data();
  b.window_table = window_table.empty() ? nullptr : window_table.data();
  b.table_stride = static_cast<int>(stride);
  b.out_rows = out_rows.data();
  b.n_out = static_cast<int>(out_rows.size());
  b.next_tokens = next.data();
  b.logits = want_logits ? logits.data() : nullptr;
  try {
    std::lock_guard<std::mutex> lock(m().run_mu);
    ex->forward(b);
  } catch (const Error& err) {
    // The plan's requests cannot go on (their KV is unknown): each ends with the error.
    for (const auto* list : {&plan.decode, &plan.prefill})
      for (const batch::Work& w : *list) {
        auto it = reqs.find(w.id);
        if (it == reqs.end()) continue;
        sched->cancel(w.id);
        end_event(w.id, "error", err.what(), it->second->generated);
        reqs.erase(it);
      }
    publish();
    return events;
  }
  for (size_t i = 0; i < out_ids.size(); ++i) {
    const uint64_t id = out_ids[i];
    Req& r = *reqs.at(id);
    EngineEvent ev;
    bool ended = false;
    try {
      ended = sample(id, r, next[i],
                     want_logits ? logits.data() + i * static_cast<size_t>(vocab) : nullptr, ev);
    } catch (const Error& err) {
      try {
        sched->cancel(id);
      } catch (const Error&) {  // on_token already ended it
      }
      ev = EngineEvent{};
      ev.request = id;
      ev.finished = true;
      ev.finish_reason = "error";
      ev.text = err.what();
      ev.generated_tokens = r.generated;
      ended = true;
    }
    events.push_back(std::move(ev));
    if (ended) reqs.erase(id);
  }
  publish();
  return events;
}

}  // namespace vkllm
