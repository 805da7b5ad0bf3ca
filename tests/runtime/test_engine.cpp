// The continuous-batching Engine (include/vkllm/vkllm.h) on the CPU backend, against the
// independent reference of each request generated alone by a Session (the single-sequence
// executor and generate loop): requests with different prompts, lengths and options, arriving
// while others run, sharing a prefix, cancelled, and preempted under a small KV pool, must give
// the tokens and the text each gives alone.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "export/exporter.h"
#include "testutil/files.h"
#include "testutil/tiny_checkpoint.h"
#include "vkllm/vkllm.h"

namespace vkllm {
namespace {

struct Reply {
  std::vector<int32_t> tokens;
  std::string text, finish;
};

// A prompt of n token ids in the tiny model's vocabulary, different for each seed.
std::vector<int32_t> prompt_of(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(3 + (seed * 131 + i * 37) % 250));
  return p;
}

Reply alone(const std::shared_ptr<Model>& m, const std::vector<int32_t>& prompt,
            const GenerationOptions& o) {
  Session s(m);
  Reply r;
  r.tokens = s.generate(prompt, o, [&](int32_t, const std::string& piece) {
    r.text += piece;
    return true;
  });
  const GenerationStats& st = s.stats();
  r.finish = st.stopped_by_eos || st.stopped_by_stop ? "stop" : "length";
  return r;
}

struct Job {
  int arrival = 0;  // the step before which it is added
  std::vector<int32_t> prompt;
  GenerationOptions opts;
};

// Runs the jobs through the engine (each added before its arrival step); the replies by job.
std::vector<Reply> run(Engine& e, const std::vector<Job>& jobs, int max_steps = 2000) {
  std::vector<Reply> out(jobs.size());
  std::map<uint64_t, size_t> which;
  size_t done = 0;
  for (int step = 0; done < jobs.size(); ++step) {
    if (step > max_steps) ADD_FAILURE() << "the engine did not finish in " << max_steps << " steps";
    if (step > max_steps) break;
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].arrival == step) which[e.add(jobs[j].prompt, jobs[j].opts)] = j;
    for (const EngineEvent& ev : e.step()) {
      Reply& r = out.at(which.at(ev.request));
      if (ev.token >= 0) r.tokens.push_back(ev.token);
      r.text += ev.text;
      EXPECT_EQ(ev.generated_tokens, static_cast<int>(r.tokens.size()));
      if (ev.finished) {
        r.finish = ev.finish_reason;
        ++done;
      }
    }
  }
  EXPECT_TRUE(e.idle());
  return out;
}

GenerationOptions greedy(int n) {
  GenerationOptions g;
  g.max_new_tokens = n;
  return g;
}

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testutil::temp_dir("engine");
    const std::string ckpt = testutil::write_tiny_checkpoint(dir + "/ckpt", Arch::Llama, true, 7);
    std::ofstream(ckpt + "/tokenizer.json") << testutil::tiny_tokenizer_json();
    ModelOptions mo;
    mo.backend = "cpu";
    mo.context_length = 96;
    models_ = new std::map<std::string, std::shared_ptr<Model>>;
    (*models_)["fp32"] = Model::open(ckpt, mo);
    RecipeOptions ro;
    ro.recipe = "quantized-8da4w";
    ro.group_size = 32;
    ro.max_context = 96;
    export_checkpoint(ckpt, dir + "/8da4w.vkllm", ro);
    (*models_)["8da4w"] = Model::open(dir + "/8da4w.vkllm", mo);
  }
  static void TearDownTestSuite() {
    delete models_;
    models_ = nullptr;
  }
  std::shared_ptr<Model> model() const { return models_->at(GetParam()); }
  void expect_alone(const std::vector<Job>& jobs, const std::vector<Reply>& got) const {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Reply want = alone(model(), jobs[j].prompt, jobs[j].opts);
      EXPECT_EQ(got[j].tokens, want.tokens) << "job " << j;
      EXPECT_EQ(got[j].text, want.text) << "job " << j;
      EXPECT_EQ(got[j].finish, want.finish) << "job " << j;
    }
  }
  static std::map<std::string, std::shared_ptr<Model>>* models_;
};
std::map<std::string, std::shared_ptr<Model>>* EngineTest::models_ = nullptr;

// Ragged prompts and lengths, chunked prefill (step budget 16), more requests than sequences,
// some arriving while others decode; eos may end some early.
TEST_P(EngineTest, GreedyRequestsMatchEachAlone) {
  EngineOptions eo;
  eo.max_sequences = 3;
  eo.step_tokens = 16;
  eo.block_tokens = 4;
  Engine e(model(), eo);
  std::vector<Job> jobs;
  const int lens[] = {5, 23, 1, 40, 9, 17, 3};
  const int news[] = {12, 7, 20, 5, 1, 30, 9};
  const int arrive[] = {0, 0, 0, 2, 3, 7, 12};
  for (int i = 0; i < 7; ++i) jobs.push_back({arrive[i], prompt_of(lens[i], i), greedy(news[i])});
  jobs[2].opts.stop_at_eos = false;
  const auto got = run(e, jobs);
  expect_alone(jobs, got);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.steps, 20u);
}

