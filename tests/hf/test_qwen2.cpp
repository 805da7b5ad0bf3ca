// Qwen2 (Qwen2ForCausalLM): the bias_add op's CPU reference against a plain loop, and the
// tiny-qwen2.5 twin: its config and bias tensors, a CPU forward whose bias_add ops give x + b with
// the checkpoint's biases and whose logits change when the biases are zeroed, and its export with
// the biases kept fp32.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "artifact/reader.h"
#include "backend/cpu/cpu_hook.h"
#include "backend/cpu/kernels.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "hf/checkpoint.h"
#include "hf/synth.h"
#include "runtime/reference.h"
#include "testutil/nmse.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using nlohmann::json;

namespace {

using testutil::nmse;

const std::string& twin_dir() {
  return testutil::tokenless_twin("tiny-qwen2.5");
}

const std::vector<int32_t> kPrompt = {5, 17, 299, 0, 42, 151643, 7, 100, 3, 151935, 11};

std::vector<float> forward_logits(Executor& e, int vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  e.forward(kPrompt.data(), static_cast<int>(kPrompt.size()), 0, logits.data());
  return logits;
}

}  // namespace

TEST(BiasAdd, CpuReferenceIsARowBroadcastAdd) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-3, 3);
  for (auto [T, N] : {std::pair{1, 1}, {5, 37}, {9, 128}}) {
    std::vector<float> x(static_cast<size_t>(T * N)), b(static_cast<size_t>(N)), y(x.size());
    for (float& v : x) v = d(rng);
    for (float& v : b) v = d(rng);
    cpu::bias_add(x.data(), T, N, b.data(), y.data());
    for (int j = 0; j < N; ++j)  // column by column: each column gets its own bias value
      for (int t = 0; t < T; ++t)
        ASSERT_EQ(y[static_cast<size_t>(t * N + j)], x[static_cast<size_t>(t * N + j)] + b[j])
            << "T=" << T << " N=" << N << " t=" << t << " j=" << j;
  }
}

TEST(Qwen2Twin, ConfigAndBiasTensors) {
  HfCheckpoint ck(twin_dir());
  const ModelDesc& m = ck.desc();
  EXPECT_EQ(m.hf_class, "Qwen2ForCausalLM");
  EXPECT_EQ(ck.config().at("model_type"), "qwen2");
  EXPECT_EQ(ck.config().at("use_sliding_window"), false);
  EXPECT_FALSE(ck.config().contains("head_dim"));
  EXPECT_EQ(m.arch, Arch::Llama);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.vocab, 151936);
  EXPECT_EQ(m.rope.theta, 1e6);
  EXPECT_EQ(m.eos_ids, (std::vector<int>{151645, 151643}));
  std::set<std::string> biases;
  for (auto& [name, view] : ck.tensors())
    if (name.find(".bias") != std::string::npos) biases.insert(name);
  std::set<std::string> want;
  for (int l = 0; l < m.n_layers; ++l)
    for (const char* p : {"q", "k", "v"})
      want.insert(fmt::format("model.layers.{}.self_attn.{}_proj.bias", l, p));
  EXPECT_EQ(biases, want);
  // Non-zero biases at their scale (docs/synth.md: standard deviation 0.5).
  std::vector<float> q(128);
  ck.get("model.layers.0.self_attn.q_proj.bias", {128}).read_f32(0, 128, q.data());
  double s = 0;
  for (float v : q) s += double(v) * v;
  EXPECT_NEAR(std::sqrt(s / 128), 0.5, 0.1);
  // The full-shape preset has Qwen2.5-0.5B's public parameter count (tied, with the biases).
  EXPECT_EQ(synth_param_count(find_synth_preset("qwen2.5-0.5b")), 494032768u);
}

