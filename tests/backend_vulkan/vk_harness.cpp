#include "vk_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <list>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

namespace vkllm::test {

VulkanOptions validated(VulkanOptions o) {
  o.validation = true;
  o.sync_validation = true;
  return o;
}

int profile_steps(const std::string& profile, const std::string& plan, const std::string& key) {
  const std::string head = "vulkan profile, " + plan + ":";
  const size_t at = profile.find(head);
  if (at == std::string::npos) return 0;
  std::istringstream in(profile.substr(profile.find('\n', at) + 1));
  int n = 0;
  for (std::string line; std::getline(in, line) && line.rfind("  ", 0) == 0;) {
    // "  <key> <count> <ms> <us each> <GB/s>"; the total's row ends the plan.
    std::vector<std::string> words;
    std::istringstream ws(line);
    for (std::string w; ws >> w;) words.push_back(w);
    if (words.size() < 5 || words[0] == "total") break;
    std::string k = words[0];
    for (size_t i = 1; i + 4 < words.size(); ++i) k += " " + words[i];
    const std::string widths = k.size() > key.size() ? k.substr(key.size() + 1) : "";
    if (k == key || (k.rfind(key + " ", 0) == 0 && widths.find(' ') == std::string::npos &&
                     widths.find("<-") != std::string::npos))
      n += std::stoi(words[words.size() - 4]);
  }
  return n;
}

void expect_batch_agrees(const std::vector<testutil::BatchOutput>& got,
                         const std::vector<testutil::BatchOutput>& want, double bound,
                         double tie_margin) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << got[i].step << " seq " << got[i].seq);
    EXPECT_LE(nmse(got[i].logits, want[i].logits), bound);
    auto sorted = want[i].logits;
    std::sort(sorted.rbegin(), sorted.rend());
    const double margin = static_cast<double>(sorted[0]) - sorted[1];
    if (margin > tie_margin) {
      EXPECT_EQ(got[i].token, want[i].token) << "the reference's margin " << margin;
    }
  }
}

int op_perf_reps() {
  static const int reps = [] {
    const char* v = std::getenv("VKLLM_OP_PERF");
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end || n < 0 || n > 100000) {
      ADD_FAILURE() << "VKLLM_OP_PERF: expected 0, 1 or a repetition count up to 100000, got '" << v
                    << "'";
      return 0;
    }
    return n == 1 ? 100 : static_cast<int>(n);
  }();
  return reps;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return 1e30;
  double num = 0, den = 0;
  size_t nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) ++nan;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_EQ(nan, 0u) << "NaN in the output (poisoned elements not written?)";
  if (nan) return 1e30;
  return den > 0 ? num / den : num;
}

std::vector<float> round_f16(std::vector<float> v) {
  for (auto& x : v) x = vkllm::round_f16(x);
  return v;
}

int32_t Case::add(const std::string& name, DType dt, TensorKind kind, std::vector<int64_t> shape,
                  std::vector<uint8_t> data) {
  TensorDecl t{name, dt, kind, shape, 0, 0};
  if (kind == TensorKind::Weight) t.nbytes = dtype_nbytes(dt, shape);
  const int32_t i = p.add_tensor(t);
  if (!data.empty()) host[i] = std::move(data);
  return i;
}

void Case::op(const std::string& family, std::vector<int32_t> in, int32_t out,
              nlohmann::json attrs) {
  p.ops.push_back(Op{family, std::move(in), {out}, std::move(attrs), BackendKind::Vulkan});
}

Device::~Device() {
  kernels.reset();
  ctx.reset();
}

std::string options_key(const VulkanOptions& o) {
  return o.device + "|" + std::to_string(o.validation) + std::to_string(o.sync_validation) + "|" +
         std::to_string(o.max_tokens) + "|" + std::to_string(o.max_binding_bytes) + "|" +
         std::to_string(o.staging_bytes) + "|" + std::to_string(o.no_int_dot) +
         std::to_string(o.no_coopmat) + std::to_string(o.no_fp16) + std::to_string(o.no_fusion) +
         std::to_string(o.selftest_verdict) + std::to_string(o.profile) +
         std::to_string(o.environment) + "|" + o.tuning.describe() + "|" +
         std::to_string(o.tuning.chose_int_dot) + std::to_string(o.tuning.chose_coopmat) +
         std::to_string(o.tuning.chose_fusion);
}

