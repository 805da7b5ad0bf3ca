// check_agreement (src/runtime/agreement.h): the Vulkan-vs-CPU gate of `vkllm verify --agree` and
// the twin matrix, exercised with CPU executors and deliberately wrong ones, so that it is shown
// to pass identical backends and to fail broken ones with a clear reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/mapped_file.h"
#include "runtime/agreement.h"
#include "runtime/reference.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;

namespace {

// Wraps an executor and damages its result: `scale` multiplies every logit (NMSE grows),
// `shift` makes it return the token after its own argmax (a choice its logits do not support),
// `bump` raises logit row `bump` 1 above the maximum and returns the argmax of the damaged logits
// (the issue-21 backend, +30 on one row of a twin's logits, scaled to this model's logits).
class Damaged final : public Executor {
 public:
  Damaged(std::unique_ptr<Executor> e, int64_t vocab, float scale, bool shift, int bump = -1)
      : e_(std::move(e)), vocab_(vocab), scale_(scale), shift_(shift), bump_(bump) {}
  int32_t forward(const int32_t* ids, int T, int pos, float* logits) override {
    std::vector<float> l(static_cast<size_t>(vocab_));
    int32_t t = e_->forward(ids, T, pos, l.data());
    for (auto& v : l) v *= scale_;
    if (bump_ >= 0) {
      l[static_cast<size_t>(bump_)] = *std::max_element(l.begin(), l.end()) + 1.0f;
      t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    }
    if (logits) std::copy(l.begin(), l.end(), logits);
    last_ = l;
    return shift_ ? static_cast<int32_t>((t + 1) % vocab_) : t;
  }
  void last_logits(float* out) override { std::copy(last_.begin(), last_.end(), out); }
  const char* name() const override { return "damaged"; }

 private:
  std::unique_ptr<Executor> e_;
  int64_t vocab_;
  float scale_;
  bool shift_;
  int bump_;
  std::vector<float> last_;
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
  o.bounds = agreement_bounds("quantized-8da4w");  // the loosest row
  o.max_new_tokens = 4;
  const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
  EXPECT_FALSE(g.ok);
  EXPECT_EQ(g.reason.rfind("step 0: logits NMSE", 0), 0u) << g.reason;
  EXPECT_EQ(g.steps, 4);  // every step is measured; the first failure is the reason
}

TEST(Agreement, ATokenItsLogitsDoNotSupportFails) {
  Fixture f;
  Damaged a(f.m->make_executor(), f.vocab, 1.0f, true);  // identical logits, wrong token
  auto b = f.m->make_executor();
  AgreementOptions o;
  o.bounds = agreement_bounds("non-quantized");
  o.max_new_tokens = 4;
  const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
  EXPECT_FALSE(g.ok);
  EXPECT_NE(g.reason.find("margin"), std::string::npos) << g.reason;
  EXPECT_EQ(g.worst_topk_diff, 0.0);  // its logits are the reference's: only the rule sees it
}

// The issue-21 backend: one logit row raised above the others, so that row is chosen at every
// step. Its whole-vocabulary NMSE stays small; the reference's margin and the top-k difference
// fail it under every recipe's bounds, the loosest included (the +30 row on a real twin:
// Perturbations.EveryCaseIsCaughtByTheGatesThatMustCatchIt).
TEST(Agreement, OneRaisedLogitRowFailsUnderEveryRecipe) {
  Fixture f;
  for (const auto& bounds : agreement_bounds_table()) {
    Damaged a(f.m->make_executor(), f.vocab, 1.0f, false, 100);
    auto b = f.m->make_executor();
    AgreementOptions o;
    o.bounds = bounds;
    o.max_new_tokens = 8;
    const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
    EXPECT_FALSE(g.ok) << bounds.recipe;
    EXPECT_EQ(g.tokens, std::vector<int32_t>(8, 100));
    EXPECT_GT(g.worst_topk_diff, bounds.max_topk_diff) << bounds.recipe;
    EXPECT_GT(g.worst_tie_margin, bounds.max_tie_margin) << bounds.recipe;
  }
}

// Near ties within the margin bound are capped: every step a near tie fails once the count
// exceeds the fraction of the steps.
TEST(Agreement, TooManyNearTiesFail) {
  Fixture f;
  Damaged a(f.m->make_executor(), f.vocab, 1.0f, true);
  auto b = f.m->make_executor();
  AgreementOptions o;
  o.bounds = {"test", 1e9, 0.25, 1e9, 1e9, ""};
  o.max_new_tokens = 8;  // 2 near ties allowed
  const Agreement g = check_agreement(a, *b, nullptr, f.prompt, f.vocab, o);
  EXPECT_FALSE(g.ok);
  EXPECT_EQ(g.max_near_ties, 2);
  EXPECT_NE(g.reason.find("step 2: 3 near ties, more than the 2 allowed"), std::string::npos)
      << g.reason;
}

// docs/gates.md prints the bounds table; it must be the code's (one source of truth).
TEST(AgreementBounds, DocTableMatchesTheCode) {
  const std::string doc = read_text_file(std::string(VKLLM_SOURCE_DIR) + "/docs/gates.md");
  std::map<std::string, std::vector<double>> rows;
  const std::regex re(
      R"(^\| (\S+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|)");
  std::istringstream in(doc.substr(doc.find("## Agreement bounds")));
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re))
      rows[m[1]] = {std::stod(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
    if (line.rfind("## ", 0) == 0 && line != "## Agreement bounds") break;
  }
  ASSERT_EQ(rows.size(), agreement_bounds_table().size());
  for (const auto& b : agreement_bounds_table()) {
    ASSERT_TRUE(rows.count(b.recipe)) << b.recipe;
    EXPECT_EQ(rows[b.recipe], (std::vector<double>{b.max_tie_margin, b.max_near_tie_fraction,
                                                   b.max_topk_diff, b.max_nmse}))
        << b.recipe;
  }
  EXPECT_THROW(agreement_bounds("no-such-recipe"), Error);
}

// The cap is the fraction of the requested steps rounded up: 0.3 of 50 is 15 (not 16 from the
// last bit of 0.3), 0.1 of 12 is 2.
TEST(Agreement, NearTieCapIsTheFractionRoundedUp) {
  Fixture f;
  for (auto [fraction, steps, cap] : {std::tuple{0.3, 50, 15}, {0.1, 12, 2}, {0.1, 50, 5}}) {
    auto a = f.m->make_executor(), b = f.m->make_executor();
    AgreementOptions o;
    o.bounds = {"test", 0, fraction, 0, 0, ""};
    o.max_new_tokens = steps;
    EXPECT_EQ(check_agreement(*a, *b, nullptr, f.prompt, f.vocab, o).max_near_ties, cap)
        << fraction << " x " << steps;
  }
}
