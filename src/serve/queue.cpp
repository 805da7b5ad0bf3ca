#include "serve/queue.h"

namespace vkllm::serve {

std::unique_ptr<FairQueue::Ticket> FairQueue::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || waiting_ >= limit_) return nullptr;
  ++waiting_;
  return std::unique_ptr<Ticket>(new Ticket(*this, next_++));
}

bool FairQueue::Ticket::wait() {
  std::unique_lock<std::mutex> lock(q_.mu_);
  q_.cv_.wait(lock, [&] { return q_.serving_ == n_ || q_.stopping_; });
  --q_.waiting_;
  waiting_ = false;
  return q_.serving_ == n_ && !q_.stopping_;
}

FairQueue::Ticket::~Ticket() {
  {
    std::lock_guard<std::mutex> lock(q_.mu_);
    if (waiting_) --q_.waiting_;
  }
  q_.done(n_);
}

void FairQueue::done(uint64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (n != serving_) {
      abandoned_.insert(n);
      return;
    }
    ++serving_;
    while (abandoned_.erase(serving_)) ++serving_;
  }
  cv_.notify_all();
}

void FairQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

int FairQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace vkllm::serve
