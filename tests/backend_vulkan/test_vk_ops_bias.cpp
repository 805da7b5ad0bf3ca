// bias_add (Qwen2's q/k/v projection biases) on Vulkan against the CPU reference kernel: random
// inputs, a width that is not a multiple of the workgroup size, fp32 and fp16 activations, and
// its output read by a following op in the same forward (the barrier between them; the validation
// layer's synchronization checks are on).
#include <gtest/gtest.h>

#include "backend/cpu/kernels.h"
#include "testutil/op_tolerance.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

using TK = TensorKind;

void check_bias_add(DType dt, int64_t N) {
  std::mt19937 rng(static_cast<unsigned>(N));
  Case c;
  const int maxT = 9;
  auto x = rand_vec(rng, static_cast<size_t>(maxT * N), -4, 4),
       b = rand_vec(rng, static_cast<size_t>(N), -2, 2);
  if (dt == DType::F16) x = round_f16(x);
  auto enc = [&](const std::vector<float>& v) {
    return dt == DType::F16 ? bytes_f16(v) : bytes_f32(v);
  };
  const int32_t tx = c.add("x", dt, TK::Activation, {-1, N}, enc(x));
  const int32_t tb = c.add("b", DType::F32, TK::Weight, {N}, bytes_f32(b));
  const int32_t ty = c.add("y", dt, TK::Activation, {-1, N});
  const int32_t tz = c.add("z", dt, TK::Activation, {-1, N});
  c.op("bias_add", {tx, tb}, ty);
  c.op("add", {ty, tx}, tz);  // reads y: the bias_add's write must be visible
  OpRun r(c, maxT);
  for (int T : {1, maxT}) {
    std::vector<float> want(static_cast<size_t>(T * N)), sum(want.size());
    cpu::bias_add(x.data(), T, N, b.data(), want.data());
    if (dt == DType::F16) want = round_f16(want);
    cpu::add(want.data(), x.data(), T * N, sum.data());
    if (dt == DType::F16) sum = round_f16(sum);
    r.forward(T, 0);
    const double bound = dt == DType::F16 ? testutil::kF16OutNmse : testutil::kElemNmse;
    EXPECT_LE(nmse(r.read(ty, T), want), bound) << "T=" << T;
    EXPECT_EQ(r.read(ty, T), want) << "T=" << T;  // one fp32 add (and the same fp16 rounding)
    EXPECT_EQ(r.read(tz, T), sum) << "T=" << T;
  }
}

TEST(VulkanOps, BiasAdd) {
  check_bias_add(DType::F32, 133);
  check_bias_add(DType::F16, 133);
  check_bias_add(DType::F32, 64);
}

}  // namespace
}  // namespace vkllm::test
