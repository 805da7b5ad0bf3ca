// A continuous-batching run over a model with sliding-window layers whose KV sits in a window pool
// of its own (docs/serve.md, "Sliding-window layers in the pool"): the batch::Scheduler's plans
// (its block manager with a full group and a window group) run through a BatchExecutor, and, as
// the reference, each request's work items replayed in the same order on a single-sequence
// Executor of its own. Requests arrive at different steps, prefill in chunks and decode well past
// the window, so the window group releases blocks and hands them to other requests meanwhile. The
// tokens fed back are fixed ids (not the argmax), so runs on different backends stay aligned.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "backend/executor.h"
#include "runtime/scheduler.h"
#include "testutil/batch_scenario.h"

namespace vkllm::testutil {

struct WindowScenario {
  // Window 8 (the tiny-gemma3 twin's), blocks of 4, steps of 8 tokens: a request holds at most
  // ceil((8 - 1 + 8) / 4) + 1 = 5 window blocks; four run at once.
  static constexpr int kBlockTokens = 4, kStepTokens = 8, kRunning = 4, kWindow = 8;
  static constexpr int kFullBlocks = 72, kWindowBlocks = 4 * 5;
  struct Request {
    int arrival;  // the step it is added at; -1: the step after request 1 finished
    std::vector<int32_t> prompt;
    int max_new;
  };
  // Request 5's prompt is request 1's tokens (its prompt and the 30 fed back) and one more: a
  // prefix hit of 10 blocks, whose window blocks 8 and 9 request 1 held until it finished.
  std::vector<Request> requests = {
      {0, ids(13, 1), 30},
      {0, ids(5, 2), 40},
      {2, ids(21, 3), 24},
      {6, ids(3, 4), 36},
      {-1, history(ids(13, 1), 1, 30), 12},
  };
  static std::vector<int32_t> ids(int n, int seed) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i)
      p.push_back(static_cast<int32_t>(3 + (seed == 1 ? i * 37 : seed * 131 + i * 53) % 400));
    return p;
  }
  static int32_t next_id(uint64_t id, int k) {
    return static_cast<int32_t>((id * 71 + k * 29) % 400);
  }
  // A prompt, the n tokens request id is fed back, and one more token.
  static std::vector<int32_t> history(std::vector<int32_t> p, uint64_t id, int n) {
    for (int k = 0; k < n; ++k) p.push_back(next_id(id, k));
    p.push_back(7);
    return p;
  }

  // One work item of a step: request id computes positions begin..end-1 (these tokens).
  struct Item {
    uint64_t id;
    int begin;
    bool samples;
    std::vector<int32_t> tokens;
  };
  struct Run {
    std::vector<BatchOutput> out;          // per sampling item, in plan order (seq: the id)
    std::vector<std::vector<Item>> steps;  // the plans
    int most_window_used = 0, most_full_used = 0, most_window_per_seq = 0;
    int window_blocks_shared_over_time = 0;  // window blocks held by two requests or more
    uint64_t prefix_hit_tokens = 0;
  };

  batch::SchedulerConfig config() const {
    batch::SchedulerConfig c;
    c.block_tokens = kBlockTokens;
    c.step_tokens = kStepTokens;
    c.max_running = kRunning;
    c.num_blocks = kFullBlocks;
    c.groups = {{kFullBlocks, 0}, {kWindowBlocks, kWindow}};
    return c;
  }

  Run run_batched(BatchExecutor& ex, int vocab) const {
    batch::Scheduler s(config());
    Run run;
    std::map<int, std::set<uint64_t>> holders;  // window block -> requests that held it
    size_t done = 0;
    int first_done = -2;  // the step request 1 finished at
    for (int step = 0; done < requests.size() && step < 1000; ++step) {
      for (size_t r = 0; r < requests.size(); ++r)
        if (requests[r].arrival == step || (requests[r].arrival < 0 && first_done == step - 1))
          s.add(r + 1, requests[r].prompt, requests[r].max_new);
      const batch::StepPlan plan = s.step();
      if (plan.empty()) continue;
      const batch::BlockManager& bm = s.blocks();
      std::vector<int32_t> tok, pos, seq, out_rows;
      std::vector<uint64_t> seqs;
      std::vector<Item> items;
      for (const auto* list : {&plan.decode, &plan.prefill})
        for (const batch::Work& w : *list) {
          const std::vector<int32_t>& all = s.tokens(w.id);
          Item it{w.id, w.begin, w.samples,
                  std::vector<int32_t>(all.begin() + w.begin, all.begin() + w.end)};
          for (int p = w.begin; p < w.end; ++p) {
            tok.push_back(all[static_cast<size_t>(p)]);
            pos.push_back(p);
            seq.push_back(static_cast<int32_t>(seqs.size()));
          }
          seqs.push_back(w.id);
          if (w.samples) out_rows.push_back(static_cast<int32_t>(tok.size()) - 1);
          items.push_back(std::move(it));
        }
      if (out_rows.empty()) out_rows.push_back(static_cast<int32_t>(tok.size()) - 1);
      size_t stride = 1;
      for (uint64_t id : seqs)
        for (int g = 0; g < 2; ++g) stride = std::max(stride, bm.block_table(id, g).size());
      std::vector<int32_t> tables[2];
      for (int g = 0; g < 2; ++g) {
        tables[g].assign(seqs.size() * stride, 0);
        for (size_t k = 0; k < seqs.size(); ++k) {
          const auto& t = bm.block_table(seqs[k], g);
          for (size_t i = 0; i < t.size(); ++i) {
            tables[g][k * stride + i] = std::max(t[i], 0);
            if (g == 1 && t[i] >= 0) holders[t[i]].insert(seqs[k]);
          }
          if (g == 1)
            run.most_window_per_seq =
                std::max(run.most_window_per_seq,
                         static_cast<int>(
                             std::count_if(t.begin(), t.end(), [](int32_t b) { return b >= 0; })));
        }
      }
      run.most_window_used = std::max(run.most_window_used, bm.used_blocks(1));
      run.most_full_used = std::max(run.most_full_used, bm.used_blocks(0));
      std::vector<int32_t> next(out_rows.size());
      std::vector<float> logits(out_rows.size() * static_cast<size_t>(vocab));
      BatchForward b;
      b.T = static_cast<int>(tok.size());
      b.ids = tok.data();
      b.pos = pos.data();
      b.seq = seq.data();
      b.n_seqs = static_cast<int>(seqs.size());
      b.block_table = tables[0].data();
      b.window_table = tables[1].data();
      b.table_stride = static_cast<int>(stride);
      b.out_rows = out_rows.data();
      b.n_out = static_cast<int>(out_rows.size());
      b.next_tokens = next.data();
      b.logits = logits.data();
      ex.forward(b);
      size_t o = 0;
      for (const Item& it : items) {
        if (!it.samples) continue;
        run.out.push_back({step, static_cast<int>(it.id), next[o],
                           std::vector<float>(logits.begin() + static_cast<long>(o) * vocab,
                                              logits.begin() + static_cast<long>(o + 1) * vocab)});
        ++o;
        if (s.on_token(it.id, next_id(it.id, s.generated(it.id)), false)) {
          ++done;
          if (it.id == 1) first_done = step;
        }
      }
      run.steps.push_back(std::move(items));
    }
    for (const auto& [b, who] : holders) run.window_blocks_shared_over_time += who.size() > 1;
    run.prefix_hit_tokens = s.counters().prefix_hit_tokens;
    return run;
  }

  // The reference: each request's items of `batched` on a single-sequence executor of its own.
  std::vector<BatchOutput> run_single(const std::function<std::unique_ptr<Executor>()>& make,
                                      const Run& batched, int vocab) const {
    std::map<uint64_t, std::unique_ptr<Executor>> ex;
    std::map<uint64_t, int> at;  // the next position each executor computes
    std::vector<BatchOutput> out;
    for (size_t st = 0; st < batched.steps.size(); ++st)
      for (const Item& it : batched.steps[st]) {
        auto& e = ex[it.id];
        if (!e) e = make();
        std::vector<float> logits(static_cast<size_t>(vocab));
        if (at[it.id] < it.begin) {  // the prompt's prefix the batched run found cached
          const std::vector<int32_t>& p = requests[it.id - 1].prompt;
          e->forward(p.data() + at[it.id], it.begin - at[it.id], at[it.id], nullptr);
        }
        at[it.id] = it.begin + static_cast<int>(it.tokens.size());
        const int32_t t = e->forward(it.tokens.data(), static_cast<int>(it.tokens.size()), it.begin,
                                     logits.data());
        if (it.samples) out.push_back({0, static_cast<int>(it.id), t, logits});
      }
    for (size_t i = 0; i < out.size() && i < batched.out.size(); ++i)
      out[i].step = batched.out[i].step;
    return out;
  }
};

}  // namespace vkllm::testutil
