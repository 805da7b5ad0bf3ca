// The activation memory planner (vk_memory_plan.h) over the toy programs: buffers are shared only
// between tensors whose lifetimes do not overlap, fused runs stretch their tensors' lifetimes over
// the whole run, and malformed programs are refused with one line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/vulkan/vk_memory_plan.h"
#include "core/error.h"
#include "selftest/toy_model.h"

namespace vkllm::test {
namespace {

uint64_t toy_bytes(const TensorDecl& t) {
  uint64_t n = 16;  // rows of every [-1, N] activation
  for (size_t d = 1; d < t.shape.size(); ++d) n *= static_cast<uint64_t>(t.shape[d]);
  return n * (t.dtype == DType::F16 ? 2 : t.dtype == DType::I8 ? 1 : 4);
}

void expect_disjoint_tenants(const Program& p, const vk::MemoryPlan& m) {
  const size_t n = p.tensors.size();
  for (size_t a = 0; a < n; ++a) {
    if (m.first[a] < 0) continue;
    ASSERT_GE(m.slot_of[a], 0) << p.tensors[a].name << " was written but has no buffer";
    EXPECT_GE(m.slot_bytes[static_cast<size_t>(m.slot_of[a])], toy_bytes(p.tensors[a]))
        << p.tensors[a].name;
    for (size_t b = a + 1; b < n; ++b) {
      if (m.first[b] < 0 || m.slot_of[a] != m.slot_of[b]) continue;
      EXPECT_TRUE(m.last[a] < m.first[b] || m.last[b] < m.first[a])
          << p.tensors[a].name << " [" << m.first[a] << ", " << m.last[a] << "] and "
          << p.tensors[b].name << " [" << m.first[b] << ", " << m.last[b] << "] share a buffer";
    }
  }
}

TEST(VulkanMemoryPlan, BuffersAreSharedOnlyByTensorsThatAreNeverLiveTogether) {
  for (const toy::Lin lin : {toy::Lin::F32, toy::Lin::A8W4}) {
    const toy::Toy t = toy::build_toy({lin, toy::Emb::F32}, 5);
    const std::vector<vk::FusedRun> none;
    const vk::MemoryPlan m = vk::plan_activation_memory(t.p, {&none}, "", toy_bytes);
    expect_disjoint_tenants(t.p, m);
    // Buffers are reused: fewer than the activations.
    size_t activations = 0;
    for (size_t i = 0; i < t.p.tensors.size(); ++i) activations += m.first[i] >= 0;
    EXPECT_LT(m.slot_bytes.size(), activations);
    EXPECT_EQ(m.last[static_cast<size_t>(t.p.logits)], static_cast<int>(t.p.ops.size()));

    // A fused run over ops 2..6 is one step: what it reads lives until its end, what it writes
    // from its start.
    const std::vector<vk::FusedRun> runs = {vk::FusedRun{2, 6, "test run"}};
    const vk::MemoryPlan f = vk::plan_activation_memory(t.p, {&none, &runs}, "", toy_bytes);
    expect_disjoint_tenants(t.p, f);
    for (size_t k = 2; k <= 6; ++k) {
      for (int32_t in : t.p.ops[k].inputs) {
        if (t.p.tensors[in].kind == TensorKind::Activation) {
          EXPECT_GE(f.last[in], 6) << k;
        }
      }
      for (int32_t out : t.p.ops[k].outputs) {
        EXPECT_EQ(f.first[out], 2) << k;
      }
    }
  }
}

TEST(VulkanMemoryPlan, RefusesAnActivationReadBeforeItIsWritten) {
  toy::Toy t = toy::build_toy({toy::Lin::F32, toy::Emb::F32}, 5);
  t.p.ops[1].inputs[0] = t.p.logits;
  const std::vector<vk::FusedRun> none;
  try {
    vk::plan_activation_memory(t.p, {&none}, "", toy_bytes);
    ADD_FAILURE() << "expected a refusal";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("before any op writes it"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace vkllm::test
