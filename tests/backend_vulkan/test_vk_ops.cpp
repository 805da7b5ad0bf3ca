// The Vulkan backend's checks that are not an (op, shape, dtype) case of the op table
// (test_vk_table_*.cpp, op_table.h): the subgroups the kernels assume, the integer dot product
// switch, an out-of-range token id, the choice of device by index and name.
#include <gtest/gtest.h>

#include "backend/vulkan/vk_probe.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

using TK = TensorKind;

// The subgroups the device runs are the ones the kernels split their work by: full, lanes in order
// (vk_probe.h), at the workgroup sizes the kernels use.
TEST(VulkanOps, SubgroupsAreWhatTheKernelsAssume) {
  vk::Context ctx(validated());
  for (uint32_t wg : {64u, 256u}) {
    const vk::SubgroupLayout s = vk::probe_subgroups(ctx, wg);
    std::printf("subgroups: %s\n", s.describe().c_str());
    EXPECT_TRUE(s.full()) << s.describe();
    EXPECT_EQ(s.reported_size, ctx.info().subgroup_size);
  }
}

// The kernels' fp16 rounding (vk_probe.h): common.glsl's f16_round and a store's conversion both
// round to nearest even, bit for bit as core/half.h, on every fp16 value, the midpoints and
// neighbours around each, the subnormal range, overflow and random patterns. Whether the driver
// keeps float(float16_t(x)) as written is printed (NVIDIA's drops it), not required.
TEST(VulkanOps, Fp16RoundingIsRoundToNearestEven) {
  vk::Context ctx(validated());
  ASSERT_TRUE(ctx.info().storage16) << "the fp16 recipes need 16-bit storage";
  const vk::F16Rounding f = vk::probe_f16_rounding(ctx);
  std::printf("fp16 rounding: %s\n", f.describe().c_str());
  EXPECT_GT(f.inputs, 300000u);
  EXPECT_EQ(f.f16_round_wrong, 0u) << f.first_wrong;
  EXPECT_EQ(f.store_wrong, 0u) << f.first_wrong;
}

TEST(VulkanOps, IntDotPathIsAvailableOnThisDevice) {
  vk::Context ctx(validated());
  std::printf("device %s: int8 dot product %s\n", ctx.info().name.c_str(),
              ctx.use_int_dot() ? "on" : "off");
  VulkanOptions o = validated();
  o.no_int_dot = true;
  vk::Context off(o);
  EXPECT_FALSE(off.use_int_dot());
}

TEST(VulkanOps, OutOfRangeTokenIdIsAnError) {
  Case c;
  std::vector<int32_t> ids = {3, 300};
  c.p.input_ids = c.add("ids", DType::I32, TK::Input, {-1}, bytes_of(ids));
  std::mt19937 rng(1);
  int32_t t = c.add("tab", DType::F32, TK::Weight, {300, 8}, bytes_f32(rand_vec(rng, 2400)));
  int32_t y = c.add("y", DType::F32, TK::Activation, {-1, 8});
  c.op("embedding", {c.p.input_ids, t}, y);
  OpRun r(c, 2);
  EXPECT_THROW(r.forward(2, 0), Error);
}

TEST(VulkanDevice, SelectByNameAndIndex) {
  auto devs = vk::list_devices();
  ASSERT_FALSE(devs.empty()) << "no Vulkan device found";
  VulkanOptions o = validated();
  o.device = "0";
  {
    vk::Context c(o);
    EXPECT_EQ(c.info().index, 0u);
  }
  o.device = devs[0].name.substr(0, 4);
  {
    vk::Context c(o);
    EXPECT_EQ(c.info().name, devs[0].name);
  }
  o.device = "no-such-gpu-name";
  EXPECT_THROW(vk::Context c(o), Error);
  o.device = "99";
  EXPECT_THROW(vk::Context c(o), Error);
}

}  // namespace
}  // namespace vkllm::test