// Seeded sampling with penalties, top-k/top-p/min-p, stop strings and a constraint.
TEST_P(EngineTest, SampledRequestsMatchEachAlone) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.step_tokens = 32;
  Engine e(model(), eo);
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i) {
    GenerationOptions o = greedy(10 + 3 * i);
    o.temperature = 0.7f + 0.1f * static_cast<float>(i);
    o.seed = 1000 + static_cast<uint64_t>(i);
    o.top_k = i % 2 ? 40 : 0;
    o.top_p = i % 3 ? 0.9f : 1.0f;
    o.min_p = i == 4 ? 0.05f : 0.0f;
    o.repetition_penalty = i % 2 ? 1.3f : 1.0f;
    o.presence_penalty = i == 2 ? 0.5f : 0.0f;
    o.frequency_penalty = i == 3 ? 0.4f : 0.0f;
    jobs.push_back({i, prompt_of(4 + 5 * i, 20 + i), o});
  }
  jobs[1].opts.stop = {"e", "a"};
  jobs[3].opts.stop = {"zz", "o"};
  jobs[5].opts.constraint = json_object_constraint();
  jobs[5].opts.max_new_tokens = 24;
  jobs.push_back({1, prompt_of(8, 40), greedy(15)});  // greedy beside sampled rows
  jobs.back().opts.frequency_penalty = 0.3f;
  const auto got = run(e, jobs);
  expect_alone(jobs, got);
}

// A request sharing a long prefix with a finished one finds its KV blocks in the prefix cache.
TEST_P(EngineTest, SharedPrefixIsReused) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.block_tokens = 8;
  Engine e(model(), eo);
  std::vector<int32_t> system = prompt_of(40, 99);
  std::vector<Job> jobs;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = system;
    const auto tail = prompt_of(3 + i, 50 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    jobs.push_back({i == 0 ? 0 : 3 + i, p, greedy(6)});
  }
  uint64_t cached = 0;
  std::map<uint64_t, size_t> which;
  std::vector<Reply> got(jobs.size());
  size_t done = 0;
  for (int step = 0; done < jobs.size() && step < 500; ++step) {
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].arrival == step) which[e.add(jobs[j].prompt, jobs[j].opts)] = j;
    for (const EngineEvent& ev : e.step()) {
      Reply& r = got[which.at(ev.request)];
      if (ev.token >= 0) r.tokens.push_back(ev.token);
      r.text += ev.text;
      if (ev.finished) {
        r.finish = ev.finish_reason;
        ++done;
        if (which.at(ev.request) > 0) cached += static_cast<uint64_t>(ev.cached_tokens);
      }
    }
  }
  expect_alone(jobs, got);
  EXPECT_EQ(cached, 2u * 40);  // the 5 full blocks of the shared 40 tokens, twice
  EXPECT_EQ(e.stats().prefix_hit_tokens, 2u * 40);
}

// A model without sliding-window layers keeps one pool, sized as it always was: every cache's
// bytes per token (the session's KV bytes over its context) times block_tokens a block,
// max_sequences full contexts plus one spare block by default, budget / block bytes with a budget;
// no window pool in the stats.
TEST_P(EngineTest, OnePoolWithoutSlidingLayers) {
  const ModelInfo& info = model()->info();
  const uint64_t block = info.kv_cache_bytes / static_cast<uint64_t>(info.context_length) * 4;
  EngineOptions eo;
  eo.max_sequences = 3;
  eo.block_tokens = 4;
  EngineStats st = Engine(model(), eo).stats();
  EXPECT_EQ(st.kv_block_bytes, block);
  EXPECT_EQ(st.kv_blocks_total, 3 * ((info.context_length + 3) / 4) + 1);
  EXPECT_EQ(st.kv_window, 0);
  EXPECT_EQ(st.kv_window_blocks_total, 0);
  EXPECT_EQ(st.kv_window_block_bytes, 0u);
  eo.kv_budget_bytes = 10 * block + block / 2;
  st = Engine(model(), eo).stats();
  EXPECT_EQ(st.kv_blocks_total, 10);
  EXPECT_EQ(st.kv_window_blocks_total, 0);
}

