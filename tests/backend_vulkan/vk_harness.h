// Test harness for the Vulkan backend: every context runs with the Khronos validation layer
// (synchronization validation included) and a test fails on any validation message.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_fused.h"
#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_pipeline.h"
#include "core/error.h"
#include "core/half.h"
#include "grammar/grammar.h"
#include "ir/program.h"
#include "selftest/toy_model.h"
#include "testutil/batch_scenario.h"

namespace vkllm::test {

// The linear families (fp32, fp16, int4 weight-only, 8da4w) the op and executor tests build, and
// the random data helpers (selftest/toy_model.h).
using toy::bytes_f16;
using toy::bytes_f32;
using toy::bytes_of;
using toy::Lin;
using toy::rand_vec;

VulkanOptions validated(VulkanOptions o = {});

// The op table's perf mode (docs/vulkan.md, "Tests"): VKLLM_OP_PERF=1 times every case's forward
// 100 times, VKLLM_OP_PERF=N (2..100000) N times; unset or 0: off. In perf mode OpRun's contexts
// run without the validation layer (whose host work would be timed by the host-clock fallback).
// Read here only, once; never in src/. Fails the test on a malformed value.
int op_perf_reps();

// Normalized mean squared error sum((a-b)^2) / sum(b^2); fails the test on NaN or size mismatch.
double nmse(const std::vector<float>& got, const std::vector<float>& want);

std::vector<float> round_f16(std::vector<float> v);

// A batched forward's rows (testutil/batch_scenario.h) against the reference's: each row's logits
// within NMSE `bound`, and its token the reference's where the best logit leads by more than
// `tie_margin` (the recipe's near-tie bound, as vkllm verify --agree allows).
void expect_batch_agrees(const std::vector<testutil::BatchOutput>& got,
                         const std::vector<testutil::BatchOutput>& want, double bound,
                         double tie_margin);

// The steps a plan of an executor's profile (VulkanOptions::profile, printed to stderr when it
// ends) records for `key`: the count column of section `plan`'s rows ("prefill", "decode") keyed
// `key`, or `key` and its widths ("rope x2+attention 64<-64"); 0 where there are none.
int profile_steps(const std::string& profile, const std::string& plan, const std::string& key);

// A program fragment with host data for its weights, inputs and pre-filled tensors.
struct Case {
  Program p;
  std::map<int32_t, std::vector<uint8_t>> host;
  Case() { p.max_ctx = 64; }
  int32_t add(const std::string& name, DType dt, TensorKind kind, std::vector<int64_t> shape,
              std::vector<uint8_t> data = {});
  void op(const std::string& family, std::vector<int32_t> in, int32_t out,
          nlohmann::json attrs = nlohmann::json::object());
};

// A context and its pipelines for `opt`, shared by the OpRuns of a process: the op table's cases
// compile each pipeline once a process, and a process makes one context per distinct options
// rather than one per case (NVIDIA's driver refuses instances after ~30 validated ones). The
// three used last stay alive (the rest are released when no OpRun holds them).
struct Device {
  std::unique_ptr<vk::Context> ctx;
  std::unique_ptr<vk::Kernels> kernels;
  ~Device();
};
std::shared_ptr<Device> shared_device(const VulkanOptions& opt);
// Every field of the options as one string (the key of a shared device).
std::string options_key(const VulkanOptions& o);

// Runs the ops of a Case on the device: buffers for every tensor (host data uploaded, every
// other tensor poisoned with NaN), the ops prepared once and recorded per forward. prefill_runs:
// the program's prefill runs (vk_fused.h find_prefill_runs) recorded as one step each.
class OpRun {
 public:
  // batch_out > 0: the ops prepared as a batched executor's, its [1, N] activations holding
  // batch_out output rows.
  OpRun(Case& c, int max_tokens, VulkanOptions opt = {}, bool prefill_runs = false,
        int batch_out = 0);
  ~OpRun();
  void forward(int T, int pos);
  // Microseconds a forward of T tokens at `pos` takes on the device: `reps` forwards recorded in
  // one command buffer (a barrier between them) between two timestamps (the host clock around
  // the submit where the device has none), the best of three submits after a warm-up.
  double time_us(int T, int pos, int reps);
  void write(int32_t t, const std::vector<uint8_t>& data);
  std::vector<float> read(int32_t t, int rows);  // F32 / F16 as float, I32 as float
  std::vector<uint8_t> read_bytes(const vk::Buffer& b, size_t n);
  vk::Context& ctx() { return *dev_->ctx; }
  vk::OpEnv& env() { return *env_; }
  const vk::PreparedOp& op(size_t k) const { return *ops_[k]; }
  const std::vector<vk::FusedRun>& runs() const { return runs_; }

 private:
  void record(VkCommandBuffer cb, int T);
  Case& c_;
  uint64_t messages_at_start_;
  std::shared_ptr<Device> dev_;
  vk::Context* ctx_;
  std::unique_ptr<vk::Allocator> alloc_;
  std::vector<vk::Buffer> bufs_;
  std::unique_ptr<vk::OpEnv> env_;
  std::vector<std::unique_ptr<vk::PreparedOp>> ops_;
  std::vector<vk::FusedRun> runs_;
  std::vector<std::unique_ptr<vk::PreparedOp>> fused_;  // of runs_
  int max_t_;
};

// A toy model's vocabulary of single bytes for the constraint tests: token i is byte
// i % bytes.size() of `bytes`, the last token eos ("<eos>", special).
inline std::shared_ptr<grammar::TokenIndex> byte_token_index(const std::string& bytes) {
  std::vector<std::string> tokens;
  for (int64_t i = 0; i + 1 < toy::kVocab; ++i)
    tokens.emplace_back(1, bytes[static_cast<size_t>(i) % bytes.size()]);
  tokens.push_back("<eos>");
  std::vector<bool> special(tokens.size(), false);
  special.back() = true;
  const int32_t eos = static_cast<int32_t>(toy::kVocab - 1);
  return std::make_shared<grammar::TokenIndex>(tokens, special, std::vector<int32_t>{eos},
                                               static_cast<int32_t>(toy::kVocab));
}

}  // namespace vkllm::test
