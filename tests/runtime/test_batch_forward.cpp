// The CPU reference of batched forwards (docs/ir.md "Batched forward") against single-sequence
// forwards of the same interpreter: every row's arithmetic is the same, so the logits are equal
// bit for bit; and the malformed batches the executor refuses.
#include <gtest/gtest.h>

#include "backend/executor.h"
#include "core/error.h"
#include "selftest/toy_model.h"
#include "testutil/batch_scenario.h"

using namespace vkllm;

namespace {

struct Named {
  const char* name;
  toy::ToyConfig cfg;
};

class CpuBatch : public ::testing::TestWithParam<Named> {};

}  // namespace

TEST_P(CpuBatch, EqualsOneExecutorPerSequence) {
  const toy::Toy toy = toy::build_toy(GetParam().cfg, 21);
  const testutil::BatchScenario sc;
  const int V = static_cast<int>(toy::kVocab);
  auto batch = make_cpu_batch_executor(toy.p, toy.w, sc.kBlocks, sc.kBlockTokens, 32);
  const auto got = sc.run_batched(*batch, V);
  const auto want = sc.run_single([&] { return make_cpu_executor(toy.p, toy.w); }, V);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << got[i].step << " seq " << got[i].seq);
    ASSERT_EQ(got[i].seq, want[i].seq);
    EXPECT_EQ(got[i].token, want[i].token);
    EXPECT_EQ(got[i].logits, want[i].logits);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Toys, CpuBatch,
    ::testing::Values(Named{"f32", {}},
                      Named{"a8w4_f16_qknorm",
                            {toy::Lin::A8W4, toy::Emb::Q4, DType::F16, DType::F16, true, false}},
                      Named{"q4w_long_rope",
                            {toy::Lin::Q4W, toy::Emb::F16, DType::F32, DType::F16, false, true}}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(CpuBatchChecks, RefusesMalformedBatches) {
  const toy::Toy toy = toy::build_toy({}, 3);
  auto ex = make_cpu_batch_executor(toy.p, toy.w, 4, 4, 8);
  const int32_t ids[3] = {1, 2, 3}, seq[3] = {0, 0, 0}, table[2] = {0, 1};
  int32_t pos[3] = {0, 1, 2}, out_row = 2, next = 0;
  BatchForward b;
  b.T = 3;
  b.ids = ids;
  b.pos = pos;
  b.seq = seq;
  b.n_seqs = 1;
  b.block_table = table;
  b.table_stride = 2;
  b.out_rows = &out_row;
  b.n_out = 1;
  b.next_tokens = &next;
  EXPECT_NO_THROW(ex->forward(b));
  auto refused = [&](BatchForward m, const char* what) {
    try {
      ex->forward(m);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  BatchForward m = b;
  m.T = 9;
  refused(m, "rows");
  const int32_t bad_table[2] = {0, 4};
  m = b;
  m.block_table = bad_table;
  refused(m, "outside the pool");
  const int32_t gap[3] = {0, 1, 3};
  m = b;
  m.pos = gap;
  refused(m, "not consecutive");
  const int32_t far[3] = {6, 7, 8};
  m = b;
  m.pos = far;
  refused(m, "needs block");
  const int32_t bad_seq[3] = {0, 0, 1};
  m = b;
  m.seq = bad_seq;
  refused(m, "names sequence");
  int32_t bad_row = 3;
  m = b;
  m.out_rows = &bad_row;
  refused(m, "output row");
  m = b;
  m.window_table = table;  // an executor of one pool takes no window table
  refused(m, "a window table given with a window pool of 0 blocks");
  EXPECT_THROW(make_cpu_batch_executor(toy.p, toy.w, 0, 4, 8), Error);
  // A window pool needs sliding-window layers beside full ones: the toy has none.
  try {
    make_cpu_batch_executor(toy.p, toy.w, 4, 4, 8, 4);
    ADD_FAILURE() << "a window pool without sliding-window layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no sliding-window layers beside full ones"),
              std::string::npos)
        << e.what();
  }
}
