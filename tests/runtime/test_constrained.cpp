// Constrained greedy generation (generate() with a grammar::Matcher) on a backend that runs greedy
// steps ahead, several a submit: the tokens must be those of reading the logits every step and
// masking them (the reference), whether the run ahead is used or dropped at a refused token; and
// one refused greedy step against the masked logits' argmax over a real vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../tokenizer/fixtures.h"
#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "runtime/reference.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;

namespace {

// A CPU executor that decodes greedy batches of up to 4 (as the Vulkan backend does with the token
// kept on the device), counting its batches and the forwards that read logits back; `ratio` is its
// constrained_ahead() (1: a submit twice the last one whose argmaxes were all allowed).
class RunsAhead final : public Executor {
 public:
  explicit RunsAhead(std::unique_ptr<Executor> e) : e_(std::move(e)) {}
  int32_t forward(const int32_t* ids, int T, int pos, float* logits) override {
    if (logits) ++logit_forwards;
    return e_->forward(ids, T, pos, logits);
  }
  void last_logits(float* out) override { e_->last_logits(out); }
  const char* name() const override { return "runs-ahead"; }
  int greedy_batch() const override { return 4; }
  int constrained_ahead() const override { return ratio; }
  void decode_greedy(int32_t first, int pos, int n, int32_t* out) override {
    ++batches;
    for (int i = 0; i < n; ++i) first = out[i] = e_->forward(&first, 1, pos + i, nullptr);
  }
  int batches = 0, logit_forwards = 0, ratio = 1;

 private:
  std::unique_ptr<Executor> e_;
};

}  // namespace

TEST(Constrained, RunningAheadPicksTheTokensOfMaskingEveryStep) {
  HfCheckpoint ckpt{
      testutil::write_tiny_checkpoint(testutil::temp_dir("constrained"), Arch::Qwen3)};
  std::unique_ptr<ReferenceModel> m = load_reference_model(ckpt, 128);
  const int64_t vocab = ckpt.desc().vocab;
  // Token i is one byte of kBytes (the last id eos): strings run on while the argmax is a letter,
  // and the schema's fixed lengths force a quote or a comma the argmax rarely is.
  const std::string kBytes = "abcdefghijklmnopqrstuvwxyz\",[]";
  std::vector<std::string> bytes;
  for (int64_t i = 0; i + 1 < vocab; ++i)
    bytes.emplace_back(1, kBytes[static_cast<size_t>(i) % kBytes.size()]);
  bytes.push_back("<eos>");
  std::vector<bool> special(bytes.size(), false);
  special.back() = true;
  const int32_t eos = static_cast<int32_t>(vocab - 1);
  auto index = std::make_shared<grammar::TokenIndex>(bytes, special, std::vector<int32_t>{eos},
                                                     static_cast<int32_t>(vocab));
  const auto schema = grammar::compile_json_schema(nlohmann::json::parse(
      R"({"type": "array", "items": {"type": "string", "minLength": 40, "maxLength": 40},
          "minItems": 2, "maxItems": 2})"));
  const std::vector<int32_t> prompt = {5, 17, 299, 0, 42};
  auto run = [&](Executor& ex, bool every_step, GenerateStats* st) {
    grammar::Matcher c(schema, index);
    Sampler sampler{SamplingParams{}};
    auto out = generate(ex, m->lowered.program, prompt, 95, sampler, every_step, {eos}, 0, nullptr,
                        st, &c);
    EXPECT_TRUE(c.complete());
    return out;
  };
  // The reference: each step's logits masked (Matcher::apply_mask) and their argmax; `refused`
  // counts the steps whose unmasked argmax the mask changed.
  std::vector<int32_t> ref;
  int refused = 0;
  {
    grammar::Matcher c(schema, index);
    auto ex = m->make_executor();
    std::vector<float> l(static_cast<size_t>(vocab));
    ex->forward(prompt.data(), static_cast<int>(prompt.size()), 0, l.data());
    for (int i = 0, pos = static_cast<int>(prompt.size()); i < 95; ++i, ++pos) {
      const auto raw = std::max_element(l.begin(), l.end()) - l.begin();
      c.apply_mask(l.data(), vocab, 95 - i);
      const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      refused += t != raw;  // the unconstrained argmax was not allowed
      if (c.is_eos(t) && c.complete()) break;
      ASSERT_TRUE(c.accept_token(t));
      ref.push_back(t);
      if (c.finished()) break;
      ex->forward(&t, 1, pos, l.data());
    }
  }
  std::string text;
  for (int32_t t : ref) text += index->bytes(t);
  SCOPED_TRACE(text);
  EXPECT_EQ(ref.size(), 1u + 2u * 42u + 1u + 1u);  // ["x40","x40"]
  auto every_step = m->make_executor();
  GenerateStats st;
  EXPECT_EQ(run(*every_step, true, &st), ref);
  // (the refused argmaxes were replaced by the best allowed logit, not by a whole mask)
  EXPECT_LT(st.masked_steps, 5) << st.masked_steps;
  EXPECT_EQ(st.refused_steps, refused);
  EXPECT_GT(refused, st.masked_steps);
  EXPECT_GE(st.constraint_ms, 0.0);
  RunsAhead ahead(m->make_executor());
  GenerateStats ast;
  EXPECT_EQ(run(ahead, false, &ast), ref);
  EXPECT_GT(ahead.batches, 0);         // it ran ahead
  EXPECT_GT(ahead.logit_forwards, 0);  // and dropped a batch at a refused token
  EXPECT_EQ(ast.decode_submits, ahead.batches + ahead.logit_forwards);
  EXPECT_LT(ast.decode_submits, static_cast<int>(ref.size()));
  EXPECT_GE(ast.wasted_steps, ahead.logit_forwards);
  RunsAhead cautious(m->make_executor());  // the default ratio
  cautious.ratio = Executor::kConstrainedAhead;
  EXPECT_EQ(run(cautious, false, nullptr), ref);
}

