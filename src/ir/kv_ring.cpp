#include "ir/kv_ring.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace vkllm {

int64_t ring_rows(int64_t max_ctx, int64_t window, int64_t forward_tokens) {
  if (window <= 0 || window >= max_ctx) return max_ctx;
  return std::min(max_ctx, window + std::max<int64_t>(forward_tokens, 1));
}

int64_t attention_window(const Op& o) {
  const auto it = o.attrs.find("window");
  if (it == o.attrs.end() || !it->is_number_integer()) return 0;
  const int64_t w = it->get<int64_t>();
  return w > 0 ? std::min<int64_t>(w, int64_t(1) << 30) : 0;
}

namespace {

bool is_cache(const Program& p, int32_t t) {
  return t >= 0 && static_cast<size_t>(t) < p.tensors.size() &&
         p.tensors[static_cast<size_t>(t)].kind == TensorKind::KVCache;
}

// Per cache that some op reads: the largest window of its readers, or -1 once any reader is not a
// windowed attention op reading it as a cache.
std::map<int32_t, int64_t> cache_windows(const Program& p) {
  std::map<int32_t, int64_t> window;
  for (const Op& o : p.ops)
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      const int32_t t = o.inputs[i];
      if (!is_cache(p, t)) continue;
      const int64_t w = o.family == "attention" && (i == 3 || i == 4) ? attention_window(o) : 0;
      auto [it, fresh] = window.emplace(t, w > 0 ? w : -1);
      if (!fresh) it->second = it->second < 0 || w <= 0 ? -1 : std::max(it->second, w);
    }
  return window;
}

}  // namespace

Program with_ring_caches(const Program& p, int64_t forward_tokens) {
  p.validate();
  const std::map<int32_t, int64_t> window = cache_windows(p);
  Program q = p;
  for (const auto& [t, w] : window) {
    TensorDecl& d = q.tensors[static_cast<size_t>(t)];
    if (w > 0 && d.shape.size() == 2)
      d.shape[0] = std::min(d.shape[0], ring_rows(p.max_ctx, w, forward_tokens));
  }
  return q;
}

KvGroups kv_groups(const Program& p) {
  p.validate();
  const std::map<int32_t, int64_t> window = cache_windows(p);
  int64_t widest = 0;  // the window group's window (0: none)
  bool full = false;
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    if (!is_cache(p, static_cast<int32_t>(t))) continue;
    const auto it = window.find(static_cast<int32_t>(t));
    if (it != window.end() && it->second > 0)
      widest = std::max(widest, it->second);
    else
      full = true;
  }
  if (!full && widest == 0) fail("program: no KV cache");
  KvGroups g;
  if (full) g.windows.push_back(0);
  if (widest > 0) g.windows.push_back(widest);
  g.bytes_per_token.assign(g.windows.size(), 0);
  g.of_tensor.assign(p.tensors.size(), -1);
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    const TensorDecl& d = p.tensors[t];
    if (d.kind != TensorKind::KVCache) continue;
    const auto it = window.find(static_cast<int32_t>(t));
    const int k = full && it != window.end() && it->second > 0 ? 1 : 0;
    g.of_tensor[t] = k;
    if (d.shape.size() == 2 && d.shape[0] > 0)
      g.bytes_per_token[static_cast<size_t>(k)] +=
          dtype_nbytes(d.dtype, d.shape) / static_cast<uint64_t>(d.shape[0]);
  }
  return g;
}

int64_t attention_cache_rows(const Program& p, const Op& o) {
  if (o.inputs.size() != 5 || !is_cache(p, o.inputs[3]) || !is_cache(p, o.inputs[4]))
    fail("program: attention's inputs 3 and 4 must be KV caches");
  const TensorDecl &k = p.tensors[static_cast<size_t>(o.inputs[3])],
                   &v = p.tensors[static_cast<size_t>(o.inputs[4])];
  if (k.shape.size() != 2 || v.shape.size() != 2 || k.shape[0] != v.shape[0])
    fail("program: KV caches {} and {} must have the same rows", k.name, v.name);
  const int64_t rows = k.shape[0], w = attention_window(o);
  if (rows < p.max_ctx && w == 0)
    fail(
        "program: KV cache {} has {} rows, fewer than the context {} (only a sliding-window "
        "layer's cache may be a ring)",
        k.name, rows, p.max_ctx);
  if (rows < p.max_ctx && rows < w)
    fail("program: KV cache {} has {} rows, fewer than its layer's window {}", k.name, rows, w);
  return rows;
}

int ring_forward_tokens(const Program& p) {
  int64_t n = p.max_ctx;
  for (const Op& o : p.ops) {
    if (o.family != "attention") continue;
    const int64_t rows = attention_cache_rows(p, o);
    if (rows < p.max_ctx) n = std::min(n, rows - attention_window(o) + 1);
  }
  return static_cast<int>(std::max<int64_t>(n, 1));
}

RingState::RingState(const Program& p) {
  for (const Op& o : p.ops) {
    if (o.family != "attention") continue;
    const int64_t rows = attention_cache_rows(p, o);
    if (rows < p.max_ctx) rings_.emplace_back(rows, attention_window(o));
  }
}

void RingState::wrote(int pos, int T) {
  end_ = pos == 0 ? T : std::max<int64_t>(end_, int64_t(pos) + T);
}

int RingState::kept(int keep) const {
  if (keep <= 0) return 0;
  for (const auto& [rows, window] : rings_)
    if (std::max<int64_t>(0, keep - window + 1) < end_ - rows) return 0;
  return keep;
}

}  // namespace vkllm
