#include "backend/vulkan/vulkan_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_fused.h"
#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_memory_plan.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_pipeline.h"
#include "backend/vulkan/vk_profile.h"
#include "backend/vulkan/vulkan_loaded.h"
#include "core/device_error.h"
#include "core/error.h"
#include "ir/kv_ring.h"

namespace vkllm {

namespace {

using namespace vk;

// A batched executor's pool and rows (docs/ir.md "Batched forward").
struct BatchGeometry {
  int num_blocks = 0, block_tokens = 0, max_rows = 0;
  int window_blocks = 0;  // the window pool's blocks (0: one pool for every cache)
};

class VulkanExecutor final : public Executor {
 public:
  // batch: a batched executor (forward_batch only; the KV caches a pool of blocks; forwards of
  // several rows unfused, of one row the decode plan's mat-vec runs and chains around the batched
  // attention), else a single sequence's.
  explicit VulkanExecutor(std::shared_ptr<VulkanLoaded> loaded,
                          const BatchGeometry* batch = nullptr)
      : ld_(std::move(loaded)),
        p_(ld_->p),
        w_(ld_->w),
        ctx_(ld_->ctx.get()),
        alloc_(*ctx_),
        kernels_(*ctx_),
        bufs_(ld_->bufs),
        max_t_(ld_->max_t),
        ring_(p_) {
    const auto t_start = std::chrono::steady_clock::now();
    corrupt_family_ = ctx_->tuning().corrupt_op;
    // Tuning::fence_spin's rule: poll on GPUs, sleep on CPU devices (whose cores do the work).
    spin_fences_ = ctx_->tuning().fence_spin == 1 ||
                   (ctx_->tuning().fence_spin < 0 && ctx_->info().type != "cpu");
    unfused_ = corrupt_family_;
    if (batch) {
      batch_geo_ = *batch;
      check_batch_pool(batch->num_blocks, batch->block_tokens, batch->max_rows);
      cache_group_ = batch_cache_groups(p_, batch->window_blocks);
      if (batch->max_rows > max_t_)
        fail("batch executor: {} rows a forward; this device and model take at most {}",
             batch->max_rows, max_t_);
      max_t_ = batch->max_rows;
      unfused_ = "last_row";
      const uint64_t stride = (static_cast<uint64_t>(p_.max_ctx) + batch->block_tokens - 1) /
                              static_cast<uint64_t>(batch->block_tokens);
      const uint64_t M = static_cast<uint64_t>(max_t_);
      // The window pool's rows view (rows, tables) after the rows, outputs and tables, at an
      // offset every device accepts for a storage buffer binding (256 bytes at most).
      if (batch->window_blocks > 0) window_words_ = ((5 + stride) * M * 4 + 255) / 256 * 64;
      batch_rows_ = alloc_.create(
          (window_words_ > 0 ? window_words_ + (4 + stride) * M : (5 + stride) * M) * 4, true,
          "batch rows and block tables");
    }
    // A single sequence's forward (and submit of decode steps) writes at most the tokens the
    // sliding layers' rings keep the keys for (ir/kv_ring.h); a batch's caches are its pool.
    const int ring_t = batch ? p_.max_ctx : ring_forward_tokens(p_);
    max_t_ = std::min(max_t_, ring_t);
    const bool fusion = !ctx_->options().no_fusion && !batch;
    // Two decode plans where the chains take the attention as a stage: that one up to the position
    // chain_attention_until, the plan with the attention in its own dispatch from there (prepared
    // on its first use: most generations never reach it, and its pipelines would add seconds to
    // a load on a cold driver cache).
    const Tuning& tune = ctx_->tuning();
    std::vector<FusedRun> runs =
        ctx_->options().no_fusion
            ? std::vector<FusedRun>{}
            : find_fused_runs(p_, ctx_->info(), tune, true, /*paged=*/batch != nullptr);
    runs_long_ = fusion ? find_fused_runs(p_, ctx_->info(), tune, false) : std::vector<FusedRun>{};
    if (runs_long_.size() == runs.size()) runs_long_.clear();  // no attention stage: one plan
    // A batched executor's forwards take the attention runs (the batched kernels) whatever their
    // rows: the unfused plan's, and the one-row plan's beside its mat-vec runs.
    const std::vector<FusedRun> prefill_runs = ctx_->options().no_fusion
                                                   ? std::vector<FusedRun>{}
                                                   : find_prefill_runs(p_, *ctx_, batch != nullptr);
    if (batch && !runs.empty()) {
      runs.insert(runs.end(), prefill_runs.begin(), prefill_runs.end());
      std::sort(runs.begin(), runs.end(),
                [](const FusedRun& a, const FusedRun& b) { return a.first < b.first; });
      for (size_t i = 1; i < runs.size(); ++i)
        if (runs[i].first <= runs[i - 1].last)
          fail("batch executor: fused runs '{}' and '{}' overlap", runs[i - 1].pattern,
               runs[i].pattern);
    }
    allocate({&runs, &runs_long_, &prefill_runs});
    step_ = alloc_.create(16, false, "step parameters");
    step_host_ = alloc_.create(16, true, "step parameters (host)");
    // Greedy steps per submit: Tuning::decode_batch (1: one step per submit); one step per
    // submit while profiling (the profile times the steps of one forward).
    batch_ = static_cast<int>(std::clamp<uint32_t>(tune.decode_batch, 1, 256));
    const bool profiling = ctx_->options().profile && ctx_->info().timestamps;
    if (profiling) batch_ = 1;
    if (ring_t < p_.max_ctx) batch_ = std::min(batch_, ring_t);
    ahead_ = tune.constrained_ahead > 0
                 ? static_cast<int>(std::min<uint32_t>(tune.constrained_ahead, 65536))
                 : kConstrainedAhead;
    batch_tokens_ = alloc_.create(static_cast<uint64_t>(batch_) * 4, true, "greedy batch tokens");
    env_ = std::make_unique<OpEnv>(OpEnv{*ctx_, kernels_, alloc_, p_, max_t_,
                                         [this](int32_t t) -> const Buffer& {
                                           if (!bufs_[t].buf)
                                             fail("program: tensor {} has no device buffer",
                                                  p_.tensors[t].name);
                                           return bufs_[t];
                                         },
                                         [this](int32_t t) { return w_.weight(p_, t); }, step_});
    OpEnv& env = *env_;
    env.tokens = batch_tokens_;
    env.unfused_family = unfused_;
    if (batch) {
      env.batch_rows = batch_rows_;
      env.batch_out_offset = static_cast<uint32_t>(4 * max_t_);
      env.batch_block_tokens = static_cast<uint32_t>(batch->block_tokens);
      env.batch_window_offset = window_words_ * 4;
      env.batch_cache_group = cache_group_;
    }
    const uint64_t scratch_t = std::max<uint64_t>(max_t_, OpEnv::kScratchMinTokens);
    for (const Op& op : p_.ops)
      env.act_q_bytes = std::max(env.act_q_bytes, act_quant_bytes_per_token(p_, op) * scratch_t);
    for (const Op& op : p_.ops) ops_.push_back(prepare_op(env, op));
    // The plans: each records its fused runs as one step each (vk_fused.h: the prefill's for
    // forwards of several tokens, the decode step's for one-token forwards) and the other ops
    // alone.
    plan_steps(prefill_, prefill_runs, false);
    if (!batch || !runs.empty()) plan_steps(decode_[0], runs, true);
    chain_flag_at_ = batch ? 4 * static_cast<uint64_t>(max_t_) : 4;
    if (!runs_long_.empty()) short_until_ = chain_attention_until(p_, ctx_->info(), tune);
    chain_clock_ = env.chain_clock;
    chain_sync_ = env.chain_sync;
    env.kernels.wait_all();  // (the ops' pipelines compiled meanwhile, a thread each)
    if (ctx_->options().profile) {
      const PipelineCacheStats pc = ctx_->pipeline_cache_stats();
      std::fprintf(stderr,
                   "vkllm: vulkan executor: %zu ops prepared in %.0f ms (pipelines, buffers); the "
                   "device's pipelines so far: %u in %.0f ms, %u found in the pipeline cache\n",
                   ops_.size(), ms_between(t_start, std::chrono::steady_clock::now()), pc.pipelines,
                   pc.pipeline_ms, pc.hits);
    }
    ctx_->save_pipeline_cache();  // now (and at teardown if changed): a killed process keeps them
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = ctx_->queue_family();
    VK_CHECK(vkCreateCommandPool(ctx_->device(), &pci, nullptr, &pool_));
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 8;
    VkCommandBuffer cbs[8];
    VK_CHECK(vkAllocateCommandBuffers(ctx_->device(), &ai, cbs));
    cb_ = cbs[0];
    logits_cb_ = cbs[7];
    for (int pl = 0; pl < 2; ++pl) {
      decode_cb_[pl][0] = cbs[1 + 3 * pl];
      decode_cb_[pl][1] = cbs[2 + 3 * pl];
      batch_cb_[pl].assign(static_cast<size_t>(batch_) + 1, VK_NULL_HANDLE);
      batch_cb_[pl][static_cast<size_t>(batch_)] = cbs[3 + 3 * pl];
      batch_recorded_[pl].assign(static_cast<size_t>(batch_) + 1, false);
    }
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_CHECK(vkCreateFence(ctx_->device(), &fci, nullptr, &fence_));
    if (profiling) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = static_cast<uint32_t>(p_.ops.size() + 1);
      VK_CHECK(vkCreateQueryPool(ctx_->device(), &qi, nullptr, &queries_));
    }
    held_ = alloc_.device_bytes();
    usage_hold(held_);
    usage_device(ctx_->info().name, ctx_->info().driver);
  }

