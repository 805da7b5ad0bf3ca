// The engine thread of `vkllm serve` (continuous batching, docs/serve.md): one thread runs the
// model's Engine step after step while any request is in; HTTP handlers submit requests from their
// own threads and read their events from a Stream. At most `limit` requests are in at once
// (running and waiting); more are refused, which the server answers with 503.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "vkllm/vkllm.h"

namespace vkllm::serve {

class BatchRunner {
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<EngineEvent> events;
    bool finished = false;  // its last event was queued
  };

 public:
  // Error when the model's backend cannot make the engine (no batched forward, no memory).
  BatchRunner(std::shared_ptr<Model> model, const EngineOptions& options, int limit);
  ~BatchRunner();  // cancels what is left and joins the thread
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // One request's events, in order; destroying it before its last event cancels the request.
  class Stream {
   public:
    ~Stream();
    // The next event, or nothing when none came within `timeout` (the caller checks its client).
    std::optional<EngineEvent> next(std::chrono::milliseconds timeout);
    void cancel();
    uint64_t id() const { return id_; }

   private:
    friend class BatchRunner;
    Stream(BatchRunner& r, uint64_t id, std::shared_ptr<Channel> ch)
        : runner_(r), id_(id), ch_(std::move(ch)) {}
    BatchRunner& runner_;
    uint64_t id_;
    std::shared_ptr<Channel> ch_;
    bool ended_ = false;  // its last event was read
  };

  // The request's stream, or null when `limit` requests are in or the runner stopped. Error (one
  // line) on a request the engine refuses.
  std::unique_ptr<Stream> submit(const std::vector<int32_t>& prompt, const GenerationOptions& o);
  EngineStats stats() const { return engine_.stats(); }
  int in() const;  // requests submitted and not yet ended
  int limit() const { return limit_; }
  const EngineOptions& options() const { return options_; }
  void stop();  // refuses new requests; those in go on

 private:
  void loop();
  void cancel(uint64_t id);

  EngineOptions options_;
  Engine engine_;
  int limit_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::unordered_map<uint64_t, std::shared_ptr<Channel>> channels_;
  bool stopping_ = false, quit_ = false;
  std::thread thread_;
};

}  // namespace vkllm::serve
