// The server's Prometheus metrics (GET /metrics, text exposition format 0.0.4): requests by
// endpoint and status, prompt and generated token totals, histograms of the time to first token
// and of the time per generated token, and gauges given when rendered (queue, running requests,
// the KV block pool or the KV cache slots).
// Thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace vkllm::serve {

class Metrics {
 public:
  // A finished HTTP request; endpoint: the route's path, or "other" for unknown paths.
  void request(const std::string& endpoint, int status);
  void tokens(int prompt, int generated);
  void first_token(double seconds);  // from the request's arrival to its first generated token
  void token_gap(double seconds);    // between two generated tokens of a reply
  // Continuous batching (batched): requests and the KV block pool; else one request at a time on
  // KV sessions (slots).
  struct Gauges {
    bool batched = false;
    int waiting = 0;     // requests queued (behind the running batch or the running request)
    int generating = 0;  // requests running (batched: in the batch; else 0 or 1)
    int kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_total = 0, block_tokens = 0;
    // The sliding-window layers' pool (total 0: the model has none).
    int kv_window_blocks_used = 0, kv_window_blocks_cached = 0, kv_window_blocks_total = 0;
    uint64_t prefix_hit_tokens = 0, preemptions = 0;
    int slots = 0;          // KV sessions of the pool
    int slots_holding = 0;  // sessions holding a context
    int64_t kv_tokens = 0;  // tokens held in the KV caches
    int context = 0;        // the context length of a session
  };
  std::string render(const Gauges& g) const;

 private:
  static constexpr std::array<double, 12> kTtftBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                         1,    2.5,   5,    10,  30,   60};
  static constexpr std::array<double, 12> kGapBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                        0.1,   0.25,   0.5,   1,    2.5,   5};
  struct Histogram {
    std::array<uint64_t, 12> buckets{};  // counts of observations <= each bound (not cumulated)
    uint64_t count = 0;
    double sum = 0;
  };
  static void observe(Histogram& h, const std::array<double, 12>& bounds, double v);
  static void write(std::string& out, const char* name, const char* help, const Histogram& h,
                    const std::array<double, 12>& bounds);
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, gap_;
};

}  // namespace vkllm::serve