  ~VulkanExecutor() override {
    usage_release(held_);
    VkDevice d = ctx_->device();
    vkDeviceWaitIdle(d);
    if (!corrupt_family_.empty())
      std::fprintf(stderr,
                   "vkllm: VKLLM_TEST_CORRUPT_OP=%s zeroed %zu op outputs in recorded forwards\n",
                   corrupt_family_.c_str(), n_corrupted_);
    print_chain_clock(alloc_, chain_clock_);
    if (queries_) {
      print_profile();
      vkDestroyQueryPool(d, queries_, nullptr);
    }
    vkDestroyFence(d, fence_, nullptr);
    vkDestroyCommandPool(d, pool_, nullptr);
  }

  const char* name() const override { return "vulkan"; }

  int32_t forward(const int32_t* ids, int T, int pos, float* logits_out) override {
    if (T < 1) fail("forward needs at least one token");
    if (pos < 0 || pos + T > p_.max_ctx)
      fail("context overflow: positions {}..{} exceed the context length {}", pos, pos + T - 1,
           p_.max_ctx);
    for (auto& op : ops_) op->check(ids, T);
    int32_t next = 0;
    for (int s = 0; s < T; s += max_t_) {
      const int n = std::min(max_t_, T - s);
      next = run_chunk(ids + s, n, pos + s, s + n == T ? logits_out : nullptr, s + n == T);
    }
    ring_.wrote(pos, T);
    return next;
  }

