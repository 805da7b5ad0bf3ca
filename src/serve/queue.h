// A first-come first-served queue for the one model: tickets in arrival order, at most `limit`
// waiting. A ticket released without being served (its client left) is skipped in turn.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

namespace vkllm::serve {

class FairQueue {
 public:
  explicit FairQueue(int limit) : limit_(limit) {}
  class Ticket {
   public:
    ~Ticket();
    // Blocks until this ticket's turn; false when the queue is stopping (not served).
    bool wait();

   private:
    friend class FairQueue;
    Ticket(FairQueue& q, uint64_t n) : q_(q), n_(n) {}
    FairQueue& q_;
    uint64_t n_;
    bool waiting_ = true;
  };
  // A ticket, or null when `limit` tickets are already waiting (or the queue is stopping).
  std::unique_ptr<Ticket> enter();
  void stop();  // waiting tickets give up; new ones are refused
  int waiting() const;

 private:
  void done(uint64_t n);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
  std::set<uint64_t> abandoned_;
  int waiting_ = 0, limit_;
  bool stopping_ = false;
};

}  // namespace vkllm::serve