namespace {

// lavapipe runs a dispatch's workgroups on one thread each only while it has a thread for each
// (LP_NUM_THREADS, by default one a core); the chain tests' grids of up to four workgroups must be
// resident, so the process asks for at least four before any Vulkan instance exists (a setting
// from the environment wins).
const bool kLavapipeThreads = [] {
  if (std::thread::hardware_concurrency() < 4) setenv("LP_NUM_THREADS", "4", 0);
  return true;
}();

// Most recently used first.
std::list<std::pair<std::string, std::shared_ptr<Device>>>& devices() {
  static std::list<std::pair<std::string, std::shared_ptr<Device>>> d;
  return d;
}

// Releases the shared devices after the last test, before the process exits (while the driver is
// still loaded).
class ReleaseDevices : public ::testing::Environment {
 public:
  void TearDown() override { devices().clear(); }
};
[[maybe_unused]] ::testing::Environment* const release_devices =
    ::testing::AddGlobalTestEnvironment(new ReleaseDevices);

}  // namespace

std::shared_ptr<Device> shared_device(const VulkanOptions& opt) {
  auto& d = devices();
  const std::string key = options_key(opt);
  for (auto it = d.begin(); it != d.end(); ++it)
    if (it->first == key) {
      d.splice(d.begin(), d, it);
      return d.front().second;
    }
  auto dev = std::make_shared<Device>();
  dev->ctx = std::make_unique<vk::Context>(opt);
  dev->kernels = std::make_unique<vk::Kernels>(*dev->ctx);
  d.emplace_front(key, dev);
  while (d.size() > 3) d.pop_back();
  return dev;
}

OpRun::OpRun(Case& c, int max_tokens, VulkanOptions opt, bool prefill_runs, int batch_out)
    : c_(c), messages_at_start_(vk::validation_message_count()), max_t_(max_tokens) {
  dev_ = shared_device(op_perf_reps() > 0 ? opt : validated(opt));
  ctx_ = dev_->ctx.get();
  alloc_ = std::make_unique<vk::Allocator>(*ctx_);
  bufs_.resize(c.p.tensors.size());
  for (size_t i = 0; i < c.p.tensors.size(); ++i) {
    const TensorDecl& t = c.p.tensors[i];
    std::vector<int64_t> shape = t.shape;
    if (shape[0] < 0) shape[0] = max_tokens;
    if (batch_out > 0 && t.kind == TensorKind::Activation && shape[0] == 1) shape[0] = batch_out;
    const uint64_t n = dtype_nbytes(t.dtype, shape);
    bufs_[i] = alloc_->create(n, t.kind == TensorKind::Input, t.name.c_str());
    auto it = c.host.find(static_cast<int32_t>(i));
    if (it != c.host.end()) {
      EXPECT_LE(it->second.size(), n) << t.name;
      alloc_->upload(bufs_[i], 0, it->second.data(), it->second.size());
    } else {
      alloc_->fill(bufs_[i], t.dtype == DType::F16 ? 0x7e007e00u : 0x7fc00000u);  // NaN poison
    }
  }
  env_.reset(new vk::OpEnv{*ctx_, *dev_->kernels, *alloc_, c.p, max_tokens,
                           [this](int32_t t) -> const vk::Buffer& { return bufs_[t]; },
                           [this](int32_t t) {
                             const auto& v = c_.host.at(t);
                             return std::span<const uint8_t>(v.data(), v.size());
                           }});
  env_->step = alloc_->create(16, false, "step parameters");
  env_->tokens = alloc_->create(4, true, "greedy batch tokens");
  if (batch_out > 0) {
    env_->batch_rows = alloc_->create(16, true, "batch rows");
    env_->batch_out = static_cast<uint32_t>(batch_out);
  }
  for (const Op& op : c.p.ops)
    env_->act_q_bytes =
        std::max(env_->act_q_bytes, vk::act_quant_bytes_per_token(c.p, op) * max_tokens);
  for (const Op& op : c.p.ops) ops_.push_back(vk::prepare_op(*env_, op));
  if (prefill_runs) runs_ = vk::find_prefill_runs(c.p, *ctx_);
  for (const vk::FusedRun& r : runs_) fused_.push_back(vk::prepare_fused(*env_, r));
}