  // The last forward's logits, still in the logits tensor's buffer: copied to the readback by a
  // command buffer of its own (recorded on first use).
  void last_logits(float* out) override {
    if (!logits_recorded_) {
      VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
      VK_CHECK(vkBeginCommandBuffer(logits_cb_, &bi));
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
      vkCmdPipelineBarrier(logits_cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
      VkBufferCopy lg{0, 16, logits_n_ * 4};
      vkCmdCopyBuffer(logits_cb_, bufs_[p_.logits].buf, readback_.buf, 1, &lg);
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(logits_cb_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &mb, 0, nullptr, 0, nullptr);
      VK_CHECK(vkEndCommandBuffer(logits_cb_));
      logits_recorded_ = true;
    }
    submit_and_wait(logits_cb_);
    std::memcpy(out, static_cast<const uint8_t*>(readback_.mapped) + 16, logits_n_ * 4);
  }

  // A batched forward (BatchExecutor::forward): the rows buffer written, the prefill plan over T
  // rows recorded with n_out output rows, the tokens (and logits) read back.
  void forward_batch(const BatchForward& b) {
    check_batch_forward(b, batch_geo_.num_blocks, batch_geo_.block_tokens, batch_geo_.max_rows,
                        p_.max_ctx, batch_geo_.window_blocks);
    for (auto& op : ops_) op->check(b.ids, b.T);
    const int BT = batch_geo_.block_tokens;
    const uint32_t M = static_cast<uint32_t>(max_t_), tables = 5 * M;
    auto* w = static_cast<uint32_t*>(batch_rows_.mapped);
    std::vector<int32_t> last(static_cast<size_t>(b.n_seqs), 0);
    for (int t = 0; t < b.T; ++t)
      last[static_cast<size_t>(b.seq[t])] = std::max(last[static_cast<size_t>(b.seq[t])], b.pos[t]);
    const uint64_t table_words = static_cast<uint64_t>(b.n_seqs) * b.table_stride;
    const uint64_t room = (window_words_ > 0 ? window_words_ : batch_rows_.size / 4) - tables;
    if (table_words > room)
      fail("batch forward: block tables of {} words exceed the executor's {}", table_words, room);
    for (int t = 0; t < b.T; ++t) {
      const int s = b.seq[t], p = b.pos[t];
      const int64_t base = static_cast<int64_t>(s) * b.table_stride;
      w[4 * t] = static_cast<uint32_t>(p);
      w[4 * t + 1] = tables + static_cast<uint32_t>(base);
      w[4 * t + 2] = static_cast<uint32_t>(last[static_cast<size_t>(s)]);
      w[4 * t + 3] = static_cast<uint32_t>(b.block_table[base + p / BT] * BT + p % BT);
      if (window_words_ > 0) {  // the window pool's view: its table offsets from its own start
        uint32_t* v = w + window_words_;
        v[4 * t] = w[4 * t];
        v[4 * t + 1] = 4 * M + static_cast<uint32_t>(base);
        v[4 * t + 2] = w[4 * t + 2];
        v[4 * t + 3] = static_cast<uint32_t>(b.window_table[base + p / BT] * BT + p % BT);
      }
    }
    for (int i = 0; i < b.n_out; ++i) w[4 * M + i] = static_cast<uint32_t>(b.out_rows[i]);
    std::memcpy(w + tables, b.block_table, table_words * 4);
    if (window_words_ > 0) std::memcpy(w + window_words_ + 4 * M, b.window_table, table_words * 4);
    std::memcpy(bufs_[p_.input_ids].mapped, b.ids, static_cast<size_t>(b.T) * 4);
    env_->batch_out = static_cast<uint32_t>(b.n_out);
    const uint64_t logits_bytes = static_cast<uint64_t>(b.n_out) * logits_n_ * 4;
    if (b.logits && logits_rb_.size < logits_bytes)
      logits_rb_ = alloc_.create(static_cast<uint64_t>(max_t_) * logits_n_ * 4, true,
                                 "batch logits readback", true);
    submit_and_wait(batch_command_buffer(b.T, b.n_out, b.logits != nullptr));
    Plan& plan = batch_plan(b.T);
    if (&plan == &decode_[0]) check_chains();
    if (queries_) collect_plan_profile(plan, *ctx_, queries_);
    std::memcpy(b.next_tokens, readback_.mapped, static_cast<size_t>(b.n_out) * 4);
    if (b.logits) std::memcpy(b.logits, logits_rb_.mapped, logits_bytes);
  }
  // A batched forward's plan: the decode plan for one row where it has fused runs, else the
  // unfused plan.
  Plan& batch_plan(int T) { return T == 1 && !decode_[0].steps.empty() ? decode_[0] : prefill_; }
  // The command buffer of a batched forward of T rows and n_out output rows (with or without the
  // logits copy), recorded on its first use and replayed: everything that changes between
  // forwards reaches the shaders through the rows and ids buffers. The last 16 shapes are kept.
  VkCommandBuffer batch_command_buffer(int T, int n_out, bool logits) {
    const uint64_t key =
        (static_cast<uint64_t>(T) << 33) | (static_cast<uint64_t>(n_out) << 1) | (logits ? 1u : 0u);
    for (auto it = batch_cbs_.begin(); it != batch_cbs_.end(); ++it)
      if (it->first == key) {
        batch_cbs_.splice(batch_cbs_.begin(), batch_cbs_, it);
        return it->second;
      }
    VkCommandBuffer cb = VK_NULL_HANDLE;
    if (batch_cbs_.size() >= 16) {
      cb = batch_cbs_.back().second;
      batch_cbs_.pop_back();
      VK_CHECK(vkResetCommandBuffer(cb, 0));
    } else {
      VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      VK_CHECK(vkAllocateCommandBuffers(ctx_->device(), &ai, &cb));
    }
    env_->batch_out = static_cast<uint32_t>(n_out);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VK_CHECK(vkBeginCommandBuffer(cb, &bi));
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_HOST_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                         &mb, 0, nullptr, 0, nullptr);
    Plan& plan = batch_plan(T);
    if (queries_) {
      vkCmdResetQueryPool(cb, queries_, 0, static_cast<uint32_t>(plan.steps.size() + 1));
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    record_steps(cb, plan, T);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    VkBufferCopy ids{0, 0, static_cast<VkDeviceSize>(n_out) * 4};
    vkCmdCopyBuffer(cb, bufs_[p_.next_token].buf, readback_.buf, 1, &ids);
    if (&plan == &decode_[0]) copy_chain_flag(cb);
    if (logits) {
      VkBufferCopy lg{0, 0, static_cast<VkDeviceSize>(n_out) * logits_n_ * 4};
      vkCmdCopyBuffer(cb, bufs_[p_.logits].buf, logits_rb_.buf, 1, &lg);
    }
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, nullptr, 0, nullptr);
    VK_CHECK(vkEndCommandBuffer(cb));
    batch_cbs_.emplace_front(key, cb);
    return cb;
  }
  const BatchGeometry& batch_geometry() const { return batch_geo_; }

