#include "backend/vulkan/vulkan_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_ops.h"
#include "backend/vulkan/vk_pipeline.h"
#include "core/device_error.h"
#include "core/error.h"

namespace vkllm {

namespace {

using namespace vk;

// Device bytes held by live loaded programs (weights) and executors (caches, activations,
// scratch); the most at once.
std::atomic<uint64_t> g_held{0}, g_peak{0};

void hold(uint64_t bytes) {
  const uint64_t now = g_held += bytes;
  for (uint64_t was = g_peak; now > was && !g_peak.compare_exchange_weak(was, now);) {
  }
}
std::mutex g_usage_mutex;
std::string g_device_name, g_driver;

uint64_t elem_bytes(DType t) {
  switch (t) {
    case DType::F16:
      return 2;
    case DType::I8:
      return 1;
    default:
      return 4;
  }
}

// Device selection and opening; its failures are DeviceErrors (callers tell them apart from
// problems of the model file).
std::unique_ptr<Context> open_device(const VulkanOptions& opt) {
  try {
    return std::make_unique<Context>(opt);
  } catch (const DeviceError&) {
    throw;
  } catch (const Error& e) {
    throw DeviceError(e.what());
  }
}

// The program's weights on one device: validated, uploaded once, shared by every executor made
// from it. Executors own the rest (KV caches, activations, pipelines, command buffer).
class VulkanLoaded final : public LoadedProgram, public std::enable_shared_from_this<VulkanLoaded> {
 public:
  VulkanLoaded(const Program& prog, const WeightSource& weights, const VulkanOptions& opt)
      : p(prog), w(weights), ctx(open_device(opt)), alloc(*ctx), bufs(prog.tensors.size()) {
    p.validate();
    for (size_t k = 0; k < p.ops.size(); ++k)
      if (p.ops[k].backend != BackendKind::Vulkan)
        fail(
            "program: op {} ({}) is assigned to the {} backend; the Vulkan executor runs only "
            "Vulkan ops",
            k, p.ops[k].family, backend_name(p.ops[k].backend));
    choose_max_tokens(opt.max_tokens > 0 ? opt.max_tokens : 512);
    std::vector<bool> used(p.tensors.size(), false);
    for (const Op& op : p.ops)
      for (int32_t t : op.inputs) used[t] = true;
    for (size_t i = 0; i < p.tensors.size(); ++i) {
      const TensorDecl& t = p.tensors[i];
      if (t.kind != TensorKind::Weight || !used[i]) continue;
      auto bytes = w.weight(p, static_cast<int32_t>(i));
      if (bytes.size() != t.nbytes)
        fail("weight {}: {} bytes, expected {}", t.name, bytes.size(), t.nbytes);
      bufs[i] = alloc.create(t.nbytes, false, t.name.c_str());
      alloc.upload(bufs[i], 0, bytes.data(), bytes.size());
    }
    held = alloc.device_bytes();
    hold(held);
  }
  ~VulkanLoaded() override { g_held -= held; }

  std::unique_ptr<Executor> make_executor() override;
  std::string device_name() const override { return ctx->info().name; }

  const Program& p;
  const WeightSource& w;
  std::unique_ptr<Context> ctx;
  Allocator alloc;           // the weights
  std::vector<Buffer> bufs;  // by tensor index: the used weights, empty for other kinds
  int max_t = 1;             // rows of every [-1, N] activation buffer
  uint64_t held = 0;         // device bytes of the weights

 private:
  void choose_max_tokens(int want) {
    const uint64_t maxb = ctx->max_binding();
    max_t = std::max(1, std::min(want, p.max_ctx));
    auto limit = [&](uint64_t row_bytes, const std::string& what) {
      if (row_bytes > maxb)
        fail("program: one row of {} ({} bytes) exceeds a Vulkan storage binding", what, row_bytes);
      max_t = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_t), maxb / row_bytes));
    };
    for (const TensorDecl& t : p.tensors)
      if ((t.kind == TensorKind::Activation || t.kind == TensorKind::Input) && t.shape[0] < 0)
        limit(static_cast<uint64_t>(t.shape.size() > 1 ? t.shape.back() : 1) * elem_bytes(t.dtype),
              t.name);
    for (const Op& op : p.ops)
      if (uint64_t b = act_quant_bytes_per_token(p, op)) limit(b, "the int8 activation scratch");
  }
};