OpRun::~OpRun() {
  fused_.clear();
  ops_.clear();
  env_.reset();
  alloc_.reset();
  dev_.reset();
  EXPECT_EQ(vk::validation_message_count(), messages_at_start_)
      << "Vulkan validation reported messages";
}

void OpRun::forward(int T, int pos) {
  ASSERT_LE(T, max_t_);
  const auto& ids = c_.p.input_ids >= 0 ? c_.host[c_.p.input_ids] : std::vector<uint8_t>{};
  if (!ids.empty()) {
    alloc_->upload(bufs_[c_.p.input_ids], 0, ids.data(),
                   std::min<size_t>(ids.size(), size_t(T) * 4));
    for (auto& op : ops_) op->check(reinterpret_cast<const int32_t*>(ids.data()), T);
  }
  const uint32_t pos32 = static_cast<uint32_t>(pos);
  alloc_->upload(env_->step, 0, &pos32, 4);
  VkCommandBuffer cb = ctx_->begin_once();
  record(cb, T);
  ctx_->submit_and_wait(cb);
}

void OpRun::record(VkCommandBuffer cb, int T) {
  for (size_t k = 0, r = 0; k < ops_.size(); ++k) {
    if (k) vk::compute_barrier(cb);
    if (r < runs_.size() && runs_[r].first == k) {
      fused_[r]->record(cb, T);
      k = runs_[r++].last;
    } else {
      ops_[k]->record(cb, T);
    }
  }
}

double OpRun::time_us(int T, int pos, int reps) {
  forward(T, pos);  // warm-up (and the step parameters for `pos`)
  const bool ts = ctx_->info().timestamps && ctx_->info().timestamp_period > 0;
  VkQueryPool pool = VK_NULL_HANDLE;
  if (ts) {
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = 2;
    VK_CHECK(vkCreateQueryPool(ctx_->device(), &qi, nullptr, &pool));
  }
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < 3; ++round) {
    VkCommandBuffer cb = ctx_->begin_once();
    if (ts) {
      vkCmdResetQueryPool(cb, pool, 0, 2);
      vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, 0);
    }
    for (int i = 0; i < reps; ++i) {
      if (i) vk::compute_barrier(cb);
      record(cb, T);
    }
    if (ts) vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, 1);
    const auto t0 = std::chrono::steady_clock::now();
    ctx_->submit_and_wait(cb);
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (ts) {
      uint64_t t[2] = {0, 0};
      VK_CHECK(vkGetQueryPoolResults(ctx_->device(), pool, 0, 2, sizeof t, t, 8,
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
      us = static_cast<double>(t[1] - t[0]) * ctx_->info().timestamp_period / 1e3;
    }
    best = std::min(best, us / reps);
  }
  if (pool) vkDestroyQueryPool(ctx_->device(), pool, nullptr);
  return best;
}

void OpRun::write(int32_t t, const std::vector<uint8_t>& data) {
  alloc_->upload(bufs_[t], 0, data.data(), data.size());
}

std::vector<uint8_t> OpRun::read_bytes(const vk::Buffer& b, size_t n) {
  std::vector<uint8_t> out(n);
  alloc_->download(b, 0, out.data(), n);
  return out;
}

std::vector<float> OpRun::read(int32_t t, int rows) {
  const TensorDecl& d = c_.p.tensors[t];
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(d.shape.back());
  std::vector<float> out(n);
  if (d.dtype == DType::F16) {
    std::vector<uint16_t> h(n);
    alloc_->download(bufs_[t], 0, h.data(), n * 2);
    for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
  } else if (d.dtype == DType::I32) {
    std::vector<int32_t> v(n);
    alloc_->download(bufs_[t], 0, v.data(), n * 4);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(v[i]);
  } else {
    alloc_->download(bufs_[t], 0, out.data(), n * 4);
  }
  return out;
}

}  // namespace vkllm::test
