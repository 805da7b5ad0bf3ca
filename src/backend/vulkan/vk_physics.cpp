#include "backend/vulkan/vk_physics.h"

#include <algorithm>
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
    if (!ctx.info().timestamps) fail("vkllm bench --physics: the device has no timestamps");
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
    return kernels.get("physics", 3, 8, {threads, mode, grid_spin_limit(ctx.info())});
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
          dispatch_flat(cb, k, s, {0, 0}, groups);
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
        dispatch_flat(cb, k, s, {syncs, 0}, groups);
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
        dispatch_flat(cb, k, s, {1, words}, sh.groups);
      });
      rows.push_back(
          {sh.what, sh.groups, sh.threads, bytes, us, static_cast<double>(bytes) / (us * 1e3)});
    }
    // The same bytes in 8 stages between grid syncs (a persistent layer's shape).
    const Kernel& k = kernel(256, 3);
    VkDescriptorSet s = set_of(k, bytes);
    const uint32_t staged = cpu ? G : 4 * G;
    const double us = timer.best_us(reps, [&](VkCommandBuffer cb) {
      dispatch_flat(cb, k, s, {8, words}, staged);
    });
    check_sync("staged stream");
    rows.push_back({"stream, 8 stages + syncs", staged, 256, bytes, us,
                    static_cast<double>(bytes) / (us * 1e3)});
    if (bytes >= max_bytes) break;
  }
  return rows;
}

}  // namespace vkllm::vk
