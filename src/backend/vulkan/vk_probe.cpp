#include "backend/vulkan/vk_probe.h"

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_pipeline.h"
#include "core/half.h"

namespace vkllm::vk {

namespace {

// One workgroup of `k` over the buffer ranges `r` (its bindings in order), waited for.
void run_one_workgroup(Context& ctx, Kernels& kernels, const Kernel& k,
                       std::span<const BufRange> r) {
  VkDescriptorSet set = kernels.make_set(k, r);
  VkCommandBuffer cb = ctx.begin_once();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline());
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
  vkCmdDispatch(cb, 1, 1, 1);
  ctx.submit_and_wait(cb);
}

}  // namespace

std::string SubgroupLayout::describe() const {
  return fmt::format(
      "{} threads: gl_SubgroupSize {}, {}-{} invocations active a subgroup, {} subgroups "
      "({} reported){}",
      workgroup, reported_size, active_min, active_max, seen_subgroups, reported_subgroups,
      lanes_in_order ? "" : ", lanes out of order");
}

SubgroupLayout probe_subgroups(Context& ctx, uint32_t workgroup) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  const Kernel& k = kernels.get(Shader::subgroup_probe, false, SubgroupProbeSpec{.wg = workgroup});
  const VkDeviceSize bytes = static_cast<VkDeviceSize>(workgroup) * 16;
  Buffer out = alloc.create(bytes, false, "subgroup probe");
  const BufRange r{out.buf, 0, bytes};
  run_one_workgroup(ctx, kernels, k, {&r, 1});
  std::vector<uint32_t> v(static_cast<size_t>(workgroup) * 4);
  alloc.download(out, 0, v.data(), bytes);
  SubgroupLayout s;
  s.workgroup = workgroup;
  s.active_min = ~0u;
  std::set<uint32_t> ids;
  for (uint32_t i = 0; i < workgroup; ++i) {
    const uint32_t* e = &v[static_cast<size_t>(i) * 4];
    s.reported_size = std::max(s.reported_size, e[0]);
    ids.insert(e[2] & 0xFFFFu);
    s.reported_subgroups = std::max(s.reported_subgroups, e[2] >> 16);
    s.active_min = std::min(s.active_min, e[3] & 0xFFFFu);
    s.active_max = std::max(s.active_max, e[3] & 0xFFFFu);
    s.lanes_in_order = s.lanes_in_order && e[1] == (e[3] >> 16);
  }
  s.seen_subgroups = static_cast<uint32_t>(ids.size());
  return s;
}

namespace {

// Runs coopmat_probe `name` on the 128 words `in`; per lane, the element count and values.
std::vector<int32_t> run_coopmat_probe(Context& ctx, Shader name, const std::vector<uint32_t>& in) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  const Kernel& k = kernels.get(name, false, NoSpec{});
  constexpr uint32_t kWords = 128 + 9 * 32;
  Buffer io = alloc.create(kWords * 4, false, "cooperative-matrix probe");
  std::vector<int32_t> v(kWords, -1);
  std::memcpy(v.data(), in.data(), 128 * 4);
  alloc.upload(io, 0, v.data(), kWords * 4);
  const BufRange r{io.buf, 0, kWords * 4};
  run_one_workgroup(ctx, kernels, k, {&r, 1});
  alloc.download(io, 0, v.data(), kWords * 4);
  return v;
}

}  // namespace

std::string probe_coopmat_accumulator(Context& ctx) {
  std::vector<uint32_t> in(128);
  for (uint32_t i = 0; i < 128; ++i) in[i] = i;
  const std::vector<int32_t> v = run_coopmat_probe(ctx, Shader::coopmat_probe, in);
  std::set<int32_t> seen;
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const int32_t* e = &v[128 + 9 * lane];
    if (e[0] != 4)
      return fmt::format("a 16 x 8 int32 accumulator holds {} elements in lane {}, not 4", e[0],
                         lane);
    for (int i = 1; i <= 4; ++i) seen.insert(e[i]);
  }
  if (seen.size() != 128 || *seen.begin() != 0 || *seen.rbegin() != 127)
    return fmt::format("a 16 x 8 int32 accumulator's lanes hold {} distinct elements, not 128",
                       seen.size());
  return "";
}

