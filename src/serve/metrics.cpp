#include "serve/metrics.h"

#include <fmt/format.h>

namespace vkllm::serve {

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(int prompt, int generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void Metrics::observe(Histogram& h, const std::array<double, 12>& bounds, double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) {
      ++h.buckets[i];
      break;
    }
  ++h.count;
  h.sum += v;
}

void Metrics::first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(ttft_, kTtftBounds, seconds);
}

void Metrics::token_gap(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(gap_, kGapBounds, seconds);
}

void Metrics::write(std::string& out, const char* name, const char* help, const Histogram& h,
                    const std::array<double, 12>& bounds) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulated = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulated += h.buckets[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cumulated);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out =
      "# HELP vkllm_requests_total HTTP requests answered, by endpoint and status.\n"
      "# TYPE vkllm_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("vkllm_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                       key.second, n);
  out += fmt::format(
      "# HELP vkllm_prompt_tokens_total Prompt tokens of the generations served (KV cache reuse "
      "included).\n# TYPE vkllm_prompt_tokens_total counter\nvkllm_prompt_tokens_total {}\n"
      "# HELP vkllm_generated_tokens_total Tokens generated.\n"
      "# TYPE vkllm_generated_tokens_total counter\nvkllm_generated_tokens_total {}\n",
      prompt_tokens_, generated_tokens_);
  write(out, "vkllm_time_to_first_token_seconds",
        "From a generation request's arrival (queueing included) to its first token.", ttft_,
        kTtftBounds);
  write(out, "vkllm_time_per_output_token_seconds", "Time between two generated tokens.", gap_,
        kGapBounds);
  out += fmt::format(
      "# HELP vkllm_requests_waiting Generation requests queued for the model.\n"
      "# TYPE vkllm_requests_waiting gauge\nvkllm_requests_waiting {}\n"
      "# HELP vkllm_requests_running Generation requests running.\n"
      "# TYPE vkllm_requests_running gauge\nvkllm_requests_running {}\n",
      g.waiting, g.generating);
  if (g.batched) {
    out += fmt::format(
        "# HELP vkllm_kv_blocks_used KV pool blocks held by running requests.\n"
        "# TYPE vkllm_kv_blocks_used gauge\nvkllm_kv_blocks_used {}\n"
        "# HELP vkllm_kv_blocks_cached KV pool blocks held only by the prefix cache.\n"
        "# TYPE vkllm_kv_blocks_cached gauge\nvkllm_kv_blocks_cached {}\n"
        "# HELP vkllm_kv_blocks_total KV pool blocks.\n"
        "# TYPE vkllm_kv_blocks_total gauge\nvkllm_kv_blocks_total {}\n"
        "# HELP vkllm_kv_block_tokens Tokens per KV block.\n"
        "# TYPE vkllm_kv_block_tokens gauge\nvkllm_kv_block_tokens {}\n"
        "# HELP vkllm_prefix_cache_hit_tokens_total Prompt tokens whose KV came from the prefix "
        "cache.\n# TYPE vkllm_prefix_cache_hit_tokens_total counter\n"
        "vkllm_prefix_cache_hit_tokens_total {}\n"
        "# HELP vkllm_preemptions_total Requests preempted (KV recomputed later) for lack of "
        "blocks.\n# TYPE vkllm_preemptions_total counter\nvkllm_preemptions_total {}\n",
        g.kv_blocks_used, g.kv_blocks_cached, g.kv_blocks_total, g.block_tokens,
        g.prefix_hit_tokens, g.preemptions);
    if (g.kv_window_blocks_total > 0)
      out += fmt::format(
          "# HELP vkllm_kv_window_blocks_used Sliding-window layers' KV pool blocks held by "
          "running requests.\n# TYPE vkllm_kv_window_blocks_used gauge\n"
          "vkllm_kv_window_blocks_used {}\n"
          "# HELP vkllm_kv_window_blocks_cached Sliding-window layers' KV pool blocks held only "
          "by the prefix cache.\n# TYPE vkllm_kv_window_blocks_cached gauge\n"
          "vkllm_kv_window_blocks_cached {}\n"
          "# HELP vkllm_kv_window_blocks_total Sliding-window layers' KV pool blocks.\n"
          "# TYPE vkllm_kv_window_blocks_total gauge\nvkllm_kv_window_blocks_total {}\n",
          g.kv_window_blocks_used, g.kv_window_blocks_cached, g.kv_window_blocks_total);
    return out;
  }
  out += fmt::format(
      "# HELP vkllm_kv_slots KV cache sessions (slots) of the pool.\n"
      "# TYPE vkllm_kv_slots gauge\nvkllm_kv_slots {}\n"
      "# HELP vkllm_kv_slots_used Slots holding a conversation's context.\n"
      "# TYPE vkllm_kv_slots_used gauge\nvkllm_kv_slots_used {}\n"
      "# HELP vkllm_kv_tokens Tokens held in the slots' KV caches.\n"
      "# TYPE vkllm_kv_tokens gauge\nvkllm_kv_tokens {}\n"
      "# HELP vkllm_kv_tokens_capacity Tokens the slots' KV caches can hold.\n"
      "# TYPE vkllm_kv_tokens_capacity gauge\nvkllm_kv_tokens_capacity {}\n",
      g.slots, g.slots_holding, g.kv_tokens, static_cast<int64_t>(g.slots) * g.context);
  return out;
}

}  // namespace vkllm::serve
