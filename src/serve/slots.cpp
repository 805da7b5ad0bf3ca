#include "serve/slots.h"

#include "core/error.h"

namespace vkllm::serve {

SlotPool::SlotPool(const std::shared_ptr<Model>& model, int n) {
  if (n < 1) fail("the server needs at least one slot (got {})", n);
  for (int i = 0; i < n; ++i) slots_.push_back({std::make_unique<Session>(model), 0});
}

SlotPool::Pick SlotPool::pick(const std::string& text, const std::vector<int32_t>& tokens) {
  int best = -1, best_keep = 0, lru = 0;
  for (int i = 0; i < size(); ++i) {
    Session& s = *slots_[i].session;
    if (slots_[i].used < slots_[lru].used) lru = i;
    if (s.context_tokens() == 0) continue;
    const int keep = text.empty() ? s.reusable_tokens(tokens) : s.reusable_tokens(text);
    // Half of the slot's context or more: this request continues (or mostly shares) its
    // conversation; less would evict another conversation for a small saving.
    if (keep > best_keep && 2 * keep >= s.context_tokens()) {
      best = i;
      best_keep = keep;
    }
  }
  const int i = best >= 0 ? best : lru;
  slots_[i].used = ++picks_;
  return {slots_[i].session.get(), i};
}

}  // namespace vkllm::serve