// A cancelled request ends with a "cancelled" event and frees its blocks; the others go on.
TEST_P(EngineTest, CancelFreesBlocks) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.block_tokens = 4;
  Engine e(model(), eo);
  const auto pa = prompt_of(30, 1), pb = prompt_of(10, 2);
  GenerationOptions o = greedy(40);
  o.stop_at_eos = false;
  const uint64_t a = e.add(pa, o);
  const uint64_t b = e.add(pb, o);
  std::vector<int32_t> tb;
  for (int i = 0; i < 5; ++i)
    for (const EngineEvent& ev : e.step())
      if (ev.request == b && ev.token >= 0) tb.push_back(ev.token);
  const int used = e.stats().kv_blocks_used;
  EXPECT_GE(used, 8 + 3);  // a: 30 + tokens in 4-token blocks; b: 10 +
  e.cancel(a);
  e.cancel(12345);  // unknown: ignored
  bool saw_cancel = false;
  for (const EngineEvent& ev : e.step()) {
    if (ev.request == a) {
      EXPECT_TRUE(ev.finished);
      EXPECT_EQ(ev.finish_reason, "cancelled");
      saw_cancel = true;
    } else if (ev.token >= 0) {
      tb.push_back(ev.token);
    }
  }
  EXPECT_TRUE(saw_cancel);
  EXPECT_LE(e.stats().kv_blocks_used, 5);  // b's blocks alone
  EXPECT_EQ(e.stats().active, 1);
  while (!e.idle())
    for (const EngineEvent& ev : e.step())
      if (ev.token >= 0) tb.push_back(ev.token);
  EXPECT_EQ(tb, alone(model(), pb, o).tokens);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// A pool too small for every running request: the newest is preempted and recomputed later,
// and every reply is still the one it gives alone.
TEST_P(EngineTest, PreemptionUnderATinyPool) {
  EngineOptions eo;
  eo.max_sequences = 4;
  eo.block_tokens = 4;
  Engine probe(model(), eo);
  eo.kv_budget_bytes = probe.stats().kv_block_bytes * 14;
  Engine e(model(), eo);
  EXPECT_EQ(e.stats().kv_blocks_total, 14);
  std::vector<Job> jobs;
  for (int i = 0; i < 4; ++i) {
    GenerationOptions o = greedy(24);
    o.stop_at_eos = false;
    if (i == 1) o.temperature = 0.9f, o.seed = 5;
    jobs.push_back({0, prompt_of(6 + i, 70 + i), o});
  }
  const auto got = run(e, jobs);
  expect_alone(jobs, got);
  EXPECT_GT(e.stats().preemptions, 0u);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

// Requests added from other threads while one thread steps.
TEST_P(EngineTest, AddsFromThreads) {
  EngineOptions eo;
  eo.max_sequences = 8;
  Engine e(model(), eo);
  std::vector<uint64_t> ids(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back(
        [&, i] { ids[static_cast<size_t>(i)] = e.add(prompt_of(5 + i, i), greedy(8)); });
  std::map<uint64_t, std::vector<int32_t>> got;
  size_t finished = 0;
  for (int guard = 0; finished < 4 && guard < 10000; ++guard) {
    for (const EngineEvent& ev : e.step()) {
      if (ev.token >= 0) got[ev.request].push_back(ev.token);
      finished += ev.finished;
    }
    if (guard == 0)
      for (auto& t : th) t.join();
  }
  EXPECT_EQ(finished, 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got[ids[static_cast<size_t>(i)]],
              alone(model(), prompt_of(5 + i, i), greedy(8)).tokens);
}

TEST_P(EngineTest, BadRequestsAreErrors) {
  Engine e(model(), {});
  EXPECT_THROW(e.add({}, greedy(4)), Error);
  EXPECT_THROW(e.add({1, 300}, greedy(4)), Error);  // outside the vocabulary of 300
  EXPECT_THROW(e.add({1, -1}, greedy(4)), Error);
  EXPECT_THROW(e.add(prompt_of(96, 1), greedy(4)), Error);  // fills the context
  GenerationOptions bad = greedy(4);
  bad.top_p = 2;
  EXPECT_THROW(e.add({1, 2}, bad), Error);
  bad = greedy(4);
  bad.stop = {""};
  EXPECT_THROW(e.add({1, 2}, bad), Error);
  EngineOptions small;
  small.block_tokens = 4;
  Engine probe(model(), small);
  small.kv_budget_bytes = probe.stats().kv_block_bytes * 3;
  Engine tiny(model(), small);
  EXPECT_THROW(tiny.add(prompt_of(20, 1), greedy(4)), Error);  // needs more than 3 blocks
  EngineOptions zero;
  zero.max_sequences = 0;
  EXPECT_THROW(Engine(model(), zero), Error);
  // max_new_tokens 0 ends at the next step, with no token.
  const uint64_t id = e.add({5, 6}, greedy(0));
  const auto ev = e.step();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].request, id);
  EXPECT_TRUE(ev[0].finished);
  EXPECT_EQ(ev[0].finish_reason, "length");
  EXPECT_TRUE(e.idle());
}

INSTANTIATE_TEST_SUITE_P(Recipes, EngineTest, ::testing::Values("fp32", "8da4w"));

}  // namespace
}  // namespace vkllm