class VulkanExecutor final : public Executor {
 public:
  explicit VulkanExecutor(std::shared_ptr<VulkanLoaded> loaded)
      : ld_(std::move(loaded)),
        p_(ld_->p),
        w_(ld_->w),
        ctx_(ld_->ctx.get()),
        alloc_(*ctx_),
        kernels_(*ctx_),
        bufs_(ld_->bufs),
        max_t_(ld_->max_t) {
    allocate();
    step_ = alloc_.create(16, false, "step parameters");
    step_host_ = alloc_.create(16, true, "step parameters (host)");
    OpEnv env{*ctx_,
              kernels_,
              alloc_,
              p_,
              max_t_,
              [this](int32_t t) -> const Buffer& {
                if (!bufs_[t].buf)
                  fail("program: tensor {} has no device buffer", p_.tensors[t].name);
                return bufs_[t];
              },
              [this](int32_t t) { return w_.weight(p_, t); },
              step_};
    for (const Op& op : p_.ops)
      env.act_q_bytes = std::max(env.act_q_bytes, act_quant_bytes_per_token(p_, op) * max_t_);
    for (const Op& op : p_.ops) ops_.push_back(prepare_op(env, op));
    plan_barriers(env);
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = ctx_->queue_family();
    VK_CHECK(vkCreateCommandPool(ctx_->device(), &pci, nullptr, &pool_));
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 3;
    VkCommandBuffer cbs[3];
    VK_CHECK(vkAllocateCommandBuffers(ctx_->device(), &ai, cbs));
    cb_ = cbs[0];
    decode_cb_[0] = cbs[1];
    decode_cb_[1] = cbs[2];
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_CHECK(vkCreateFence(ctx_->device(), &fci, nullptr, &fence_));
    if (ctx_->options().profile && ctx_->info().timestamps) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = static_cast<uint32_t>(p_.ops.size() + 1);
      VK_CHECK(vkCreateQueryPool(ctx_->device(), &qi, nullptr, &queries_));
      for (size_t k = 0; k < p_.ops.size(); ++k) profile_keys_.push_back(profile_key(k));
    }
    held_ = alloc_.device_bytes();
    hold(held_);
    {
      std::lock_guard<std::mutex> lock(g_usage_mutex);
      g_device_name = ctx_->info().name;
      g_driver = ctx_->info().driver;
    }
    if (const char* c = std::getenv("VKLLM_TEST_CORRUPT_OP")) corrupt_family_ = c;
  }

  ~VulkanExecutor() override {
    g_held -= held_;
    VkDevice d = ctx_->device();
    vkDeviceWaitIdle(d);
    if (!corrupt_family_.empty())
      std::fprintf(stderr,
                   "vkllm: VKLLM_TEST_CORRUPT_OP=%s zeroed %zu op outputs in recorded forwards\n",
                   corrupt_family_.c_str(), n_corrupted_);
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
    return next;
  }

 private:
  // A barrier goes before an op only when it reads or writes a buffer that an op since the last
  // barrier wrote, or writes one that such an op read (activation buffers are shared by liveness,
  // so write-after-read matters too). The plan is static: buffers never change after setup.
  void plan_barriers(const OpEnv& env) {
    std::set<VkBuffer> dirty_w, dirty_r;
    std::set<VkBuffer> r, w;  // of op k (and of the op fused into it)
    barrier_before_.assign(p_.ops.size(), false);
    for (size_t k = 0; k < p_.ops.size(); ++k) {
      const Op& op = p_.ops[k];
      for (int32_t t : op.inputs)
        // Not what a fused op before it wrote: the shared kernel computes that in place.
        if (p_.tensors[t].kind != TensorKind::Weight && !w.count(bufs_[t].buf))
          r.insert(bufs_[t].buf);
      for (int32_t t : op.outputs) w.insert(bufs_[t].buf);
      if (op.family == "attention") w.insert({bufs_[op.inputs[3]].buf, bufs_[op.inputs[4]].buf});
      if (ops_[k]->fused_into_next) continue;  // recorded by op k + 1: planned with it
      const std::set<VkBuffer> scratch = {env.act_q.buf, env.act_qp.buf};
      if (ops_[k]->reads_scratch) r.insert(scratch.begin(), scratch.end());
      if (ops_[k]->writes_scratch) w.insert(scratch.begin(), scratch.end());
      // A quantizing op first writes the scratch from x (so the barrier before it waits for x
      // and for the previous readers of the scratch), then has a barrier of its own that orders
      // everything before its mat-vec: its output y needs nothing more.
      const bool quant = ops_[k]->quantizes;
      bool need = false;
      for (VkBuffer b : r) need = need || (dirty_w.count(b) && !(quant && scratch.count(b)));
      for (VkBuffer b : quant ? scratch : w) need = need || dirty_w.count(b) || dirty_r.count(b);
      if (need) {
        barrier_before_[k] = true;
        ++n_barriers_;
      }
      if (need || quant) {  // the op's own barrier clears as much as one before it
        dirty_w.clear();
        dirty_r.clear();
      }
      dirty_r.insert(r.begin(), r.end());
      dirty_w.insert(w.begin(), w.end());
      r.clear();
      w.clear();
    }
  }

  uint64_t tensor_bytes(const TensorDecl& t) const {
    uint64_t rows =
        t.shape[0] < 0 ? static_cast<uint64_t>(max_t_) : static_cast<uint64_t>(t.shape[0]);
    for (size_t d = 1; d + 1 < t.shape.size(); ++d) rows *= static_cast<uint64_t>(t.shape[d]);
    return rows * static_cast<uint64_t>(t.shape.size() > 1 ? t.shape.back() : 1) *
           elem_bytes(t.dtype);
  }

  void allocate() {
    const int32_t n = static_cast<int32_t>(p_.tensors.size());
    std::vector<int> first(n, -1), last(n, -1);
    for (int k = 0; k < static_cast<int>(p_.ops.size()); ++k) {
      // An op fused into the next one reads its inputs as late as that one runs.
      const int use = add_fuses_into_next(p_, static_cast<size_t>(k)) ? k + 1 : k;
      for (int32_t t : p_.ops[k].inputs) {
        if (p_.tensors[t].kind == TensorKind::Activation) {
          if (first[t] < 0)
            fail("program: activation {} is read by op {} before any op writes it",
                 p_.tensors[t].name, k);
          last[t] = std::max(last[t], use);
        }
      }
      for (int32_t t : p_.ops[k].outputs) {
        if (first[t] >= 0) fail("program: activation {} is written twice", p_.tensors[t].name);
        first[t] = last[t] = k;
      }
    }
    const int end = static_cast<int>(p_.ops.size());
    for (int32_t t : {p_.logits, p_.next_token})
      if (p_.tensors[t].kind == TensorKind::Activation && first[t] >= 0) last[t] = end;
    // Caches and input: one buffer each (the weights are the loaded program's).
    for (int32_t i = 0; i < n; ++i) {
      const TensorDecl& t = p_.tensors[i];
      if (t.kind == TensorKind::KVCache) {
        if (t.dtype != DType::F32 && t.dtype != DType::F16)
          fail("program: KV cache {} must be f32 or f16", t.name);
        bufs_[i] = alloc_.create(tensor_bytes(t), false, t.name.c_str());
        alloc_.fill(bufs_[i], 0);
      } else if (t.kind == TensorKind::Input) {
        bufs_[i] = alloc_.create(tensor_bytes(t), true, t.name.c_str());
      }
    }
    // Activations: slots reused once their last reader has run.
    struct Slot {
      Buffer buf;
      bool busy;
    };
    std::vector<Slot> slots;
    std::vector<int> slot_of(n, -1);
    for (int k = 0; k < end; ++k) {
      for (int32_t t : p_.ops[k].outputs) {
        const uint64_t need = tensor_bytes(p_.tensors[t]);
        int best = -1;
        for (int s = 0; s < static_cast<int>(slots.size()); ++s)
          if (!slots[s].busy && slots[s].buf.size >= need &&
              (best < 0 || slots[s].buf.size < slots[best].buf.size))
            best = s;
        if (best < 0) {
          slots.push_back({alloc_.create(need, false, p_.tensors[t].name.c_str()), false});
          best = static_cast<int>(slots.size()) - 1;
        }
        slots[best].busy = true;
        slot_of[t] = best;
        bufs_[t] = slots[best].buf;
      }
      auto release = [&](int32_t t) {
        if (p_.tensors[t].kind == TensorKind::Activation && last[t] == k && slot_of[t] >= 0)
          slots[slot_of[t]].busy = false;
      };
      for (int32_t t : p_.ops[k].inputs) release(t);
      for (int32_t t : p_.ops[k].outputs) release(t);
      if (k > 0 && add_fuses_into_next(p_, static_cast<size_t>(k - 1)))
        for (int32_t t : p_.ops[k - 1].inputs) release(t);
    }
    n_slots_ = slots.size();
    if (!bufs_[p_.next_token].buf)
      fail("program: no op writes next_token {}", p_.tensors[p_.next_token].name);
    if (!bufs_[p_.logits].buf) fail("program: no op writes logits {}", p_.tensors[p_.logits].name);
    if (p_.tensors[p_.logits].dtype != DType::F32 || p_.tensors[p_.logits].shape[0] != 1)
      fail("program: logits {} must be f32 [1, vocab]", p_.tensors[p_.logits].name);
    logits_n_ = static_cast<uint64_t>(p_.tensors[p_.logits].shape.back());
    readback_ = alloc_.create(logits_n_ * 4 + 16, true, "readback buffer");
  }

  // One submit: T tokens at positions pos.. . A one-token forward (a decode step) replays a
  // command buffer recorded on its first use (one with the logits read back, one without): the
  // position reaches the shaders through the step buffer, not through the recording.
  int32_t run_chunk(const int32_t* ids, int T, int pos, float* logits_out, bool last) {
    std::memcpy(bufs_[p_.input_ids].mapped, ids, static_cast<size_t>(T) * 4);
    const uint32_t pos32 = static_cast<uint32_t>(pos);
    std::memcpy(step_host_.mapped, &pos32, 4);
    VkCommandBuffer cb = cb_;
    if (T == 1 && last) {
      const int v = logits_out ? 1 : 0;
      cb = decode_cb_[v];
      if (!decode_recorded_[v]) {
        record(cb, 1, true, logits_out != nullptr, 0);
        decode_recorded_[v] = true;
      }
    } else {
      VK_CHECK(vkResetCommandBuffer(cb_, 0));
      record(cb_, T, last, logits_out != nullptr, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
    }
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    VK_CHECK(vkQueueSubmit(ctx_->queue(), 1, &si, fence_));
    VK_CHECK(vkWaitForFences(ctx_->device(), 1, &fence_, VK_TRUE, UINT64_MAX));
    VK_CHECK(vkResetFences(ctx_->device(), 1, &fence_));
    if (queries_) collect_profile(static_cast<uint32_t>(ops_.size() + 1), T);
    if (!last) return 0;
    int32_t next;
    std::memcpy(&next, readback_.mapped, 4);
    if (logits_out)
      std::memcpy(logits_out, static_cast<const uint8_t*>(readback_.mapped) + 16, logits_n_ * 4);
    return next;
  }

  // The whole forward of T tokens: the step parameters copied in, every op (with the planned
  // barriers), then (last chunk) next_token and optionally the logits copied to the readback.
  void record(VkCommandBuffer cb, int T, bool last, bool logits, VkCommandBufferUsageFlags flags) {
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
    const uint32_t nq = static_cast<uint32_t>(ops_.size() + 1);
    if (queries_) {
      vkCmdResetQueryPool(cb, queries_, 0, nq);
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    for (size_t k = 0; k < ops_.size(); ++k) {
      if (barrier_before_[k]) compute_barrier(cb);
      ops_[k]->record(cb, T);
      if (!corrupt_family_.empty()) {
        // An op fused into the next one has run only once that one has: corrupt it then.
        if (p_.ops[k].family == corrupt_family_ && !ops_[k]->fused_into_next)
          corrupt_outputs(cb, k);
        if (k > 0 && ops_[k - 1]->fused_into_next && p_.ops[k - 1].family == corrupt_family_)
          corrupt_outputs(cb, k - 1);
      }
      if (queries_)
        vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries_,
                            static_cast<uint32_t>(k + 1));
    }
    if (last) {
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                           0, 1, &mb, 0, nullptr, 0, nullptr);
      VkBufferCopy id_copy{0, 0, 4};
      vkCmdCopyBuffer(cb, bufs_[p_.next_token].buf, readback_.buf, 1, &id_copy);
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

  // Test-only switch for the gate-can-fail tests (tests/e2e): VKLLM_TEST_CORRUPT_OP=<op family>
  // zeroes every output of that family's ops after they run, like a broken kernel would.
  void corrupt_outputs(VkCommandBuffer cb, size_t k) {
    ++n_corrupted_;
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    for (int32_t t : p_.ops[k].outputs) vkCmdFillBuffer(cb, bufs_[t].buf, 0, VK_WHOLE_SIZE, 0);
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
  }

  // VKLLM_PROFILE=1: GPU time per op family from timestamps around every op, kept apart for
  // prefill (forwards of several tokens) and decode (one token), printed when the executor ends.
  void collect_profile(uint32_t nq, int T) {
    std::vector<uint64_t> ts(nq);
    VK_CHECK(vkGetQueryPoolResults(ctx_->device(), queries_, 0, nq, nq * 8, ts.data(), 8,
                                   VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    Profile& pr = T == 1 ? decode_ : prefill_;
    for (size_t k = 0; k + 1 < nq; ++k)
      pr.ms[profile_keys_[k]] +=
          static_cast<double>(ts[k + 1] - ts[k]) * ctx_->info().timestamp_period * 1e-6;
    pr.total += static_cast<double>(ts[nq - 1] - ts[0]) * ctx_->info().timestamp_period * 1e-6;
    ++pr.runs;
  }

  // The profile's row of op k: its family and, where ops of one family differ in cost, the widths
  // it maps (output <- input), e.g. "linear_8da4w 8192<-2048". An add fused into the next op has
  // a row of its own, "add (fused)", with next to no time: its work is timed in the next op's row.
  std::string profile_key(size_t k) const {
    const Op& op = p_.ops[k];
    auto width = [&](int32_t t) { return p_.tensors[t].shape.back(); };
    const std::string family = op.family + (ops_[k]->fused_into_next ? " (fused)" : "");
    if (op.family.rfind("linear", 0) == 0 || op.family == "rms_norm" || op.family == "swiglu" ||
        op.family == "add")
      return fmt::format("{} {}<-{}", family, width(op.outputs[0]), width(op.inputs[0]));
    return family;
  }

  // Rows sorted by decode time: ops per forward, ms per forward (prefill, decode) and the decode
  // time per op, so that a kernel's cost at each shape reads off directly.
  void print_profile() const {
    std::map<std::string, int> count;
    for (const std::string& key : profile_keys_) ++count[key];
    std::fprintf(stderr,
                 "vkllm: vulkan profile: %zu ops, %zu barriers between ops, %zu activation "
                 "buffers; GPU time per forward by op family and shape:\n  %-28s %5s %12s %12s "
                 "%14s\n",
                 ops_.size(), n_barriers_, n_slots_, "family (out<-in width)", "ops", "prefill ms",
                 "decode ms", "decode us/op");
    auto per = [](const Profile& p, const std::string& f) {
      auto it = p.ms.find(f);
      return p.runs && it != p.ms.end() ? it->second / p.runs : 0.0;
    };
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [key, n] : count) rows.push_back({per(decode_, key), key});
    std::sort(rows.rbegin(), rows.rend());
    for (const auto& [dec, key] : rows)
      std::fprintf(stderr, "  %-28s %5d %12.4f %12.4f %14.2f\n", key.c_str(), count.at(key),
                   per(prefill_, key), dec, dec * 1e3 / count.at(key));
    std::fprintf(stderr, "  %-28s %5zu %12.4f %12.4f   (%d prefill, %d decode forwards)\n", "total",
                 p_.ops.size(), prefill_.runs ? prefill_.total / prefill_.runs : 0.0,
                 decode_.runs ? decode_.total / decode_.runs : 0.0, prefill_.runs, decode_.runs);
  }

  struct Profile {
    std::map<std::string, double> ms;
    double total = 0;
    int runs = 0;
  };

  std::shared_ptr<VulkanLoaded> ld_;  // first member: the device outlives everything below
  const Program& p_;
  const WeightSource& w_;
  Context* ctx_;
  Allocator alloc_;
  Kernels kernels_;
  std::vector<Buffer> bufs_;
  std::vector<std::unique_ptr<PreparedOp>> ops_;
  std::vector<bool> barrier_before_;
  Buffer readback_;
  uint64_t logits_n_ = 0;
  size_t n_slots_ = 0, n_barriers_ = 0;
  int max_t_ = 1;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;  // forwards of several tokens, recorded each time
  VkCommandBuffer decode_cb_[2] = {};    // one-token forwards without / with logits
  bool decode_recorded_[2] = {false, false};
  Buffer step_, step_host_;  // the forward's position: device, host copy
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  Profile prefill_, decode_;
  std::vector<std::string> profile_keys_;  // profile_key of every op, when profiling
  uint64_t held_ = 0;
  std::string corrupt_family_;
  size_t n_corrupted_ = 0;  // ops whose outputs the switch zeroed, over every recording
};

std::unique_ptr<Executor> VulkanLoaded::make_executor() {
  return std::make_unique<VulkanExecutor>(shared_from_this());
}

}  // namespace

std::shared_ptr<LoadedProgram> load_vulkan_program(const Program& program,
                                                   const WeightSource& weights,
                                                   const VulkanOptions& options) {
  return std::make_shared<VulkanLoaded>(program, weights, options);
}

std::unique_ptr<Executor> make_vulkan_executor(const Program& program, const WeightSource& weights,
                                               const VulkanOptions& options) {
  return load_vulkan_program(program, weights, options)->make_executor();
}

VulkanUsage vulkan_usage() {
  std::lock_guard<std::mutex> lock(g_usage_mutex);
  return {g_peak.load(), g_device_name, g_driver};
}

}  // namespace vkllm