// The CPU reference: each bias_add gives x + b with b read from the checkpoint, and a forward with
// the biases zeroed gives other logits (a lowering that dropped them would pass neither check).
TEST(Qwen2Twin, ForwardUsesTheBiases) {
  HfCheckpoint ck(twin_dir());
  auto ref = load_reference_model(ck, 64);
  const Program& p = ref->lowered.program;
  std::vector<int32_t> bias_tensors;
  size_t checked = 0;
  auto hook = [&](CpuOpState& st) {
    const Op& op = st.program.ops[st.op_index];
    if (op.family != "bias_add") return;
    const TensorDecl& b = st.program.tensors[op.inputs[1]];
    const int64_t N = b.shape[0];
    std::vector<float> bias(static_cast<size_t>(N));
    ck.get(b.name, {N}).read_f32(0, N, bias.data());
    const auto& x = st.buffers[op.inputs[0]];
    const auto& y = st.buffers[op.outputs[0]];
    ASSERT_EQ(y.size(), static_cast<size_t>(st.T * N));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], x[i] + bias[i % N]) << b.name;
    ++checked;
  };
  const int vocab = ck.desc().vocab;
  auto hooked = make_cpu_executor_with_hook(p, ref->weights, hook);
  const std::vector<float> with = forward_logits(*hooked, vocab);
  EXPECT_EQ(checked, 3u * ck.desc().n_layers);
  EXPECT_EQ(forward_logits(*ref->make_executor(), vocab), with);
  for (const Op& op : p.ops)
    if (op.family == "bias_add")
      std::fill(ref->weights.data[op.inputs[1]].begin(), ref->weights.data[op.inputs[1]].end(), 0);
  const std::vector<float> without = forward_logits(*ref->make_executor(), vocab);
  const double e = nmse(with, without);
  std::printf("[qwen2] logits NMSE with vs without the biases: %.3g\n", e);
  EXPECT_GT(e, 1e-2);
}

// Export: the biases stay fp32 weights (like the norms), also where the recipe stores the other
// float weights as fp16. The artifact's CPU forward is the reference's exactly in fp32, and in fp16
// far closer to the reference than to the forward without biases.
TEST(Qwen2Twin, ExportKeepsTheBiasesFloat) {
  HfCheckpoint ck(twin_dir());
  const int vocab = ck.desc().vocab;
  auto ref = load_reference_model(ck, 64);
  const std::vector<float> want = forward_logits(*ref->make_executor(), vocab);
  for (const Op& op : ref->lowered.program.ops)
    if (op.family == "bias_add")
      std::fill(ref->weights.data[op.inputs[1]].begin(), ref->weights.data[op.inputs[1]].end(), 0);
  const std::vector<float> unbiased = forward_logits(*ref->make_executor(), vocab);
  // (Every recipe: run on both backends by test_vulkan's VulkanTwins, through the quality gate by
  // test_quality's Quality.EveryRecipeOnTheNewFamilyTwins.)
  for (const char* recipe : {"non-quantized", "fp16"}) {
    SCOPED_TRACE(recipe);
    RecipeOptions o;
    o.recipe = recipe;
    o.max_context = 64;
    const std::string path = twin_dir() + "-" + recipe + ".vkllm";
    export_checkpoint(twin_dir(), path, o);
    {
      ArtifactReader r(path);
      size_t n = 0;
      for (const Op& op : r.program().ops)
        if (op.family == "bias_add") {
          EXPECT_EQ(r.program().tensors[op.inputs[1]].dtype, DType::F32);
          ++n;
        }
      EXPECT_EQ(n, 3u * ck.desc().n_layers);
      const std::vector<float> got = forward_logits(*make_cpu_executor(r.program(), r), vocab);
      const double e = nmse(want, got), e0 = nmse(unbiased, got);
      std::printf("[qwen2] %s artifact: logits NMSE %.3g to the reference, %.3g to it unbiased\n",
                  recipe, e, e0);
      if (std::string(recipe) == "non-quantized") {
        EXPECT_EQ(got, want);
      }
      EXPECT_LT(e * 10, e0);
    }
    std::filesystem::remove(path);
  }
}
