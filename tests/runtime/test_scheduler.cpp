// The continuous-batching scheduler (src/runtime/scheduler.h), driven by a simulated device: a
// shadow KV memory indexed by (physical block, row) that each plan's work writes, and an
// "attention" check at every sampled position that reads the sequence's whole context back
// through its block table. The test keeps its own record of every request's tokens and of the
// next position each one must compute, so coverage, order and sharing are checked independently
// of the scheduler's bookkeeping.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "runtime/scheduler.h"

using namespace vkllm;
using namespace vkllm::batch;

namespace {

struct Req {
  std::vector<int32_t> tokens;  // prompt then generated, as the test saw them
  int prompt = 0;
  int max_new = 0;
  int next = -1;  // the next position to compute; -1: not admitted
  bool finished = false;
  bool eos = false;
};

// Deterministic tokens: the sampler of request id at its k-th generated token.
int32_t sample(SeqId id, int k) {
  return static_cast<int32_t>((id * 2654435761u + k * 40503u) % 997);
}
bool sample_eos(SeqId id, int k) {
  return ((id * 7919u + k * 104729u) % 61) == 0;
}

class Sim {
 public:
  explicit Sim(const SchedulerConfig& c) : cfg(c), s(c) {}

  void add(SeqId id, std::vector<int32_t> prompt, int max_new) {
    s.add(id, prompt, max_new);
    Req r;
    r.prompt = static_cast<int>(prompt.size());
    r.tokens = std::move(prompt);
    r.max_new = max_new;
    reqs[id] = std::move(r);
    arrival.push_back(id);
  }

  // One step: plan, check it, execute it on the shadow KV, report the sampled tokens.
  StepPlan run_step() {
    std::set<SeqId> decoding_before;
    for (auto& [id, r] : reqs)
      if (!r.finished && r.next >= 0 && r.next == static_cast<int>(r.tokens.size()) - 1 &&
          prefilled.count(id))
        decoding_before.insert(id);
    StepPlan plan = s.step();
    const auto c = s.counters();
    EXPECT_LE(c.running, cfg.max_running);
    EXPECT_LE(plan.tokens, cfg.step_tokens);
    int sum = 0;
    for (const Work& w : plan.decode) sum += w.end - w.begin;
    for (const Work& w : plan.prefill) sum += w.end - w.begin;
    EXPECT_EQ(sum, plan.tokens);
    max_running_seen = std::max(max_running_seen, c.running);
    if (!plan.preempted.empty()) {
      EXPECT_TRUE(plan.admitted.empty()) << "admitted while preempting";
    }

    for (SeqId id : plan.preempted) {
      reqs.at(id).next = -1;
      prefilled.erase(id);
      decoding_before.erase(id);
      ++preemptions;
    }
    for (const Admission& a : plan.admitted) {
      Req& r = reqs.at(a.id);
      EXPECT_EQ(r.next, -1) << "admitted twice " << a.id;
      EXPECT_EQ(a.cached_tokens % cfg.block_tokens, 0);
      EXPECT_LT(a.cached_tokens, static_cast<int>(r.tokens.size()));
      // The cached prefix must already hold this request's tokens.
      const auto& table = s.blocks().block_table(a.id);
      for (int p = 0; p < a.cached_tokens; ++p)
        EXPECT_EQ(row(table, p), r.tokens[p]) << "request " << a.id << " position " << p;
      r.next = a.cached_tokens;
      hit_tokens += a.cached_tokens;
      if (!first_admitted.count(a.id)) {
        first_admitted.insert(a.id);
        admission_order.push_back(a.id);
      }
    }
    // Every stream that was decoding keeps decoding, one token a step.
    std::set<SeqId> decoded;
    for (const Work& w : plan.decode) decoded.insert(w.id);
    for (SeqId id : decoding_before)
      EXPECT_TRUE(decoded.count(id)) << "stream " << id << " stalled";

    std::vector<std::pair<SeqId, int>> due;  // (id, sampled position)
    auto execute = [&](const Work& w, bool is_decode) {
      Req& r = reqs.at(w.id);
      const int n = static_cast<int>(r.tokens.size());
      ASSERT_EQ(w.begin, r.next) << "request " << w.id << " out of order";
      ASSERT_GT(w.end, w.begin);
      ASSERT_LE(w.end, n);
      ASSERT_EQ(w.samples, w.end == n);
      if (is_decode) {
        ASSERT_TRUE(prefilled.count(w.id));
        ASSERT_EQ(w.end - w.begin, 1);
      } else {
        ASSERT_FALSE(prefilled.count(w.id));
      }
      const auto& table = s.blocks().block_table(w.id);
      for (int p = w.begin; p < w.end; ++p) {
        const BlockId b = table[p / cfg.block_tokens];
        ASSERT_EQ(holders(b), 1) << "request " << w.id << " writes shared block " << b;
        kv[{b, p % cfg.block_tokens}] = r.tokens[p];
        ++computed_per_request[w.id];
      }
      r.next = w.end;
      if (w.samples) {
        prefilled.insert(w.id);
        due.push_back({w.id, w.end - 1});
      }
    };
    for (const Work& w : plan.decode) execute(w, true);
    for (const Work& w : plan.prefill) execute(w, false);
    for (auto [id, pos] : due) {
      Req& r = reqs.at(id);
      // Attention: the whole context, read back through the block table.
      const auto& table = s.blocks().block_table(id);
      for (int p = 0; p <= pos; ++p) EXPECT_EQ(row(table, p), r.tokens[p]) << id << " at " << p;
      const int k = static_cast<int>(r.tokens.size()) - r.prompt;
      const int32_t t = sample(id, k);
      const bool eos = use_eos && sample_eos(id, k);
      r.tokens.push_back(t);
      const bool done = s.on_token(id, t, eos);
      EXPECT_EQ(done, eos || k + 1 == r.max_new);
      if (done) {
        r.finished = true;
        r.eos = eos;
        prefilled.erase(id);
      }
    }
    return plan;
  }

