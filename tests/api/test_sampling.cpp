// Generation controls of the public API (top-k, min-p, top-p, penalties, stop strings, seeds,
// prefix reuse) on the tiny Qwen3 twin's fp32 artifact, CPU backend. References: the fp32
// reference engine (its real logits, with the penalties recomputed here from their formulas), the
// tokenizer's own decoding of the generated ids, a fresh session fed the same tokens in one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "../cli/cli_fixture.h"
#include "hf/checkpoint.h"
#include "runtime/generate.h"
#include "runtime/reference.h"
#include "vkllm/vkllm.h"

namespace vkllm {
namespace {

using test::shared_twin;

const std::string kQuestion = "What is the capital of France?";

std::shared_ptr<Model> cpu_model() {
  static std::shared_ptr<Model> m = [] {
    ModelOptions o;
    o.backend = "cpu";
    return Model::open(shared_twin().artifact, o);
  }();
  return m;
}

const ReferenceModel& reference() {
  static const HfCheckpoint ckpt(shared_twin().dir);
  static const std::unique_ptr<ReferenceModel> r = load_reference_model(ckpt, 64);
  return *r;
}

GenerationOptions greedy(int n) {
  GenerationOptions g;
  g.max_new_tokens = n;
  g.stop_at_eos = false;
  return g;
}

// The reference engine's logits after `ids` (one forward from position 0).
std::vector<float> logits_after(const std::vector<int32_t>& ids) {
  const auto& prog = reference().lowered.program;
  std::vector<float> l(static_cast<size_t>(prog.tensors[prog.logits].shape.back()));
  reference().make_executor()->forward(ids.data(), static_cast<int>(ids.size()), 0, l.data());
  return l;
}

// Token ids sorted by logit, most likely first.
std::vector<int32_t> ranked(const std::vector<float>& l) {
  std::vector<int32_t> r(l.size());
  std::iota(r.begin(), r.end(), 0);
  std::stable_sort(r.begin(), r.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return r;
}

std::vector<int32_t> prompt_ids() {
  return cpu_model()->encode(cpu_model()->chat_prompt(kQuestion));
}

TEST(Sampling, SeededSamplingIsReproducibleAndSeedDependent) {
  GenerationOptions o = greedy(12);
  o.temperature = 1.5f;
  o.seed = 1234;
  Session a(cpu_model()), b(cpu_model());
  const auto x = a.generate(kQuestion, o);
  const auto y = b.generate(kQuestion, o);
  EXPECT_EQ(x, y);
  o.seed = 1235;
  a.reset();
  EXPECT_NE(a.generate(kQuestion, o), x);
  // top_k 1 and min_p 1 keep only the most likely token: the greedy reply at any temperature.
  a.reset();
  const auto g = a.generate(kQuestion, greedy(12));
  GenerationOptions k1 = greedy(12), p1 = greedy(12);
  k1.temperature = p1.temperature = 50.0f;
  k1.seed = p1.seed = 9;
  k1.top_k = 1;
  p1.min_p = 1.0f;
  a.reset();
  EXPECT_EQ(a.generate(kQuestion, k1), g) << "top_k 1";
  a.reset();
  EXPECT_EQ(a.generate(kQuestion, p1), g) << "min_p 1";
}

// On the real logits after the chat prompt, many seeded draws stay inside the set each filter
// allows (computed here from its definition) and reach more than one token of it.
TEST(Sampling, TopKTopPMinPDrawOnlyFromTheirSets) {
  const std::vector<float> l = logits_after(prompt_ids());
  const auto order = ranked(l);
  const float temp = 3.0f;
  std::vector<double> p(l.size());
  const double mx = l[order[0]];
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp((l[i] - mx) / temp);
  for (double& v : p) v /= z;
  struct Case {
    const char* name;
    SamplingParams sp;
    std::set<int32_t> allowed;
  };
  std::vector<Case> cases;
  SamplingParams k;
  k.temperature = temp;
  k.top_k = 5;
  cases.push_back({"top_k 5", k, {order.begin(), order.begin() + 5}});
  SamplingParams mp;
  mp.temperature = temp;
  mp.min_p = 0.5f;
  std::set<int32_t> mset;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] >= 0.5 * p[order[0]]) mset.insert(static_cast<int32_t>(i));
  cases.push_back({"min_p 0.5", mp, mset});
  SamplingParams tp;
  tp.temperature = temp;
  tp.top_p = 0.3f;
  std::set<int32_t> pset;
  double acc = 0;
  for (int32_t id : order) {
    pset.insert(id);
    if ((acc += p[id]) >= 0.3) break;
  }
  cases.push_back({"top_p 0.3", tp, pset});
  for (const Case& c : cases) {
    ASSERT_GE(c.allowed.size(), 2u) << c.name << ": the twin's logits are too peaked for the test";
    std::set<int32_t> seen;
    for (uint64_t seed = 0; seed < 120; ++seed) {
      SamplingParams sp = c.sp;
      sp.seed = seed;
      Sampler s(sp);
      std::vector<float> copy = l;
      const int32_t id = s.pick(order[0], copy.data(), static_cast<int64_t>(copy.size()));
      EXPECT_TRUE(c.allowed.count(id)) << c.name << " drew " << id;
      seen.insert(id);
    }
    EXPECT_GE(seen.size(), 2u) << c.name;
  }
}

// Greedy with all three penalties equals a step-by-step argmax over the reference engine's
// logits with the penalties applied here from their formulas (repetition over prompt and reply,
// presence and frequency over the reply), and differs from plain greedy.
TEST(Sampling, PenaltiesMatchAHandComputedReferenceOnRealLogits) {
  const auto prompt = prompt_ids();
  const int n = 16;
  GenerationOptions o = greedy(n);
  o.repetition_penalty = 1.8f;
  o.presence_penalty = 0.4f;
  o.frequency_penalty = 0.7f;
  Session s(cpu_model());
  const auto got = s.generate(prompt, o);
  Session plain(cpu_model());
  EXPECT_NE(got, plain.generate(prompt, greedy(n))) << "the penalties changed nothing";
  std::vector<int32_t> ctx = prompt, want;
  std::map<int32_t, int> count;
  for (int step = 0; step < n; ++step) {
    std::vector<float> l = logits_after(ctx);
    std::set<int32_t> seen(ctx.begin(), ctx.end());
    for (int32_t id : seen) l[id] = l[id] > 0 ? l[id] / 1.8f : l[id] * 1.8f;
    for (const auto& [id, c] : count) l[id] -= 0.4f + 0.7f * static_cast<float>(c);
    const auto id = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    want.push_back(id);
    ++count[id];
    ctx.push_back(id);
  }
  EXPECT_EQ(got, want);
}

std::string text_of(const std::vector<int32_t>& ids) {
  return cpu_model()->decode(ids);
}

// A stop string made of the text of two consecutive generated tokens: the streamed text is the
// tokenizer's decoding cut right before its first occurrence, generation ends at the token that
// completed it, and a string that only starts like the text is held back then printed in full.
TEST(Sampling, StopStringsSpanTokensAndAreNeverPrinted) {
  const auto prompt = prompt_ids();
  Session s(cpu_model());
  const auto g = s.generate(prompt, greedy(20));
  const std::string full = text_of(g);
  size_t i = 2;
  while (i + 1 < g.size() && (text_of({g[i]}).empty() || text_of({g[i + 1]}).empty() ||
                              text_of({g[i], g[i + 1]}).find("\xEF\xBF\xBD") != std::string::npos))
    ++i;
  ASSERT_LT(i + 1, g.size()) << "no two printable consecutive tokens";
  const std::string stop = text_of({g[i], g[i + 1]});
  const size_t at = full.find(stop);
  ASSERT_NE(at, std::string::npos);
  size_t k = 0;  // the first token whose text completes the stop string
  while (
      text_of(std::vector<int32_t>(g.begin(), g.begin() + static_cast<long>(k) + 1)).find(stop) ==
      std::string::npos)
    ++k;
  for (const std::vector<std::string>& stops :
       {std::vector<std::string>{stop}, std::vector<std::string>{"\x01never", stop}}) {
    GenerationOptions o = greedy(20);
    o.stop = stops;
    std::string streamed;
    s.reset();
    const auto out = s.generate(prompt, o, [&](int32_t, const std::string& piece) {
      streamed += piece;
      return true;
    });
    EXPECT_EQ(streamed, full.substr(0, at));
    EXPECT_EQ(out, std::vector<int32_t>(g.begin(), g.begin() + static_cast<long>(k) + 1));
    EXPECT_TRUE(s.stats().stopped_by_stop);
    EXPECT_FALSE(s.stats().stopped_by_callback);
  }
  // The start of the stop string followed by a byte the reply never has: held back, then printed.
  GenerationOptions o = greedy(20);
  o.stop = {text_of({g[i]}) + "\x01"};
  std::string streamed;
  s.reset();
  s.generate(prompt, o, [&](int32_t, const std::string& piece) {
    streamed += piece;
    return true;
  });
  EXPECT_EQ(streamed, full);
  EXPECT_FALSE(s.stats().stopped_by_stop);
  o.stop = {""};
  EXPECT_THROW(s.generate(prompt, o), Error);
}

TEST(Sampling, StopMatcherHoldsBackOnlyWhatMayStartAStopString) {
  StopMatcher m({"lo Wo", "xyz"});
  EXPECT_EQ(m.push("Hel"), "He");  // "l" may begin "lo Wo"
  EXPECT_EQ(m.push("lo W"), "l");  // so may "lo W"
  EXPECT_EQ(m.push("x"), "lo W");  // "lo Wx" cannot; "x" may begin "xyz"
  EXPECT_EQ(m.push("yq lo Wo!"), "xyq ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
  StopMatcher n({"ab"});
  EXPECT_EQ(n.push("a"), "");
  EXPECT_EQ(n.flush(), "a");
}

// A conversation continued with generate_reusing: the second turn prefills only its new tokens,
// keeps the first reply's tokens as generated, and gives what one fresh call on the same tokens
// gives; a different conversation reuses only the shared prefix of its encoding.
TEST(Sampling, PrefixReuseFeedsOnlyTheNewTurn) {
  auto m = cpu_model();
  Session s(m);
  std::vector<ChatTurn> conv{{"user", kQuestion}};
  std::string reply;
  GenerationOptions o = greedy(6);
  o.stop_at_eos = true;
  s.generate_reusing(m->chat_prompt(conv), o, [&](int32_t, const std::string& piece) {
    reply += piece;
    return true;
  });
  EXPECT_EQ(s.stats().reused_tokens, 0);
  const auto ctx1 = s.context();
  // In the KV cache: all of it but a last generated token (fed first by the next call).
  const int kv1 = static_cast<int>(ctx1.size()) - (s.stats().stopped_by_eos ? 0 : 1);
  conv.push_back({"assistant", reply});
  conv.push_back({"user", "And of Spain?"});
  EXPECT_EQ(s.reusable_tokens(m->chat_prompt(conv)), kv1);  // what the call below keeps
  const auto out2 = s.generate_reusing(m->chat_prompt(conv), o);
  EXPECT_EQ(s.stats().reused_tokens, kv1);
  const auto ctx2 = s.context();
  ASSERT_GT(ctx2.size(), ctx1.size());
  EXPECT_TRUE(std::equal(ctx1.begin(), ctx1.end(), ctx2.begin()));
  EXPECT_EQ(s.stats().prompt_tokens, static_cast<int>(ctx2.size() - out2.size()) - kv1);
  Session fresh(m);
  const std::vector<int32_t> fed(ctx2.begin(), ctx2.end() - static_cast<long>(out2.size()));
  EXPECT_EQ(fresh.generate(fed, o), out2);
  // Another first question: only the common start of the two encodings is kept.
  const auto other = m->encode(m->chat_prompt("Name a color."));
  size_t common = 0;
  while (ctx2[common] == other[common]) ++common;
  EXPECT_EQ(s.reusable_tokens(other), static_cast<int>(common));
  const auto out3 = s.generate_reusing(other, o);
  EXPECT_EQ(s.stats().reused_tokens, static_cast<int>(common));
  EXPECT_EQ(s.stats().prompt_tokens, static_cast<int>(other.size() - common));
  fresh.reset();
  EXPECT_EQ(fresh.generate(other, o), out3);
}

}  // namespace
}  // namespace vkllm

