#include "backend/vulkan/vk_physics.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>

#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_ops_internal.h"
#include "backend/vulkan/vk_pipeline.h"
#include "core/error.h"

namespace vkllm::vk {

namespace {

using detail::dispatch_flat;

class Timer {
 public:
  explicit Timer(Context& ctx) : ctx_(ctx) {
    if (!ctx.info().timestamps) fail("vkllm bench: the device has no timestamps");
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = 2;
    VK_CHECK(vkCreateQueryPool(ctx.device(), &qi, nullptr, &pool_));
  }
  ~Timer() { vkDestroyQueryPool(ctx_.device(), pool_, nullptr); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Microseconds of GPU time that `record` takes, the best of `repeats` submits.
  template <class F>
  double best_us(int repeats, F&& record) {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < repeats; ++r) {
      VkCommandBuffer cb = ctx_.begin_once();
      vkCmdResetQueryPool(cb, pool_, 0, 2);
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
      record(cb);
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 1);
      ctx_.submit_and_wait(cb);
      uint64_t t[2] = {0, 0};
      VK_CHECK(vkGetQueryPoolResults(ctx_.device(), pool_, 0, 2, sizeof t, t, 8,
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
      best = std::min(best, static_cast<double>(t[1] - t[0]) * ctx_.info().timestamp_period / 1e3);
    }
    return best;
  }

 private:
  Context& ctx_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
};

}  // namespace

std::vector<PhysicsRow> measure_physics(Context& ctx, const PhysicsOptions& opt) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  Timer timer(ctx);
  const uint32_t G = opt.groups                 ? opt.groups
                     : ctx.info().compute_units ? ctx.info().compute_units
                                                : 2;
  const bool cpu = ctx.info().type == "cpu";
  const uint64_t max_bytes = std::min<uint64_t>(cpu ? 2ull << 20 : 256ull << 20, ctx.max_binding());
  Buffer sync = alloc.create(16, false, "grid sync counters"),
         out = alloc.create(256, false, "out"), w = alloc.create(max_bytes, false, "stream source");
  alloc.fill(sync, 0);
  alloc.fill(w, 0x12345678u);
  auto kernel = [&](uint32_t threads, uint32_t mode) -> const Kernel& {
    return kernels.get(
        Shader::physics, false,
        PhysicsSpec{.threads = threads, .mode = mode, .spin_limit = grid_spin_limit(ctx.info())});
  };
  auto set_of = [&](const Kernel& k, uint64_t bytes) {
    const BufRange r[3] = {{sync.buf, 0, 16}, {w.buf, 0, bytes}, {out.buf, 0, 256}};
    return kernels.make_set(k, r);
  };
  auto check_sync = [&](const char* what) {
    uint32_t c[4] = {0, 0, 0, 0};
    alloc.download(sync, 0, c, 16);
    if (c[2] != 0 || c[0] != 0 || c[1] != 0)
      fail(
          "vkllm bench --physics: {} with {} workgroups: the grid was not resident (counters {} {} "
          "{}): pass a smaller --groups",
          what, G, c[0], c[1], c[2]);
  };
  std::vector<PhysicsRow> rows;
  const int reps = std::max(1, opt.repeats);
  // Dispatch + barrier: n empty dispatches, each behind a compute barrier, of 1 and of G groups.
  const uint32_t n = cpu ? 50 : 400;
  for (uint32_t groups : {1u, G, 8 * G}) {
    const Kernel& k = kernel(256, 0);
    VkDescriptorSet s = set_of(k, 256);
    for (bool barrier : {true, false}) {
      const double us = timer.best_us(reps, [&](VkCommandBuffer cb) {
        for (uint32_t i = 0; i < n; ++i) {
          if (barrier && i) compute_barrier(cb);
          dispatch_flat(cb, k, s, PhysicsPush{0, 0}, groups);
        }
      });
      rows.push_back({barrier ? "empty dispatch + barrier" : "empty dispatch, no barrier", groups,
                      256, 0, us / n, 0});
    }
  }
  // Grid syncs: n syncs in one dispatch of G (and 2G) resident groups.
  for (uint32_t groups : {G, cpu ? G : 2 * G})
    for (uint32_t threads : {256u, 1024u}) {
      if (threads > ctx.info().max_wg_size) continue;
      const Kernel& k = kernel(threads, 1);
      VkDescriptorSet s = set_of(k, 256);
      const uint32_t syncs = cpu ? 20 : 2000;
      const double us = timer.best_us(reps, [&](VkCommandBuffer cb) {
        dispatch_flat(cb, k, s, PhysicsPush{syncs, 0}, groups);
      });
      check_sync("grid sync");
      rows.push_back({"grid sync", groups, threads, 0, us / syncs, 0});
    }
  // Streams: a mat-vec's weight bytes (Llama-3.2-1B k/v, q/o, gate, lm_head sizes), read once.
  for (uint64_t mb : {1ull, 2ull, 8ull, 32ull, 128ull, 256ull}) {
    const uint64_t bytes = std::min<uint64_t>(mb << 20, max_bytes) & ~uint64_t(15);
    const uint32_t words = static_cast<uint32_t>(bytes / 16);
    struct Shape {
      const char* what;
      uint32_t groups, threads;
    };
    const uint32_t wide = std::max<uint32_t>(1, words / (256 * 4));  // 4 words a thread
    for (const Shape& sh :
         {Shape{"stream, ordinary grid", wide, 256}, Shape{"stream, resident grid", G, 1024},
          Shape{"stream, resident grid", cpu ? G : 4 * G, 256}}) {
      if (sh.threads > ctx.info().max_wg_size) continue;
      const Kernel& k = kernel(sh.threads, 2);
      VkDescriptorSet s = set_of(k, bytes);
      const double us = timer.best_us(reps, [&](VkCommandBuffer cb) {
        dispatch_flat(cb, k, s, PhysicsPush{1, words}, sh.groups);
      });
      rows.push_back(
          {sh.what, sh.groups, sh.threads, bytes, us, static_cast<double>(bytes) / (us * 1e3)});
    }
    // The same bytes in 8 stages between grid syncs (a persistent layer's shape).
    const Kernel& k = kernel(256, 3);
    VkDescriptorSet s = set_of(k, bytes);
    const uint32_t staged = cpu ? G : 4 * G;
    const double us = timer.best_us(reps, [&](VkCommandBuffer cb) {
      dispatch_flat(cb, k, s, PhysicsPush{8, words}, staged);
    });
    check_sync("staged stream");
    rows.push_back({"stream, 8 stages + syncs", staged, 256, bytes, us,
                    static_cast<double>(bytes) / (us * 1e3)});
    if (bytes >= max_bytes) break;
  }
  return rows;
}

std::vector<GemmRow> measure_gemm(Context& ctx, int repeats) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  Timer timer(ctx);
  const bool cpu = ctx.info().type == "cpu";
  const int reps = std::max(1, repeats);
  std::vector<GemmRow> rows;
  // The ceiling: 8 multiply-adds a round, pc.n rounds, 4 subgroups a workgroup.
  if (ctx.use_coopmat()) {
    Buffer out = alloc.create(65536 * 4, false, "out");
    const uint32_t groups = 8 * std::max<uint32_t>(1, ctx.info().compute_units), n = 512;
    struct Peak {
      Shader shader;
      const char* what;
      uint32_t k;
      bool ok;
    };
    for (const Peak& p : {Peak{Shader::gemm_peak, "mma peak, int8 16x8x32 -> int32", 32, true},
                          Peak{Shader::gemm_peak_fp16, "mma peak, fp16 16x8x16 -> fp32", 16,
                               ctx.info().coopmat_f16}}) {
      if (!p.ok) continue;
      const Kernel& k = kernels.get(p.shader, false, NoSpec{});
      const BufRange r[1] = {{out.buf, 0, out.size}};
      VkDescriptorSet s = kernels.make_set(k, r);
      const double us = timer.best_us(
          reps, [&](VkCommandBuffer cb) { detail::dispatch(cb, k, s, CountPush{n}, groups); });
      const double ops = 2.0 * 16 * 8 * p.k * 8 * n * 4 * groups;
      rows.push_back({p.what, 0, 0, 0, us, ops / (us * 1e6)});
    }
  }
  // The same ceiling on KHR cooperative matrices (gemm_peak_khr.comp), at the shapes the device
  // lists (DeviceInfo::khr_int8, khr_f16): 8 multiply-adds a round, pc.n rounds, every subgroup
  // of the 128-thread workgroup (the pipeline asks for full subgroups of the device's size).
  if (ctx.use_coopmat_khr()) {
    Buffer out = alloc.create(65536 * 4, false, "out");
    const uint32_t groups = 8 * std::max<uint32_t>(1, ctx.info().compute_units), n = 512;
    const uint32_t subgroups =
        std::max<uint32_t>(1, 128 / std::max<uint32_t>(1, ctx.info().subgroup_size));
    struct Peak {
      Shader shader;
      const char* types;
      CoopmatShape shape;
    };
    for (const Peak& p :
         {Peak{Shader::gemm_peak_khr, "int8 {}x{}x{} -> int32", ctx.info().khr_int8},
          Peak{Shader::gemm_peak_khr_fp16, "fp16 {}x{}x{} -> fp32", ctx.info().khr_f16}}) {
      if (!p.shape) continue;
      const CoopmatShape& sh = p.shape;
      const Kernel& k =
          p.shader == Shader::gemm_peak_khr
              ? kernels.get(p.shader, false, GemmPeakKhrSpec{.m = sh.m, .n = sh.n, .k = sh.k})
              : kernels.get(p.shader, false, GemmPeakKhrFp16Spec{.m = sh.m, .n = sh.n, .k = sh.k});
      const BufRange r[1] = {{out.buf, 0, out.size}};
      VkDescriptorSet s = kernels.make_set(k, r);
      const double us = timer.best_us(
          reps, [&](VkCommandBuffer cb) { detail::dispatch(cb, k, s, CountPush{n}, groups); });
      const double ops = 2.0 * sh.m * sh.n * sh.k * 8 * n * subgroups * groups;
      rows.push_back({"mma peak (KHR), " + fmt::format(fmt::runtime(p.types), sh.m, sh.n, sh.k), 0,
                      0, 0, us, ops / (us * 1e6)});
    }
  }
  // The tiled GEMM at the shapes of a 512-token prefill (weight rows M, tokens N, width K),
  // G = 128: Llama-3.2-1B's k/v, q/o, gate/up, down; Qwen3-0.6B's k/v, q, gate/up, o, down (also
  // Phi-4-mini's k/v); Phi-4-mini's q/o, gate/up, down; one wide square.
  struct Shape {
    uint32_t M, N, K;
  };
  const std::vector<Shape> shapes =
      cpu ? std::vector<Shape>{{128, 64, 256}, {256, 64, 512}}
          : std::vector<Shape>{{512, 512, 2048},  {2048, 512, 2048}, {8192, 512, 2048},
                               {2048, 512, 8192}, {1024, 512, 1024}, {2048, 512, 1024},
                               {3072, 512, 1024}, {1024, 512, 2048}, {1024, 512, 3072},
                               {3072, 512, 3072}, {8192, 512, 3072}, {3072, 512, 8192},
                               {8192, 512, 8192}};
  constexpr uint32_t G = 128;
  // One GEMM's time: the best of the repeats of kPerSubmit recorded back to back.
  auto per_gemm_us = [&](const std::function<void(VkCommandBuffer)>& record) {
    constexpr int kPerSubmit = 8;
    return timer.best_us(reps, [&](VkCommandBuffer cb) {
      for (int i = 0; i < kPerSubmit; ++i) {
        if (i) compute_barrier(cb);
        record(cb);
      }
    }) / kPerSubmit;
  };
  for (const Shape& sh : shapes) {
    const detail::GemmPlan plan = detail::plan_gemm_8da4w(ctx, G, sh.M, false);
    const uint64_t groups = static_cast<uint64_t>(sh.M) * (sh.K / G);
    Buffer qx = alloc.create(static_cast<uint64_t>(sh.N) * sh.K, false, "int8 activations"),
           qp = alloc.create(static_cast<uint64_t>(sh.N) * 8, false, "activation scales"),
           q = alloc.create(static_cast<uint64_t>(sh.M) * sh.K / 2, false, "int4 weights"),
           sc = alloc.create(groups * 4, false, "scales"),
           ws = alloc.create(groups * 4, false, "weight sums"),
           y = alloc.create(static_cast<uint64_t>(sh.N) * sh.M * 4, false, "output");
    alloc.fill(qx, 0x05F9127Eu);
    alloc.fill(qp, 0x3C000003u);  // scale bits ~0.0078, zero point bits (any: timing only)
    alloc.fill(q, 0x9A3C61E7u);
    alloc.fill(sc, 0x3A000000u);
    alloc.fill(ws, 17u);
    const detail::GemmTile tile = plan.tile(sh.M, sh.N);
    const Kernel& k = plan.kernel(kernels, tile);
    const BufRange r[6] = {{qx.buf, 0, qx.size}, {qp.buf, 0, qp.size}, {q.buf, 0, q.size},
                           {sc.buf, 0, sc.size}, {ws.buf, 0, ws.size}, {y.buf, 0, y.size}};
    VkDescriptorSet s = kernels.make_set(k, r);
    const double us = per_gemm_us(
        [&](VkCommandBuffer cb) { plan.record(cb, kernels, s, sh.K, sh.M, 0, sh.M, sh.N, G); });
    const std::string path = plan.id == Shader::linear_8da4w_mm_coopmat ? "cooperative matrix"
                             : plan.id == Shader::linear_8da4w_mm_idot  ? "int8 dot product"
                                                                        : "portable integer";
    rows.push_back(
        {fmt::format("linear_8da4w_mm {}, {} x {} tiles, KC {}", path, tile.bt, tile.bn, tile.kc),
         sh.M, sh.N, sh.K, us, 2.0 * sh.M * sh.N * sh.K / (us * 1e6)});
  }
  // The fp16 linear's tiled GEMM (the fp16 recipe: fp16 activations, weights and output; the
  // module prep_linear takes) at Llama-3.2-1B's and Phi-4-mini's shapes.
  const std::vector<Shape> fshapes = cpu ? std::vector<Shape>{{128, 64, 256}}
                                         : std::vector<Shape>{{2048, 512, 2048},
                                                              {8192, 512, 2048},
                                                              {2048, 512, 8192},
                                                              {3072, 512, 3072},
                                                              {8192, 512, 3072}};
  for (const Shape& sh : fshapes) {
    if (!ctx.use_fp16()) break;
    Buffer x = alloc.create(static_cast<uint64_t>(sh.N) * sh.K * 2, false, "fp16 activations"),
           w = alloc.create(static_cast<uint64_t>(sh.M) * sh.K * 2, false, "fp16 weights"),
           y = alloc.create(static_cast<uint64_t>(sh.N) * sh.M * 2, false, "fp16 output");
    alloc.fill(x, 0x2C1AAC33u);  // halves of ~+-0.06: the sums stay finite
    alloc.fill(w, 0x2A00AA66u);
    const Shader module = detail::float_gemm_module(ctx, false, true, true, sh.K);
    const Kernel& k = kernels.get(module, true, FloatGemmSpec{.x16 = 1, .w16 = 1, .y16 = 1});
    const BufRange r[4] = {
        {x.buf, 0, x.size}, {w.buf, 0, w.size}, {w.buf, 0, w.size}, {y.buf, 0, y.size}};
    VkDescriptorSet s = kernels.make_set(k, r);
    const double us = per_gemm_us([&](VkCommandBuffer cb) {
      detail::dispatch_flat(cb, k, s, GemmPush{sh.K, sh.M, 0, sh.M, sh.N, 0},
                            detail::float_gemm_groups(sh.M, sh.N));
    });
    rows.push_back({fmt::format("linear fp16 ({}), {} x {} tiles", kernel_decl(module).name,
                                detail::kFloatGemmTile, detail::kFloatGemmTile),
                    sh.M, sh.N, sh.K, us, 2.0 * sh.M * sh.N * sh.K / (us * 1e6)});
  }
  return rows;
}