  int32_t row(const std::vector<BlockId>& table, int p) {
    auto it = kv.find({table[p / cfg.block_tokens], p % cfg.block_tokens});
    return it == kv.end() ? -1 : it->second;
  }
  int holders(BlockId b) {
    int n = 0;
    for (auto& [id, r] : reqs)
      if (!r.finished && r.next >= 0)
        for (BlockId x : s.blocks().block_table(id)) n += x == b;
    return n;
  }

  SchedulerConfig cfg;
  Scheduler s;
  bool use_eos = false;
  std::map<SeqId, Req> reqs;
  std::set<SeqId> prefilled;
  std::map<std::pair<BlockId, int>, int32_t> kv;
  std::map<SeqId, int> computed_per_request;
  std::vector<SeqId> arrival, admission_order;
  std::set<SeqId> first_admitted;
  int max_running_seen = 0, preemptions = 0;
  uint64_t hit_tokens = 0;
};

std::vector<int32_t> iota_tokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

void expect_done(Sim& sim) {
  EXPECT_TRUE(sim.s.idle());
  for (auto& [id, r] : sim.reqs) {
    EXPECT_TRUE(r.finished) << id;
    const int gen = static_cast<int>(r.tokens.size()) - r.prompt;
    if (r.eos) {
      EXPECT_LE(gen, r.max_new) << id;
    } else {
      EXPECT_EQ(gen, r.max_new) << id;
    }
  }
  const auto c = sim.s.counters();
  EXPECT_EQ(c.blocks_used, 0);
  EXPECT_EQ(c.blocks_free + c.blocks_cached, sim.cfg.num_blocks);
  EXPECT_EQ(c.running, 0);
  EXPECT_EQ(c.waiting, 0);
  EXPECT_EQ(c.prefix_hit_tokens, sim.hit_tokens);
  EXPECT_NO_THROW(sim.s.blocks().check_invariants());
  // First-come first-served: first admissions follow arrival order.
  std::vector<SeqId> arrived_admitted;
  for (SeqId id : sim.arrival)
    if (sim.first_admitted.count(id)) arrived_admitted.push_back(id);
  EXPECT_EQ(sim.admission_order, arrived_admitted);
}

TEST(Scheduler, RandomArrivalsRunToCompletion) {
  for (uint32_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    SchedulerConfig cfg;
    cfg.block_tokens = 16;
    cfg.num_blocks = 48;
    cfg.max_running = 8;
    cfg.step_tokens = 96;
    Sim sim(cfg);
    sim.use_eos = true;
    std::vector<std::vector<int32_t>> systems = {iota_tokens(40, 5000), iota_tokens(70, 6000)};
    SeqId next = 1;
    const SeqId total = 200;
    int steps = 0;
    while (next <= total || !sim.s.idle()) {
      for (int k = static_cast<int>(rng() % 4); k > 0 && next <= total; --k) {
        std::vector<int32_t> p;
        if (rng() % 2) p = systems[rng() % 2];
        for (int i = 1 + static_cast<int>(rng() % 90); i > 0; --i)
          p.push_back(static_cast<int32_t>(rng() % 997));
        sim.add(next++, p, 1 + static_cast<int>(rng() % 60));
      }
      sim.run_step();
      if (testing::Test::HasFatalFailure() || ++steps > 20000) break;
      ASSERT_NO_THROW(sim.s.blocks().check_invariants());
    }
    EXPECT_LT(steps, 20000);
    expect_done(sim);
    EXPECT_EQ(sim.max_running_seen, cfg.max_running);
    EXPECT_GT(sim.preemptions, 0);  // the pool is small enough to force some
    EXPECT_GT(sim.hit_tokens, 0u);
  }
}

TEST(Scheduler, ALongPromptDoesNotStallDecodingStreams) {
  SchedulerConfig cfg;
  cfg.num_blocks = 256;
  cfg.max_running = 8;
  cfg.step_tokens = 64;
  Sim sim(cfg);
  for (SeqId id = 1; id <= 4; ++id) sim.add(id, iota_tokens(8, 100 * int(id)), 60);
  sim.run_step();  // all four prefill in one step
  sim.add(9, iota_tokens(1000, 20000), 5);
  int prefill_steps = 0;
  while (!sim.prefilled.count(9)) {
    StepPlan p = sim.run_step();
    ASSERT_EQ(p.decode.size(), 4u);  // every stream gets its token
    ASSERT_EQ(p.prefill.size(), 1u);
    ++prefill_steps;
    if (!p.prefill[0].samples) {
      EXPECT_EQ(p.prefill[0].end - p.prefill[0].begin, 60);
    }
    ASSERT_LT(prefill_steps, 100);
  }
  EXPECT_EQ(prefill_steps, (1000 + 59) / 60);
  EXPECT_EQ(sim.computed_per_request[9], 1000);
  while (!sim.s.idle()) sim.run_step();
  expect_done(sim);
}

TEST(Scheduler, ASmallPoolPreemptsTheNewestAndRecomputesIt) {
  SchedulerConfig cfg;
  cfg.block_tokens = 4;
  cfg.num_blocks = 8;
  cfg.max_running = 4;
  cfg.step_tokens = 32;
  Sim sim(cfg);
  // Each needs up to ceil((8 + 16 - 1) / 4) = 6 blocks; together 12 > 8.
  sim.add(1, iota_tokens(8, 10), 16);
  sim.add(2, iota_tokens(8, 50), 16);
  StepPlan first = sim.run_step();
  ASSERT_EQ(first.admitted.size(), 2u);
  int steps = 0;
  SeqId victim = 0;
  int generated_at_preemption = 0;
  while (!sim.s.idle() && steps++ < 200) {
    StepPlan p = sim.run_step();
    if (!p.preempted.empty() && !victim) {
      victim = p.preempted[0];
      generated_at_preemption =
          static_cast<int>(sim.reqs[victim].tokens.size()) - sim.reqs[victim].prompt;
      EXPECT_TRUE(p.admitted.empty());
      EXPECT_EQ(p.decode.size(), 1u);  // the older one goes on
      EXPECT_EQ(sim.s.counters().waiting, 1);
    }
    for (const Admission& a : p.admitted) {
      if (a.id != victim) continue;
      // Readmitted: its prefill recomputes prompt and generated tokens after the cached part.
      ASSERT_EQ(p.prefill.size(), 1u);
      EXPECT_EQ(p.prefill[0].begin, a.cached_tokens);
      EXPECT_EQ(p.prefill[0].end, 8 + generated_at_preemption);
      EXPECT_TRUE(p.prefill[0].samples);
    }
  }
  EXPECT_EQ(victim, 2u);  // the most recently admitted
  EXPECT_GT(generated_at_preemption, 0);
  EXPECT_GE(sim.s.counters().preemptions, 1u);
  // The victim computed more rows than its final context minus one: it recomputed.
  EXPECT_GT(sim.computed_per_request[2], 8 + 16 - 1);
  EXPECT_EQ(sim.computed_per_request[1], 8 + 16 - 1);
  expect_done(sim);
}

TEST(Scheduler, ASharedSystemPromptCountsAsPrefixHits) {
  SchedulerConfig cfg;
  cfg.num_blocks = 64;
  cfg.max_running = 4;
  cfg.step_tokens = 512;
  Sim sim(cfg);
  const auto system = iota_tokens(64, 3000);  // 4 blocks of 16
  for (SeqId id = 1; id <= 3; ++id) {
    auto p = system;
    for (int i = 0; i < 10; ++i) p.push_back(static_cast<int32_t>(100 * id + i));
    sim.add(id, p, 4);
    StepPlan plan = sim.run_step();
    ASSERT_EQ(plan.admitted.size(), 1u);
    EXPECT_EQ(plan.admitted[0].cached_tokens, id == 1 ? 0 : 64);
    ASSERT_EQ(plan.prefill.size(), 1u);
    EXPECT_EQ(plan.prefill[0].begin, id == 1 ? 0 : 64);
  }
  EXPECT_EQ(sim.s.counters().prefix_hit_tokens, 128u);
  const auto& t1 = sim.s.blocks().block_table(1);
  const auto& t3 = sim.s.blocks().block_table(3);
  for (int b = 0; b < 4; ++b) EXPECT_EQ(t1[b], t3[b]);
  EXPECT_NE(t1[4], t3[4]);
  // Computed rows: 74 for the first, 10 for each sharer (plus their decodes later).
  EXPECT_EQ(sim.computed_per_request[3], 10);
  while (!sim.s.idle()) sim.run_step();
  expect_done(sim);
  // Everything left is the cache: the system prompt's blocks and the sequences' own.
  EXPECT_GE(sim.s.counters().blocks_cached, 4);
}

TEST(Scheduler, TheRunningCapAndFcfsHeadOfLineWait) {
  SchedulerConfig cfg;
  cfg.num_blocks = 64;
  cfg.max_running = 2;
  cfg.step_tokens = 64;
  Sim sim(cfg);
  for (SeqId id = 1; id <= 5; ++id) sim.add(id, iota_tokens(5, 0), 3);
  StepPlan p = sim.run_step();
  EXPECT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(sim.s.counters().waiting, 3);
  while (!sim.s.idle()) sim.run_step();
  expect_done(sim);
  EXPECT_EQ(sim.max_running_seen, 2);
}

TEST(Scheduler, CancelFreesAtOnce) {
  SchedulerConfig cfg;
  cfg.num_blocks = 16;
  Sim sim(cfg);
  sim.add(1, iota_tokens(40, 0), 10);
  sim.add(2, iota_tokens(40, 100), 10);
  sim.run_step();
  EXPECT_EQ(sim.s.counters().blocks_used, 6);
  sim.s.cancel(1);
  sim.reqs[1].finished = true;
  sim.reqs[1].max_new = static_cast<int>(sim.reqs[1].tokens.size()) - sim.reqs[1].prompt;
  EXPECT_EQ(sim.s.counters().blocks_used, 3);
  EXPECT_EQ(sim.s.counters().running, 1);
  while (!sim.s.idle()) sim.run_step();
  expect_done(sim);
}

template <typename F>
std::string sched_error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Scheduler, MisuseIsAnErrorOfOneLine) {
  auto cfg_with = [](int blocks, int running, int budget) {
    SchedulerConfig c;
    c.num_blocks = blocks;
    c.max_running = running;
    c.step_tokens = budget;
    return c;
  };
  EXPECT_NE(sched_error_of([&] { Scheduler s(cfg_with(0, 4, 512)); }).find("at least one block"),
            std::string::npos);
  EXPECT_NE(sched_error_of([&] { Scheduler s(cfg_with(8, 0, 512)); }).find("max_running"),
            std::string::npos);
  EXPECT_NE(sched_error_of([&] { Scheduler s(cfg_with(8, 16, 8)); }).find("decodes would not fit"),
            std::string::npos);
  SchedulerConfig c = cfg_with(4, 2, 64);
  c.max_seq_tokens = 100;
  Scheduler s(c);
  const auto p = iota_tokens(10, 0);
  s.add(1, p, 5);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"request 1 already exists", [&] { s.add(1, p, 5); }},
      {"empty prompt", [&] { s.add(2, {}, 5); }},
      {"asks for 0 new tokens", [&] { s.add(2, p, 0); }},
      {"the limit is 100", [&] { s.add(2, p, 91); }},
      {"needs 5 blocks of 16 tokens, the pool has 4", [&] { s.add(2, iota_tokens(60, 0), 1); }},
      {"cancel of unknown request 9", [&] { s.cancel(9); }},
      {"on_token of unknown request 9", [&] { s.on_token(9, 0, false); }},
      {"request 1 has no token due", [&] { s.on_token(1, 0, false); }},
  };
  for (const auto& [want, f] : cases) {
    std::string e = sched_error_of(f);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  s.step();
  EXPECT_NE(sched_error_of([&] { s.step(); }).find("request 1 has not reported the token"),
            std::string::npos);
  s.on_token(1, 7, false);
  EXPECT_NE(sched_error_of([&] { s.on_token(1, 7, false); }).find("no token due"),
            std::string::npos);
  s.step();
  EXPECT_TRUE(s.on_token(1, 7, true));  // eos
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.counters().blocks_used, 0);
}

}  // namespace