 private:
  // The activations share buffers as the memory planner says (vk_memory_plan.h); caches and the
  // input have one each (the weights are the loaded program's).
  void allocate(const std::vector<const std::vector<FusedRun>*>& plans) {
    const uint64_t pool_rows = static_cast<uint64_t>(batch_geo_.num_blocks) *
                               static_cast<uint64_t>(batch_geo_.block_tokens);
    const uint64_t window_rows = static_cast<uint64_t>(batch_geo_.window_blocks) *
                                 static_cast<uint64_t>(batch_geo_.block_tokens);
    n_slots_ = allocate_program_buffers(alloc_, p_, plans, unfused_, static_cast<uint64_t>(max_t_),
                                        pool_rows, bufs_, window_rows, cache_group_);
    if (!bufs_[p_.next_token].buf)
      fail("program: no op writes next_token {}", p_.tensors[p_.next_token].name);
    if (!bufs_[p_.logits].buf) fail("program: no op writes logits {}", p_.tensors[p_.logits].name);
    if (p_.tensors[p_.logits].dtype != DType::F32 || p_.tensors[p_.logits].shape[0] != 1)
      fail("program: logits {} must be f32 [1, vocab]", p_.tensors[p_.logits].name);
    logits_n_ = static_cast<uint64_t>(p_.tensors[p_.logits].shape.back());
    readback_ = alloc_.create(std::max<uint64_t>(logits_n_, static_cast<uint64_t>(max_t_)) * 4 + 16,
                              true, "readback buffer", true);
  }