std::vector<MatvecRow> measure_matvec(Context& ctx, int repeats) {
  Allocator alloc(ctx);
  Kernels kernels(ctx);
  Timer timer(ctx);
  const bool cpu = ctx.info().type == "cpu";
  const int reps = std::max(1, repeats);
  struct Shape {
    const char* what;
    uint32_t N, K, G;
  };
  const std::vector<Shape> shapes =
      cpu ? std::vector<Shape>{{"toy q/k/v", 384, 256, 128}, {"toy lm_head", 2048, 256, 32}}
          : std::vector<Shape>{{"Llama q/k/v", 3072, 2048, 128},
                               {"Llama o", 2048, 2048, 128},
                               {"Llama gate", 8192, 2048, 128},
                               {"Llama down", 2048, 8192, 128},
                               {"Llama lm_head", 128256, 2048, 128},
                               {"Qwen3 q/k/v", 4096, 1024, 128},
                               {"Qwen3 gate", 3072, 1024, 128},
                               {"Qwen3 down", 1024, 3072, 128},
                               {"Qwen3 lm_head (G 32)", 151936, 1024, 32},
                               {"Phi-4-mini q/k/v", 5120, 3072, 128},
                               {"Phi-4-mini gate", 8192, 3072, 128},
                               {"Phi-4-mini down", 3072, 8192, 128},
                               {"Phi-4-mini lm_head (G 32)", 200064, 3072, 32}};
  const bool idot = ctx.use_int_dot();
  const uint32_t sg = std::max<uint32_t>(1, ctx.info().subgroup_size);
  const uint32_t cu = std::max<uint32_t>(1, ctx.info().compute_units);
  std::vector<MatvecRow> rows;
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  auto next = [&]() {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return static_cast<uint32_t>(seed >> 16);
  };
  // A streamed kernel's settings: units a batch, workgroups a compute unit (0: the plan's) and
  // batches in flight; sweep adds every combination a unit's registers allow.
  struct Try {
    uint32_t depth, groups_per_cu, batches;
  };
  auto sweep = [](std::vector<Try>& tries, uint32_t bpg) {
    for (uint32_t b : {1u, 2u})
      for (uint32_t d : {1u, 2u, 4u, 8u})
        for (uint32_t g : {1u, 2u, 4u})
          if (d * bpg <= 32) tries.push_back({d, g, b});
  };
  auto with = [&](detail::MatvecPlan p, const Try& t) {
    p.depth = t.depth;
    p.batches = t.batches;
    if (t.groups_per_cu) p.groups = cu * t.groups_per_cu;
    return p;
  };
  for (const Shape& sh : shapes) {
    const uint64_t ng = static_cast<uint64_t>(sh.N) * (sh.K / sh.G), qb = uint64_t(sh.N) * sh.K / 2;
    const uint64_t wbytes = qb + ng * 8;
    if (qb > ctx.max_binding()) continue;
    // Copies of the weights that together pass 256 MiB (the L2 holds none of them in turn).
    const uint32_t copies =
        cpu ? 1 : static_cast<uint32_t>(std::clamp<uint64_t>((256ull << 20) / wbytes + 1, 1, 32));
    Buffer qx = alloc.create(sh.K, false, "int8 row"), qp = alloc.create(8, false, "row scale"),
           y = alloc.create(uint64_t(sh.N) * 4, false, "output");
    std::vector<Buffer> q, sc, ws;
    for (uint32_t c = 0; c < copies; ++c) {
      q.push_back(alloc.create(qb, false, "int4 weights"));
      sc.push_back(alloc.create(ng * 4, false, "scales"));
      ws.push_back(alloc.create(ng * 4, false, "weight sums"));
      alloc.fill(q.back(), 0x9A3C61E7u);
      alloc.fill(sc.back(), 0x3A000000u);
      alloc.fill(ws.back(), 17u);
    }
    {  // random inputs in copy 0, for the comparison of the kernels' bits
      std::vector<uint32_t> w(qb / 4), s(ng), z(ng), x(sh.K / 4);
      for (auto& v : w) v = next();
      for (auto& v : s) v = 0x3A000000u | (next() & 0x7FFFFFu);
      for (auto& v : z) v = (next() % 4096) - 2048;
      for (auto& v : x) v = next();
      alloc.upload(q[0], 0, w.data(), qb);
      alloc.upload(sc[0], 0, s.data(), ng * 4);
      alloc.upload(ws[0], 0, z.data(), ng * 4);
      alloc.upload(qx, 0, x.data(), sh.K);
      const uint32_t p[2] = {0x3C23D70Au, static_cast<uint32_t>(-37)};  // 0.01, zp -37
      alloc.upload(qp, 0, p, 8);
    }
    auto sets_of = [&](const Kernel& k) {
      std::vector<VkDescriptorSet> sets;
      for (uint32_t c = 0; c < copies; ++c) {
        const BufRange r[6] = {{qx.buf, 0, qx.size},       {qp.buf, 0, qp.size},
                               {q[c].buf, 0, q[c].size},   {sc[c].buf, 0, sc[c].size},
                               {ws[c].buf, 0, ws[c].size}, {y.buf, 0, y.size}};
        sets.push_back(kernels.make_set(k, r));
      }
      return sets;
    };
    const MatvecPush push = {sh.K, sh.N, 0, sh.N, 1, sh.G, 0};
    auto time = [&](const Kernel& k, const std::vector<VkDescriptorSet>& sets, uint32_t groups,
                    const auto& pc) {
      constexpr int kPerSubmit = 16;
      auto record = [&](VkCommandBuffer cb) {
        for (int i = 0; i < kPerSubmit; ++i) {
          if (i) compute_barrier(cb);
          detail::dispatch_flat(cb, k, sets[i % copies], pc, groups);
        }
      };
      // A warm-up of at least 100 ms of the same work first: a GPU that sat idle while the host
      // made the inputs runs its first submits at a lower clock (the H200: the same kernel 2.3x
      // slower right after an upload of random weights than in a decode step).
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(cpu ? 0 : 100))
        timer.best_us(1, record);
      return timer.best_us(reps, record) / kPerSubmit;
    };
    auto output = [&]() {
      std::vector<uint32_t> o(sh.N);
      alloc.download(y, 0, o.data(), uint64_t(sh.N) * 4);
      return o;
    };
    auto run_once = [&](const Kernel& k, const std::vector<VkDescriptorSet>& sets, uint32_t groups,
                        const auto& pc) {
      alloc.fill(y, 0xFFFFFFFFu);
      timer.best_us(1,
                    [&](VkCommandBuffer cb) { detail::dispatch_flat(cb, k, sets[0], pc, groups); });
      return output();
    };
    // The old kernel, as prep_linear records it.
    const detail::DecodeSplit split = detail::decode_split(ctx, sh.K, sh.N);
    const uint32_t wg = detail::decode_matvec_wg(ctx),
                   R1 = std::max<uint32_t>(1, ctx.matvec_rows(sh.N) * wg / 64 / split.parts);
    const Kernel& old =
        kernels.get(idot ? Shader::linear_8da4w_b32_idot : Shader::linear_8da4w_b32, false,
                    Matvec8da4wSpec{.tt = 1, .bpl = split.bpl, .parts = split.parts, .wg = wg});
    const auto old_sets = sets_of(old);
    MatvecPush old_push = push;
    old_push.R = R1;
    const std::vector<uint32_t> want =
        run_once(old, old_sets, detail::ceil_div(sh.N, R1), old_push);
    const double old_us = time(old, old_sets, detail::ceil_div(sh.N, R1), old_push);
    rows.push_back({"linear_8da4w matvec_decode", sh.what, sh.N, sh.K, sh.G, old_us,
                    static_cast<double>(wbytes) / (old_us * 1e3), true});
    // The int4 weight-only kernels (float activations, the same nibbles and scales): the old
    // kernel as prep_linear records it, then linear_q4w_mv; `same` here: the outputs agree
    // (their sums run in different orders, so not to the bit).
    {
      std::vector<float> xf(sh.K);
      for (auto& v : xf) v = static_cast<float>(static_cast<int>(next() % 2001) - 1000) / 1000.0f;
      Buffer xb = alloc.create(uint64_t(sh.K) * 4, false, "float row");
      alloc.upload(xb, 0, xf.data(), xb.size);
      auto q4w_sets = [&](const Kernel& k) {
        std::vector<VkDescriptorSet> sets;
        for (uint32_t c = 0; c < copies; ++c) {
          const BufRange r[4] = {{xb.buf, 0, xb.size},
                                 {q[c].buf, 0, q[c].size},
                                 {sc[c].buf, 0, sc[c].size},
                                 {y.buf, 0, y.size}};
          sets.push_back(kernels.make_set(k, r));
        }
        return sets;
      };
      const uint64_t qbytes = qb + ng * 4;
      const uint32_t R = ctx.matvec_rows(sh.N);
      const Kernel& q4 = kernels.get(Shader::linear_q4w, false, Q4wSpec{.tt = 1});
      const auto q4_sets = q4w_sets(q4);
      MatvecPush q4_push = push;
      q4_push.R = R;
      const auto q4_out = run_once(q4, q4_sets, detail::ceil_div(sh.N, R), q4_push);
      const double q4_us = time(q4, q4_sets, detail::ceil_div(sh.N, R), q4_push);
      rows.push_back({"linear_q4w (old)", sh.what, sh.N, sh.K, sh.G, q4_us,
                      static_cast<double>(qbytes) / (q4_us * 1e3), true});
      const detail::MatvecPlan qp4 = detail::plan_matvec(ctx, sh.K, sh.N, sh.G, {1, 0}, true, 1);
      // The plan's settings, and on GPUs a sweep of depths, grids and batches.
      std::vector<Try> q4_tries = {{qp4.depth, 0, qp4.batches}};
      if (!cpu && qp4.on) sweep(q4_tries, qp4.bpg);
      for (const Try& t : qp4.on ? q4_tries : std::vector<Try>{}) {
        const detail::MatvecPlan p = with(qp4, t);
        const Kernel& k = kernels.get(Shader::linear_q4w_mv, false, p.spec(false, false));
        const auto sets = q4w_sets(k);
        const uint32_t groups = p.grid(sh.N, sg);
        const auto got = run_once(k, sets, groups, push);
        double err = 0, ref = 0;
        for (uint32_t i = 0; i < sh.N; ++i) {
          float a, b;
          std::memcpy(&a, &got[i], 4);
          std::memcpy(&b, &q4_out[i], 4);
          err += (double(a) - b) * (double(a) - b);
          ref += double(b) * b;
        }
        const double us = time(k, sets, groups, push);
        rows.push_back(
            {fmt::format("linear_q4w_mv {} x {} units, {} groups", p.batches, p.depth, groups),
             sh.what, sh.N, sh.K, sh.G, us, static_cast<double>(qbytes) / (us * 1e3),
             err <= 1e-10 * ref});
      }
    }
    const detail::MatvecPlan base = detail::plan_matvec(ctx, sh.K, sh.N, sh.G, split, false, 1);
    if (!base.on) continue;
    // The plan's own settings, and for the wide mat-vecs (the lm_heads) a sweep of depths and
    // grids.
    std::vector<Try> tries = {{base.depth, 0, base.batches}};
    if (!cpu && sh.N >= 32768) sweep(tries, base.bpg);
    for (const Try& t : tries) {
      const detail::MatvecPlan p = with(base, t);
      const Kernel& k = kernels.get(idot ? Shader::linear_8da4w_mv_idot : Shader::linear_8da4w_mv,
                                    false, p.spec(false));
      const auto sets = sets_of(k);
      const uint32_t groups = p.grid(sh.N, sg);
      const MatvecNormPush mv_push = {push.K, push.Nc, push.n0, push.N, push.T,
                                      push.G, push.R,  0.0f};  // (eps: linear_8da4w_mv_norm's)
      const auto got = run_once(k, sets, groups, mv_push);
      const bool same = got == want;
      const double us = time(k, sets, groups, mv_push);
      rows.push_back(
          {fmt::format("linear_8da4w_mv {} x {} units, {} groups", p.batches, p.depth, groups),
           sh.what, sh.N, sh.K, sh.G, us, static_cast<double>(wbytes) / (us * 1e3), same});
    }
  }
  return rows;
}

}  // namespace vkllm::vk
