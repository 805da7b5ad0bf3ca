#include "backend/vulkan/vk_memory_plan.h"

#include <algorithm>

#include "backend/vulkan/vk_ops.h"
#include "core/error.h"

namespace vkllm::vk {

MemoryPlan plan_activation_memory(const Program& p,
                                  const std::vector<const std::vector<FusedRun>*>& plans,
                                  const std::string& unfused_family,
                                  const std::function<uint64_t(const TensorDecl&)>& bytes) {
  const int32_t n = static_cast<int32_t>(p.tensors.size());
  const int nops = static_cast<int>(p.ops.size());
  // Each op's step in each plan (a chain's stage is a step of its own); a buffer lives over the
  // steps of every plan that uses it.
  std::vector<int> step_first(nops), step_last(nops);
  for (int k = 0; k < nops; ++k) step_first[k] = step_last[k] = k;
  for (const std::vector<FusedRun>* runs : plans) {
    std::vector<int> first(nops), last(nops);
    for (int k = 0; k < nops; ++k) first[k] = last[k] = k;
    auto step = [&](const FusedRun& r) {
      for (size_t k = r.first; k <= r.last; ++k) {
        first[k] = static_cast<int>(r.first);
        last[k] = static_cast<int>(r.last);
      }
    };
    for (const FusedRun& r : *runs) {
      step(r);
      for (const FusedRun& st : r.stages) step(st);
    }
    for (int k = 0; k < nops; ++k) {
      step_first[k] = std::min(step_first[k], first[k]);
      step_last[k] = std::max(step_last[k], last[k]);
    }
  }
  MemoryPlan m;
  m.first.assign(static_cast<size_t>(n), -1);
  m.last.assign(static_cast<size_t>(n), -1);
  std::vector<int> written(static_cast<size_t>(n), 0);
  for (int k = 0; k < nops; ++k) {
    const int use =
        std::max(step_last[k], fuses_into_next(p, static_cast<size_t>(k), unfused_family)
                                   ? step_last[std::min(k + 1, nops - 1)]
                                   : k);
    for (int32_t t : p.ops[k].inputs) {
      if (p.tensors[t].kind == TensorKind::Activation) {
        if (!written[t])
          fail("program: activation {} is read by op {} before any op writes it", p.tensors[t].name,
               k);
        m.last[t] = std::max(m.last[t], use);
      }
    }
    for (int32_t t : p.ops[k].outputs) {
      if (written[t]) fail("program: activation {} is written twice", p.tensors[t].name);
      written[t] = 1;
      m.first[t] = step_first[k];
      m.last[t] = std::max(m.last[t], step_last[k]);
    }
  }
  for (int32_t t : {p.logits, p.next_token})
    if (p.tensors[t].kind == TensorKind::Activation && m.first[t] >= 0) m.last[t] = nops;
  // Slots reused once their last reader has run.
  std::vector<bool> busy;
  m.slot_of.assign(static_cast<size_t>(n), -1);
  std::vector<std::vector<int32_t>> born(static_cast<size_t>(nops)),
      dying(static_cast<size_t>(nops) + 1);
  for (int32_t t = 0; t < n; ++t)
    if (m.first[t] >= 0) {
      born[m.first[t]].push_back(t);
      if (p.tensors[t].kind == TensorKind::Activation)
        dying[std::min(m.last[t], nops)].push_back(t);
    }
  for (int k = 0; k < nops; ++k) {
    for (int32_t t : born[k]) {
      const uint64_t need = bytes(p.tensors[t]);
      int best = -1;
      for (int s = 0; s < static_cast<int>(busy.size()); ++s)
        if (!busy[s] && m.slot_bytes[s] >= need &&
            (best < 0 || m.slot_bytes[s] < m.slot_bytes[best]))
          best = s;
      if (best < 0) {
        m.slot_bytes.push_back(need);
        busy.push_back(false);
        best = static_cast<int>(busy.size()) - 1;
      }
      busy[best] = true;
      m.slot_of[t] = best;
    }
    for (int32_t t : dying[k])
      if (m.slot_of[t] >= 0) busy[m.slot_of[t]] = false;
  }
  return m;
}

uint64_t executor_tensor_bytes(const TensorDecl& t, uint64_t max_rows, uint64_t pool_rows) {
  uint64_t rows = t.shape[0] < 0 ? max_rows : static_cast<uint64_t>(t.shape[0]);
  if (pool_rows > 0 && t.kind == TensorKind::KVCache) rows = pool_rows;
  if (pool_rows > 0 && t.kind == TensorKind::Activation && t.shape[0] == 1) rows = max_rows;
  for (size_t d = 1; d + 1 < t.shape.size(); ++d) rows *= static_cast<uint64_t>(t.shape[d]);
  return dtype_nbytes(t.dtype,
                      {static_cast<int64_t>(rows), t.shape.size() > 1 ? t.shape.back() : 1});
}

size_t allocate_program_buffers(Allocator& alloc, const Program& p,
                                const std::vector<const std::vector<FusedRun>*>& plans,
                                const std::string& unfused_family, uint64_t max_rows,
                                uint64_t pool_rows, std::vector<Buffer>& bufs, uint64_t window_rows,
                                const std::vector<int>& cache_group) {
  auto bytes = [&](const TensorDecl& t) { return executor_tensor_bytes(t, max_rows, pool_rows); };
  const MemoryPlan m = plan_activation_memory(p, plans, unfused_family, bytes);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorDecl& t = p.tensors[i];
    if (t.kind == TensorKind::KVCache) {
      if (t.dtype != DType::F32 && t.dtype != DType::F16)
        fail("program: KV cache {} must be f32 or f16", t.name);
      const bool window = window_rows > 0 && i < cache_group.size() && cache_group[i] == 1;
      bufs[i] = alloc.create(window ? executor_tensor_bytes(t, max_rows, window_rows) : bytes(t),
                             false, t.name.c_str());
      alloc.fill(bufs[i], 0);
    } else if (t.kind == TensorKind::Input) {
      bufs[i] = alloc.create(bytes(t), true, t.name.c_str());
    }
  }
  std::vector<Buffer> slots(m.slot_bytes.size());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const int s = m.slot_of[i];
    if (s < 0) continue;
    if (!slots[s].buf) slots[s] = alloc.create(m.slot_bytes[s], false, p.tensors[i].name.c_str());
    bufs[i] = slots[s];
  }
  return slots.size();
}

}  // namespace vkllm::vk