// A greedy step whose argmax the grammar refuses (pick_constrained: the best logits one by one,
// else a masked argmax without writing the mask) against the reference: the logits masked with
// apply_mask and their std::max_element. Llama 3.2's vocabulary, random logits rounded to quarter
// units (ties everywhere, broken by the lower id), some rows with a NaN; the cost of such a step is
// printed (docs/serve.md).
TEST(Constrained, RefusedGreedyStepPicksTheMaskedArgmax) {
  const Tokenizer* t = test::fixture("llama3.2");
  ASSERT_TRUE(t);
  std::vector<std::string> bytes(static_cast<size_t>(t->vocab_size()));
  std::vector<bool> special(bytes.size());
  for (int32_t i = 0; i < t->vocab_size(); ++i) {
    bytes[static_cast<size_t>(i)] = t->token_bytes(i);
    special[static_cast<size_t>(i)] = t->is_special(i);
  }
  const int64_t vocab = t->vocab_size() + 5;  // logits rows past the tokenizer's ids
  auto index = std::make_shared<grammar::TokenIndex>(
      bytes, special, std::vector<int32_t>{*t->eos_id()}, static_cast<int32_t>(vocab));
  const auto person = grammar::compile_json_schema(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
          "age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"]})"));
  const std::vector<std::pair<std::shared_ptr<const grammar::Grammar>, std::string>> states = {
      {grammar::any_json_object(), "{"},
      {grammar::any_json_object(), "{\"a\": "},
      {grammar::any_json_object(), "{\"a\": [1, \"xy"},
      {person, "{\"name\": \"Jo\", "},
      {person, "{\"name\": \"Jo\", \"age\": 1"},
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> l(static_cast<size_t>(vocab)), masked(l.size());
  double new_ms = 0, ref_ms = 0;
  int steps = 0, masks = 0;
  using clock = std::chrono::steady_clock;
  for (const auto& [g, prefix] : states) {
    for (int trial = 0; trial < 12; ++trial) {
      for (float& x : l) x = std::round(normal(rng) * 4.0f) / 4.0f;
      if (trial % 6 == 5) l[rng() % l.size()] = std::nanf("");
      const auto greedy = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      const int left = trial % 2 ? 3 : 100;  // a tight budget too
      grammar::Matcher m(g, index), ref(g, index);
      ASSERT_TRUE(m.accept_bytes(prefix) && ref.accept_bytes(prefix)) << prefix;
      // (the two in turn first, so that neither always finds the caches warm)
      const auto reference = [&] {
        masked = l;
        const auto r0 = clock::now();
        ref.apply_mask(masked.data(), vocab, left);
        const auto id = std::max_element(masked.begin(), masked.end()) - masked.begin();
        ref_ms += std::chrono::duration<double, std::milli>(clock::now() - r0).count();
        return static_cast<int32_t>(id);
      };
      const int32_t want = trial % 2 ? reference() : -2;
      Sampler sampler{SamplingParams{}};
      const auto r1 = clock::now();
      const int32_t got = pick_constrained(
          sampler, m, greedy, [&] { return l.data(); }, vocab, left, &masks);
      new_ms += std::chrono::duration<double, std::milli>(clock::now() - r1).count();
      EXPECT_EQ(got, trial % 2 ? want : reference()) << "after '" << prefix << "', trial " << trial;
      ++steps;
    }
  }
  std::printf("refused greedy step: %.3f ms (%d of %d masked); masking the logits: %.3f ms\n",
              new_ms / steps, masks, steps, ref_ms / steps);
}
