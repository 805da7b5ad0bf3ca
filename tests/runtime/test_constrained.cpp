// Constrained greedy generation (generate() with a grammar::Matcher) on a backend that runs greedy
// steps ahead, several a submit: the tokens must be those of reading the logits every step and
// masking them (the reference), whether the run ahead is used or dropped at a refused token.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "runtime/reference.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;

namespace {

// A CPU executor that decodes greedy batches of 4 (as the Vulkan backend does with the token kept
// on the device), counting its batches and the forwards that read logits back.
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
  void decode_greedy(int32_t first, int pos, int n, int32_t* out) override {
    ++batches;
    for (int i = 0; i < n; ++i) first = out[i] = e_->forward(&first, 1, pos + i, nullptr);
  }
  int batches = 0, logit_forwards = 0;

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
  EXPECT_EQ(run(ahead, false, nullptr), ref);
  EXPECT_GT(ahead.batches, 0);         // it ran ahead
  EXPECT_GT(ahead.logit_forwards, 0);  // and dropped a batch at a refused token
}
