// Constrained greedy generation (generate() with a grammar::Matcher) on a backend that runs greedy
// steps ahead, several a submit: the tokens must be those of reading the logits every step and
// masking them (the reference), whether the run ahead is used or dropped at a refused token.
#include <gtest/gtest.h>

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
  std::unique_ptr<ReferenceModel> m = load_reference_model(ckpt, 64);
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
      R"({"type": "array", "items": {"type": "string", "minLength": 9, "maxLength": 9},
          "minItems": 4, "maxItems": 4})"));
  const std::vector<int32_t> prompt = {5, 17, 299, 0, 42};
  auto run = [&](Executor& ex, bool every_step) {
    grammar::Matcher c(schema, index);
    Sampler sampler{SamplingParams{}};
    auto out = generate(ex, m->lowered.program, prompt, 55, sampler, every_step, {eos}, 0, nullptr,
                        nullptr, &c);
    EXPECT_TRUE(c.complete());
    return out;
  };
  auto ref_ex = m->make_executor();
  const auto ref = run(*ref_ex, true);
  std::string text;
  for (int32_t t : ref) text += index->bytes(t);
  SCOPED_TRACE(text);
  EXPECT_EQ(ref.size(), 1u + 4u * 11u + 3u + 1u);  // ["x9","x9","x9","x9"]
  RunsAhead ahead(m->make_executor());
  EXPECT_EQ(run(ahead, false), ref);
  EXPECT_GT(ahead.batches, 0);         // it ran ahead
  EXPECT_GT(ahead.logit_forwards, 0);  // and dropped a batch at a refused token
}
