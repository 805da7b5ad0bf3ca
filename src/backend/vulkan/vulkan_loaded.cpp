#include "backend/vulkan/vulkan_loaded.h"

#include <algorithm>
#include <cstdio>

#include "backend/vulkan/vk_ops.h"
#include "core/device_error.h"
#include "core/error.h"

namespace vkllm {

using namespace vk;

namespace {

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

}  // namespace

VulkanLoaded::VulkanLoaded(const Program& prog, const WeightSource& weights,
                           const VulkanOptions& opt)
    : p(prog),
      w(weights),
      t0(std::chrono::steady_clock::now()),
      ctx(open_device(opt)),
      alloc(*ctx),
      bufs(prog.tensors.size()) {
  const auto t_device = std::chrono::steady_clock::now();
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
  usage_hold(held);
  device_ms = ms_between(t0, t_device);
  weights_ms = ms_between(t_device, std::chrono::steady_clock::now());
  if (ctx->options().profile) {  // VKLLM_PROFILE=1: where the load's time goes
    std::fprintf(stderr, "vkllm: vulkan load: device %.0f ms, weights %.0f ms (%.0f MiB)\n",
                 device_ms, weights_ms, static_cast<double>(held) / (1 << 20));
    std::fprintf(stderr, "vkllm: vulkan tuning: %s\n", ctx->tuning().describe().c_str());
  }
}

void VulkanLoaded::choose_max_tokens(int want) {
  const uint64_t maxb = ctx->max_binding();
  max_t = std::max(1, std::min(want, p.max_ctx));
  auto limit = [&](uint64_t row_bytes, const std::string& what) {
    if (row_bytes > maxb)
      fail("program: one row of {} ({} bytes) exceeds a Vulkan storage binding", what, row_bytes);
    max_t = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(max_t), maxb / row_bytes));
  };
  for (const TensorDecl& t : p.tensors)
    if ((t.kind == TensorKind::Activation || t.kind == TensorKind::Input) && t.shape[0] < 0)
      limit(dtype_nbytes(t.dtype, {1, t.shape.size() > 1 ? t.shape.back() : 1}), t.name);
  for (const Op& op : p.ops)
    if (uint64_t b = act_quant_bytes_per_token(p, op)) limit(b, "the int8 activation scratch");
}

VulkanLoadStages vulkan_load_stages(const LoadedProgram& loaded) {
  const auto* v = dynamic_cast<const VulkanLoaded*>(&loaded);
  if (!v) fail("vulkan_load_stages: not a Vulkan program");
  return {v->device_ms, v->weights_ms, v->ctx->pipeline_cache_stats()};
}

std::shared_ptr<LoadedProgram> load_vulkan_program(const Program& program,
                                                   const WeightSource& weights,
                                                   const VulkanOptions& options) {
  return std::make_shared<VulkanLoaded>(program, weights, options);
}

std::unique_ptr<Executor> make_vulkan_executor(const Program& program, const WeightSource& weights,
                                               const VulkanOptions& options) {
  return load_vulkan_program(program, weights, options)->make_executor();
}

}  // namespace vkllm