std::string probe_coopmat_fragments(Context& ctx) {
  // fp32 accumulator, 16 x 8, values 8 row + col: lane L's element e is row L / 4 + 8 (e / 2),
  // column 2 (L % 4) + e % 2.
  std::vector<uint32_t> in(128);
  for (uint32_t i = 0; i < 128; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(&in[i], &f, 4);
  }
  std::vector<int32_t> v = run_coopmat_probe(ctx, Shader::coopmat_probe_f32, in);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const int32_t* e = &v[128 + 9 * lane];
    if (e[0] != 4)
      return fmt::format("a 16 x 8 fp32 accumulator holds {} elements in lane {}, not 4", e[0],
                         lane);
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
      if (e[1 + i] != static_cast<int32_t>(8 * row + col))
        return fmt::format(
            "a 16 x 8 fp32 accumulator's lane {} holds element ({}, {}) where the tensor cores' "
            "layout has ({}, {})",
            lane, e[1 + i] / 8, e[1 + i] % 8, row, col);
    }
  }
  // fp16 A operand, 16 x 16, values 16 row + col (halves, two a word): lane L's element e is
  // row L / 4 + 8 (e / 4), column 2 (L % 4) + e % 2 + 8 ((e / 2) % 2) (NVIDIA's order: both
  // columns of the left half, then of the right, for the upper row, then the lower).
  auto half = [](uint32_t x) {  // x < 2048: exact in fp16
    uint32_t e = 0;
    while ((x >> e) > 1) ++e;
    return x == 0 ? 0u : ((e + 15) << 10) | (((x << 10) >> e) & 0x3FFu);
  };
  for (uint32_t i = 0; i < 128; ++i) in[i] = half(2 * i) | (half(2 * i + 1) << 16);
  v = run_coopmat_probe(ctx, Shader::coopmat_probe_f16a, in);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const int32_t* e = &v[128 + 9 * lane];
    if (e[0] != 8)
      return fmt::format("a 16 x 16 fp16 A operand holds {} elements in lane {}, not 8", e[0],
                         lane);
    for (uint32_t i = 0; i < 8; ++i) {
      const uint32_t row = lane / 4 + 8 * (i / 4), col = 2 * (lane % 4) + i % 2 + 8 * ((i / 2) % 2);
      if (e[1 + i] != static_cast<int32_t>(16 * row + col)) {
        std::string got;
        for (int j = 1; j <= 8; ++j) got += fmt::format(" ({}, {})", e[j] / 16, e[j] % 16);
        return fmt::format(
            "a 16 x 16 fp16 A operand's lane {} holds element ({}, {}) where the tensor cores' "
            "layout has ({}, {}); its eight:{}",
            lane, e[1 + i] / 16, e[1 + i] % 16, row, col, got);
      }
    }
  }
  return "";
}

std::string F16Rounding::describe() const {
  return fmt::format(
      "{} values: f16_round {} wrong, the store's conversion {} wrong, float(float16_t(x)) "
      "differs from the rounded value in {}{}",
      inputs, f16_round_wrong, store_wrong, pair_kept,
      first_wrong.empty() ? "" : "; first wrong: " + first_wrong);
}

F16Rounding probe_f16_rounding(Context& ctx) {
  // Every fp16 value and the midpoints and neighbours around it, both signs; the subnormal range
  // and below, 65504..infinity and NaN; then random bit patterns.
  std::vector<uint32_t> in;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    const uint32_t b = f32_to_bits(f16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t next = f32_to_bits(f16_to_f32(static_cast<uint16_t>(h + 1)));
    const float mid = 0.5f * (bits_to_f32(b) + bits_to_f32(next));  // exact: one bit more
    for (uint32_t v : {b, f32_to_bits(mid), f32_to_bits(mid) - 1, f32_to_bits(mid) + 1, b + 1})
      for (uint32_t sign : {0u, 0x80000000u}) in.push_back(v | sign);
  }
  for (uint32_t v : {0x33000000u, 0x33000001u, 0x32FFFFFFu, 0x00000001u, 0x00800000u, 0x477FEFFFu,
                     0x477FF000u, 0x477FFFFFu, 0x7F7FFFFFu, 0x7F800000u})
    for (uint32_t sign : {0u, 0x80000000u}) in.push_back(v | sign);
  std::mt19937 rng(3);
  for (int i = 0; i < 65536; ++i) in.push_back(static_cast<uint32_t>(rng()) & 0xC7FFFFFFu);
  const uint32_t n = static_cast<uint32_t>(in.size());

  Allocator alloc(ctx);
  Kernels kernels(ctx);
  const Kernel& k = kernels.get(Shader::f16_probe, true, NoSpec{});
  const VkDeviceSize io_bytes = VkDeviceSize{n} * 12, h_bytes = (VkDeviceSize{n} * 2 + 3) / 4 * 4;
  Buffer io = alloc.create(io_bytes, false, "fp16 probe");
  Buffer h = alloc.create(h_bytes, false, "fp16 probe halves");
  std::vector<uint32_t> v(static_cast<size_t>(n) * 3, 0);
  std::memcpy(v.data(), in.data(), size_t{n} * 4);
  alloc.upload(io, 0, v.data(), io_bytes);
  const BufRange r[2] = {{io.buf, 0, io_bytes}, {h.buf, 0, h_bytes}};
  run_one_workgroup(ctx, kernels, k, r);
  alloc.download(io, 0, v.data(), io_bytes);
  std::vector<uint16_t> halves(h_bytes / 2);
  alloc.download(h, 0, halves.data(), h_bytes);

  F16Rounding f;
  f.inputs = n;
  auto same = [](uint32_t a, uint32_t b) {  // equal bits, or both NaN
    return a == b || ((a & 0x7FFFFFFFu) > 0x7F800000u && (b & 0x7FFFFFFFu) > 0x7F800000u);
  };
  for (uint32_t i = 0; i < n; ++i) {
    const float x = bits_to_f32(in[i]);
    const uint16_t want_h = f32_to_f16(x);
    const uint32_t want = f32_to_bits(f16_to_f32(want_h));
    const bool round_ok = same(v[n + i], want);
    const bool store_ok =
        halves[i] == want_h || ((want_h & 0x7FFFu) > 0x7C00u && (halves[i] & 0x7FFFu) > 0x7C00u);
    f.f16_round_wrong += !round_ok;
    f.store_wrong += !store_ok;
    f.pair_kept += !same(v[2 * size_t{n} + i], want);
    if ((!round_ok || !store_ok) && f.first_wrong.empty())
      f.first_wrong = fmt::format("{:#010x}: want {:#06x}, f16_round {:#010x}, the store {:#06x}",
                                  in[i], want_h, v[n + i], halves[i]);
  }
  return f;
}

}  // namespace vkllm::vk
