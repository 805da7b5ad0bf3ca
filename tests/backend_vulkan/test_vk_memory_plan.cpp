// The activation memory planner (vk_memory_plan.h) over the toy programs: buffers are shared only
// between tensors whose lifetimes do not overlap, fused runs stretch their tensors' lifetimes over
// the whole run, and malformed programs are refused with one line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/vulkan/vk_memory_plan.h"
#include "backend/vulkan/vk_ops.h"
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

namespace vkllm::test {
namespace {

// The int8 scratch plan (vk_ops.h plan_scratch) of the int8 toy, a Llama layer and a Gemma one:
// each whole-row norm and each SwiGLU / GeGLU quantizes its output for the linears that read it,
// q, k and v (gate and up) read that one quantization, and the o projection, whose input no such
// op writes, quantizes its own; holds[k] follows writes.
TEST(VulkanScratchPlan, EachRowIsQuantizedOnceForTheLinearsThatReadIt) {
  for (bool gemma : {false, true}) {
    toy::ToyConfig cfg{toy::Lin::A8W4};
    cfg.gemma = gemma;
    const Program p = toy::build_toy(cfg, 3).p;
    const vk::ScratchPlan s = vk::plan_scratch(p);
    ASSERT_EQ(s.writes.size(), p.ops.size());
    ASSERT_EQ(s.holds.size(), p.ops.size());
    int32_t held = -1;
    size_t norms = 0, glus = 0, own = 0, shared = 0;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const Op& o = p.ops[k];
      EXPECT_EQ(s.holds[k], held) << k;
      if (o.family == "linear_8da4w") {
        // A linear reads its own input's rows: written by itself unless they are there already.
        EXPECT_EQ(s.writes[k], held == o.inputs[0] ? -1 : o.inputs[0]) << k;
        ++(s.writes[k] < 0 ? shared : own);
      } else if (s.writes[k] >= 0) {
        EXPECT_EQ(s.writes[k], o.outputs[0]) << k;
        ++(o.family == "rms_norm" ? norms : glus);
      }
      if (s.writes[k] >= 0) held = s.writes[k];
    }
    const size_t layers = 2;
    EXPECT_EQ(glus, layers) << gemma;  // every SwiGLU / GeGLU feeds its down projection
    // The attention's and the MLP's input norms, and the final norm (of the last row, whole);
    // Gemma's norms after the attention and the MLP feed adds.
    EXPECT_EQ(norms, 2 * layers + 1) << gemma;
    EXPECT_EQ(shared, 6 * layers + 1) << gemma;  // q, k, v, gate, up, down; the lm_head
    EXPECT_EQ(own, layers) << gemma;             // o (of the attention's output)
  }
}

}  // namespace
}  // namespace vkllm::test