namespace vkllm {
namespace {

// Structured output through the library: the reply of a schema-constrained call is JSON with the
// schema's required members and types (checked by nlohmann::json, not by the grammar), greedy and
// sampled; the call ends as soon as the object is closed; an unsupported keyword is an Error
// naming it.
TEST(Sampling, JsonSchemaConstraintGivesJsonTheSchemaAccepts) {
  const auto c = json_schema_constraint(
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
          "n":{"type":"integer","minimum":1,"maximum":5}},"required":["city","n"],
          "additionalProperties":false})");
  for (float temperature : {0.0f, 1.0f}) {
    Session s(cpu_model());
    GenerationOptions g = greedy(40);
    g.temperature = temperature;
    g.seed = 3;
    g.constraint = c;
    std::string text;
    s.generate(cpu_model()->chat_prompt(kQuestion), g, [&](int32_t, const std::string& piece) {
      text += piece;
      return true;
    });
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_EQ(j.size(), 2u) << text;
    ASSERT_TRUE(j.contains("city") && j["city"].is_string()) << text;
    EXPECT_LE(j["city"].get<std::string>().size(), 12u * 4) << text;
    ASSERT_TRUE(j.contains("n") && j["n"].is_number_integer()) << text;
    EXPECT_GE(j["n"].get<int>(), 1);
    EXPECT_LE(j["n"].get<int>(), 5);
    EXPECT_TRUE(s.stats().stopped_by_eos) << "the call goes on after the closed object: " << text;
    EXPECT_EQ(text.back(), '}');
  }
  try {
    json_schema_constraint(R"({"type":"string","pattern":"a+"})");
    ADD_FAILURE() << "a pattern compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'pattern'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(json_schema_constraint("{not json"), Error);
}

}  // namespace
}  // namespace vkllm