  // One submit: T tokens at positions pos.. . A one-token forward (a decode step) replays a
  // command buffer recorded on its first use (one with the logits read back, one without): the
  // position reaches the shaders through the step buffer, not through the recording.
  int32_t run_chunk(const int32_t* ids, int T, int pos, float* logits_out, bool last) {
    std::memcpy(bufs_[p_.input_ids].mapped, ids, static_cast<size_t>(T) * 4);
    set_step(pos);
    VkCommandBuffer cb = cb_;
    const int pl = T == 1 ? decode_plan(pos, 1) : 0;  // (a prefill chunk needs no decode plan)
    Plan& plan = T == 1 ? decode_[pl] : prefill_;
    if (T == 1 && last) {
      const int v = logits_out ? 1 : 0;
      cb = decode_cb_[pl][v];
      if (!decode_recorded_[pl][v]) {
        record(cb, plan, 1, true, logits_out != nullptr, 0);
        decode_recorded_[pl][v] = true;
      }
    } else {
      VK_CHECK(vkResetCommandBuffer(cb_, 0));
      record(cb_, plan, T, last, logits_out != nullptr,
             VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
    }
    submit_and_wait(cb);
    if (queries_) collect_plan_profile(plan, *ctx_, queries_);
    if (!last) return 0;
    if (T == 1) check_chains();
    int32_t next;
    std::memcpy(&next, readback_.mapped, 4);
    if (logits_out)
      std::memcpy(logits_out, static_cast<const uint8_t*>(readback_.mapped) + 16, logits_n_ * 4);
    return next;
  }

  // A plan's steps (fused runs rs, the other ops alone) in their own order; held: the tensor the
  // int8 scratch holds before each (a run's FusedRun::scratch_in; checked for an op alone).
  void plan_steps(Plan& plan, std::vector<FusedRun> rs, bool decode) {
    int32_t held = -1;
    for (size_t k = 0, r = 0; k < ops_.size();) {
      const PreparedOp* done = nullptr;
      if (r < rs.size() && rs[r].first == k) {
        rs[r].scratch_in = held;
        fused_.push_back(prepare_fused(*env_, rs[r]));
        done = fused_.back().get();
        plan.steps.push_back(
            {k, rs[r].last, fused_.back().get(),
             fmt::format("{} {}", rs[r].pattern, profile_widths(p_, rs[r].first, rs[r].last))});
        k = rs[r++].last + 1;
      } else {
        check_scratch(*env_, k, held);
        done = ops_[k].get();
        plan.steps.push_back({k, k, ops_[k].get(), profile_key(p_, k, ops_[k]->fused_into_next)});
        ++k;
      }
      if (done->quantizes >= 0) held = done->quantizes;
    }
    plan_barriers(plan, decode);
  }

  // The decode plan for steps at positions pos .. pos + n - 1: 0 (the chains' attention stages)
  // while they all lie below short_until_, else 1 (the attention in its own dispatch), prepared
  // here on its first use.
  int decode_plan(int pos, int n) {
    if (runs_long_.empty() || pos + n <= short_until_) return 0;
    if (decode_[1].steps.empty()) {
      const uint64_t before = alloc_.device_bytes();
      plan_steps(decode_[1], runs_long_, true);
      chain_clock_ = env_->chain_clock;
      const uint64_t more = alloc_.device_bytes() - before;
      held_ += more;
      usage_hold(more);
    }
    return 1;
  }

  // The whole forward of T tokens (plan: prefill_, or a decode plan for one token): the step
  // parameters copied in, every op (with the planned barriers), then (last chunk) next_token and
  // optionally the logits copied to the readback.
  void record(VkCommandBuffer cb, Plan& plan, int T, bool last, bool logits,
              VkCommandBufferUsageFlags flags) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = flags;
    VK_CHECK(vkBeginCommandBuffer(cb, &bi));
    VkBufferCopy step_copy{0, 0, 16};
    vkCmdCopyBuffer(cb, step_host_.buf, step_.buf, 1, &step_copy);
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    if (queries_) {
      const uint32_t nq = static_cast<uint32_t>(plan.steps.size() + 1);
      vkCmdResetQueryPool(cb, queries_, 0, nq);
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    record_steps(cb, plan, T);
    if (last) {
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                           0, 1, &mb, 0, nullptr, 0, nullptr);
      VkBufferCopy id_copy{0, 0, 4};
      vkCmdCopyBuffer(cb, bufs_[p_.next_token].buf, readback_.buf, 1, &id_copy);
      copy_chain_flag(cb);
      if (logits) {
        VkBufferCopy lg{0, 16, logits_n_ * 4};
        vkCmdCopyBuffer(cb, bufs_[p_.logits].buf, readback_.buf, 1, &lg);
      }
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                           &mb, 0, nullptr, 0, nullptr);
    }
    VK_CHECK(vkEndCommandBuffer(cb));
  }

