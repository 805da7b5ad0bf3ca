// The server's KV sessions ("slots"): a small fixed pool of vkllm::Session on one model, each
// keeping the context of the last request it served. A request goes to the slot that keeps the
// most of its context; a slot is taken over only when the request shares at least half of the
// slot's cached context, otherwise the least recently used slot (an empty one first) serves it.
// So interleaved conversations, up to one per slot, each keep their prefix (docs/serve.md).
// Not thread-safe: only the request holding the queue's turn uses the pool.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vkllm/vkllm.h"

namespace vkllm::serve {

class SlotPool {
 public:
  // n sessions, made now (their KV caches are allocated once: the memory is bounded and known).
  SlotPool(const std::shared_ptr<Model>& model, int n);
  struct Pick {
    Session* session = nullptr;
    int slot = 0;  // its index
  };
  // The slot for a request whose whole context is `text` (chat) or `tokens` (completions; text
  // empty). Marks it most recently used.
  Pick pick(const std::string& text, const std::vector<int32_t>& tokens);
  int size() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    std::unique_ptr<Session> session;
    uint64_t used = 0;  // the pick counter when last picked; 0: never
  };
  std::vector<Slot> slots_;
  uint64_t picks_ = 0;
};

}  // namespace vkllm::serve
