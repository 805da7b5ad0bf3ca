#include "serve/batch_runner.h"

#include <cstdio>

namespace vkllm::serve {

BatchRunner::BatchRunner(std::shared_ptr<Model> model, const EngineOptions& options, int limit)
    : options_(options), engine_(std::move(model), options), limit_(limit) {
  thread_ = std::thread([this] { loop(); });
}

BatchRunner::~BatchRunner() {
  std::vector<uint64_t> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = quit_ = true;
    for (const auto& [id, ch] : channels_) left.push_back(id);
  }
  for (uint64_t id : left) engine_.cancel(id);
  cv_.notify_all();
  thread_.join();
}

int BatchRunner::in() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(channels_.size());
}

void BatchRunner::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
}

std::unique_ptr<BatchRunner::Stream> BatchRunner::submit(const std::vector<int32_t>& prompt,
                                                         const GenerationOptions& o) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_ || static_cast<int>(channels_.size()) >= limit_) return nullptr;
  // Registered before the engine thread can dispatch its first event (dispatch takes mu_).
  const uint64_t id = engine_.add(prompt, o);
  auto ch = std::make_shared<Channel>();
  channels_.emplace(id, ch);
  lock.unlock();
  cv_.notify_all();
  return std::unique_ptr<Stream>(new Stream(*this, id, std::move(ch)));
}

void BatchRunner::cancel(uint64_t id) {
  engine_.cancel(id);
  { std::lock_guard<std::mutex> lock(mu_); }  // the loop is waiting or will see the cancel
  cv_.notify_all();
}

void BatchRunner::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !engine_.idle(); });
      if (quit_ && engine_.idle()) return;
    }
    std::vector<EngineEvent> events;
    try {
      events = engine_.step();
    } catch (const std::exception& e) {
      // A failure outside a request's own (the engine's bookkeeping): every request ends with it.
      std::fprintf(stderr, "vkllm: the batch step failed: %s\n", e.what());
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, ch] : channels_) {
        engine_.cancel(id);
        EngineEvent ev;
        ev.request = id;
        ev.finished = true;
        ev.finish_reason = "error";
        ev.text = e.what();
        events.push_back(std::move(ev));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (EngineEvent& ev : events) {
      auto it = channels_.find(ev.request);
      if (it == channels_.end()) continue;  // ended already (an error above, then its cancel)
      const std::shared_ptr<Channel> ch = it->second;
      const bool last = ev.finished;
      if (last) channels_.erase(it);
      {
        std::lock_guard<std::mutex> cl(ch->mu);
        ch->events.push_back(std::move(ev));
        ch->finished = ch->finished || last;
      }
      ch->cv.notify_all();
    }
  }
}

BatchRunner::Stream::~Stream() {
  if (!ended_) cancel();
}

void BatchRunner::Stream::cancel() {
  {
    std::lock_guard<std::mutex> lock(ch_->mu);
    if (ch_->finished) return;
  }
  runner_.cancel(id_);
}

std::optional<EngineEvent> BatchRunner::Stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(ch_->mu);
  if (!ch_->cv.wait_for(lock, timeout, [&] { return !ch_->events.empty(); })) return std::nullopt;
  EngineEvent ev = std::move(ch_->events.front());
  ch_->events.pop_front();
  if (ev.finished) ended_ = true;
  return ev;
}

}  // namespace vkllm::serve