  // One submit of cb, waited for on the executor's fence.
  void submit_and_wait(VkCommandBuffer cb) {
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    VK_CHECK(vkQueueSubmit(ctx_->queue(), 1, &si, fence_));
    wait_fence(fence_);
    VK_CHECK(vkResetFences(ctx_->device(), 1, &fence_));
  }
  // Polls the fence where spin_fences_ says so (falling back to a sleeping wait after a second),
  // else sleeps.
  void wait_fence(VkFence f) {
    if (spin_fences_) {
      const auto t0 = std::chrono::steady_clock::now();
      for (;;) {
        const VkResult r = vkGetFenceStatus(ctx_->device(), f);
        if (r == VK_SUCCESS) return;
        if (r != VK_NOT_READY) VK_CHECK(r);
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(1)) break;
      }
    }
    VK_CHECK(vkWaitForFences(ctx_->device(), 1, &f, VK_TRUE, UINT64_MAX));
  }

  // The plan's steps with their barriers (and, for tests, the corruption switch and the
  // profile's timestamps).
  void record_steps(VkCommandBuffer cb, Plan& plan, int T) {
    const uint64_t d0 = dispatch_count();
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      const Step& st = plan.steps[i];
      if (plan.barrier_before[i]) compute_barrier(cb);
      st.op->record(cb, T);
      if (!corrupt_family_.empty())
        for (size_t k = st.first; k <= st.last; ++k) {
          // An op fused into the next one has run only once that one has: corrupt it then.
          if (p_.ops[k].family == corrupt_family_ && !ops_[k]->fused_into_next)
            corrupt_outputs(cb, k);
          if (k > 0 && ops_[k - 1]->fused_into_next && p_.ops[k - 1].family == corrupt_family_)
            corrupt_outputs(cb, k - 1);
        }
      if (queries_)
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries_,
                            static_cast<uint32_t>(i + 1));
    }
    plan.dispatches = dispatch_count() - d0;
  }

  // Greedy decode steps per submit (up to greedy_batch()): the step's argmax stays on the device
  // and feeds the next step's embedding (argmax.comp ends each step: the token into the input ids
  // and the batch's tokens, the position advanced); the host reads the batch's tokens once. One
  // command buffer per plan and step count, recorded on first use and replayed at any position.
  int greedy_batch() const override { return batch_; }
  int kept_positions(int keep) const override { return ring_.kept(keep); }
  int constrained_ahead() const override { return ahead_; }

  void decode_greedy(int32_t first, int pos, int n, int32_t* out) override {
    if (n > batch_ || n < 2 || pos < 0 || pos + n > p_.max_ctx)
      return Executor::decode_greedy(first, pos, n, out);
    for (auto& op : ops_) op->check(&first, 1);
    std::memcpy(bufs_[p_.input_ids].mapped, &first, 4);
    set_step(pos);
    const int pl = decode_plan(pos, n);
    VkCommandBuffer& cb = batch_cb_[pl][static_cast<size_t>(n)];
    if (!cb) {
      VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
      ai.commandPool = pool_;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      VK_CHECK(vkAllocateCommandBuffers(ctx_->device(), &ai, &cb));
    }
    if (!batch_recorded_[pl][static_cast<size_t>(n)]) {
      record_batch(cb, pl, n);
      batch_recorded_[pl][static_cast<size_t>(n)] = true;
    }
    submit_and_wait(cb);
    ring_.wrote(pos, n);
    check_chains();
    std::memcpy(out, batch_tokens_.mapped, static_cast<size_t>(n) * 4);
  }

  // The step buffer's host copy for the next submit: the position, and no decode steps yet.
  void set_step(int pos) {
    const uint32_t words[2] = {static_cast<uint32_t>(pos), 0};
    std::memcpy(step_host_.mapped, words, sizeof(words));
  }

  void record_batch(VkCommandBuffer cb, int pl, int n) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VK_CHECK(vkBeginCommandBuffer(cb, &bi));
    VkBufferCopy step_copy{0, 0, 16};
    vkCmdCopyBuffer(cb, step_host_.buf, step_.buf, 1, &step_copy);
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    for (int i = 0; i < n; ++i) {
      record_steps(cb, decode_[pl], 1);
      compute_barrier(cb);
    }
    if (chain_sync_.buf) {
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                           0, 1, &mb, 0, nullptr, 0, nullptr);
      copy_chain_flag(cb);
    }
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    VK_CHECK(vkEndCommandBuffer(cb));
  }

  // The decode chains' error flag (grid_sync.glsl: a grid sync that waited out its spin limit,
  // so the grid was not resident and the step's output is wrong) into the readback's word 1;
  // check_chains reads it after the submit.
  void copy_chain_flag(VkCommandBuffer cb) {
    if (!chain_sync_.buf) return;
    VkBufferCopy flag{8, chain_flag_at_, 4};
    vkCmdCopyBuffer(cb, chain_sync_.buf, readback_.buf, 1, &flag);
  }
  void check_chains() const {
    uint32_t flag = 0;
    if (chain_sync_.buf)
      std::memcpy(&flag, static_cast<const uint8_t*>(readback_.mapped) + chain_flag_at_, 4);
    if (flag)
      fail(
          "vulkan backend: a decode chain's grid of {} workgroups was not resident on {} (its "
          "grid sync waited out its limit): set VKLLM_CHAIN_GROUPS lower",
          chain_groups(ctx_->info(), ctx_->tuning()), ctx_->info().name);
  }

  // Test-only switch for the gate-can-fail tests (tests/e2e): VKLLM_TEST_CORRUPT_OP=<op family>
  // zeroes every output of that family's ops after they run, like a broken kernel would.
  void corrupt_outputs(VkCommandBuffer cb, size_t k) {
    ++n_corrupted_;
    record_zero_outputs(cb, p_.ops[k], bufs_);
  }

  // VKLLM_PROFILE=1: GPU time per step from timestamps around every step, kept apart for prefill
  // (forwards of several tokens) and decode (one token), printed when the executor ends.
  void print_profile() const {
    print_plan_profile(p_, prefill_, "prefill", n_slots_);
    print_plan_profile(p_, decode_[0], "decode", n_slots_);
    print_plan_profile(p_, decode_[1], "decode at long positions", n_slots_);
  }

  std::shared_ptr<VulkanLoaded> ld_;  // first member: the device outlives everything below
  const Program& p_;
  const WeightSource& w_;
  Context* ctx_;
  Allocator alloc_;
  Kernels kernels_;
  std::vector<Buffer> bufs_;
  std::vector<std::unique_ptr<PreparedOp>> ops_;
  std::vector<std::unique_ptr<PreparedOp>> fused_;  // the plans' fused steps
  Plan prefill_;
  // The decode plans: [0] with the chains' attention stages (where there are any), for positions
  // below short_until_; [1] (empty where [0] has no attention stage) with the attention in its own
  // dispatch, from there.
  Plan decode_[2];
  int short_until_ = INT_MAX;
  std::vector<FusedRun> runs_long_;  // decode_[1]'s fused runs (none: one plan)
  std::unique_ptr<OpEnv> env_;       // the ops' preparation state, kept for decode_[1]'s
  Buffer readback_;
  ChainClock chain_clock_;  // VKLLM_CHAIN_CLOCK=1
  Buffer chain_sync_;       // the decode chains' grid-sync counters (none without chains)
  uint64_t logits_n_ = 0;
  size_t n_slots_ = 0;
  int max_t_ = 1;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;  // forwards of several tokens, recorded each time
  // Per decode plan: one-token forwards without / with logits.
  VkCommandBuffer decode_cb_[2][2] = {};
  bool decode_recorded_[2][2] = {};
  // Per decode plan, by step count n (2..greedy_batch()): n greedy decode steps.
  std::vector<VkCommandBuffer> batch_cb_[2];
  VkCommandBuffer logits_cb_ = VK_NULL_HANDLE;  // last_logits' copy
  bool logits_recorded_ = false;
  std::vector<bool> batch_recorded_[2];
  int batch_ = 1;
  RingState ring_;                 // what the sliding layers' rings hold
  int ahead_ = kConstrainedAhead;  // constrained_ahead()
  Buffer batch_tokens_;            // host-visible: the batch's tokens
  Buffer step_, step_host_;        // the forward's position: device, host copy
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint64_t held_ = 0;
  std::string corrupt_family_;
  std::string unfused_;           // OpEnv::unfused_family
  bool spin_fences_ = false;      // wait_fence polls
  BatchGeometry batch_geo_;       // a batched executor's (max_rows 0: a single sequence's)
  uint64_t chain_flag_at_ = 4;    // the chains' error flag in the readback (after the tokens)
  Buffer batch_rows_;             // OpEnv::batch_rows
  uint64_t window_words_ = 0;     // the window pool's rows view in batch_rows_ (0: none)
  std::vector<int> cache_group_;  // batch_cache_groups' (a batched executor's)
  Buffer logits_rb_;              // a batched forward's logits readback (made on first use)
  // Recorded batched forwards by shape (batch_command_buffer), most recently used first.
  std::list<std::pair<uint64_t, VkCommandBuffer>> batch_cbs_;
  size_t n_corrupted_ = 0;  // ops whose outputs the switch zeroed, over every recording
};

class VulkanBatchExecutor final : public BatchExecutor {
 public:
  VulkanBatchExecutor(std::shared_ptr<VulkanLoaded> loaded, const BatchGeometry& g)
      : ex_(std::move(loaded), &g) {}
  void forward(const BatchForward& b) override { ex_.forward_batch(b); }
  int num_blocks() const override { return ex_.batch_geometry().num_blocks; }
  int block_tokens() const override { return ex_.batch_geometry().block_tokens; }
  int max_rows() const override { return ex_.batch_geometry().max_rows; }
  int window_blocks() const override { return ex_.batch_geometry().window_blocks; }
  const char* name() const override { return "vulkan"; }

 private:
  VulkanExecutor ex_;
};

}  // namespace

std::unique_ptr<Executor> VulkanLoaded::make_executor() {
  return std::make_unique<VulkanExecutor>(shared_from_this());
}

std::unique_ptr<BatchExecutor> VulkanLoaded::make_batch_executor(int num_blocks, int block_tokens,
                                                                 int max_rows, int window_blocks) {
  return std::make_unique<VulkanBatchExecutor>(
      shared_from_this(), BatchGeometry{num_blocks, block_tokens, max_rows, window_blocks});
}

}  // namespace vkllm
