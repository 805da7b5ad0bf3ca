// check_agreement (src/runtime/agreement.h): the Vulkan-vs-CPU gate of `vkllm verify --agree` and
// the twin matrix, exercised with CPU executors and deliberately wrong ones, so that it is shown
// to pass identical backends and to fail broken ones with a clear reason.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/agreement.h"
#include "runtime/reference.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;

namespace {

// Wraps an executor and damages its result: `scale` multiplies every logit (NMSE grows), or
// `shift` makes it return the token after its own argmax (a choice its logits do not support).
class Damaged final : public Executor {
 public:
  Damaged(std::unique_ptr<Executor> e, int64_t vocab, float scale, bool shift)
      : e_(std::move(e)), vocab_(vocab), scale_(scale), shift_(shift) {}
  int32_t forward(const int32_t* ids, int T, int pos, float* logits) override {
    int32_t t = e_->forward(ids, T, pos, logits);
    if (logits)
      for (int64_t i = 0; i < vocab_; ++i) logits[i] *= scale_;
    return shift_ ? static_cast<int32_t>((t + 1) % vocab_) : t;
  }
  const char* name() const override { return "damaged"; }

 private:
  std::unique_ptr<Executor> e_;
  int64_t vocab_;
  float scale_;
  bool shift_;
};

struct Fixture {
  HfCheckpoint ckpt{testutil::write_tiny_checkpoint(testutil::temp_dir("agree"), Arch::Qwen3)};
  std::unique_ptr<ReferenceModel> m = load_reference_model(ckpt, 64);
  int64_t vocab = ckpt.desc().vocab;
  std::vector<int32_t> prompt = {5, 17, 299, 0, 42};
};

}  // namespace

TEST(Agreement, IdenticalBackendsAgreeExactly) {
  Fixture f;
  auto a = f.m->make_executor(), b = f.m->make_executor(), c = f.m->make_executor();
  AgreementOptions o;
  o.max_new_tokens = 12;
  const Agreement g = check_agreement(*a, *b, c.get(), f.prompt, f.vocab, o);
  EXPECT_TRUE(g.ok) << g.reason;
  EXPECT_EQ(g.steps, 12);
  EXPECT_EQ(g.exact, 12);
  EXPECT_EQ(g.near_ties, 0);
  EXPECT_EQ(g.worst_nmse, 0.0);
  EXPECT_TRUE(g.tokens_equal());
}

TEST(Agreement, LogitsFarFromTheReferenceFail) {
  Fixture f;
  Damaged a(f.m->make_executor(), f.vocab, 1.5f, false);  // NMSE 0.25
  auto b = f.m->make_executor();
  AgreementOptions o;
  o.max_new_tokens = 4;
  const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
  EXPECT_FALSE(g.ok);
  EXPECT_NE(g.reason.find("logits NMSE"), std::string::npos) << g.reason;
  EXPECT_EQ(g.steps, 1);
}

TEST(Agreement, ATokenItsLogitsDoNotSupportFails) {
  Fixture f;
  Damaged a(f.m->make_executor(), f.vocab, 1.0f, true);  // identical logits, wrong token
  auto b = f.m->make_executor();
  AgreementOptions o;
  o.max_new_tokens = 4;
  const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
  EXPECT_FALSE(g.ok);
  EXPECT_NE(g.reason.find("margin"), std::string::npos) << g.reason;
}
