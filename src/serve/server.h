// `vkllm serve`: an OpenAI-compatible HTTP server (cpp-httplib) over one model. Requests run
// together through the continuous-batching Engine (up to --parallel at once, a KV block pool from
// --kv-budget, a shared prefix cache); on a backend without the batched forward they run one at a
// time in a first-come first-served queue, each on the KV session (slot) whose cached context it
// shares the longest prefix with (docs/serve.md).
#pragma once
#include <cstddef>
#include <string>

namespace vkllm::serve {

struct ServeOptions {
  std::string model_path, model_name, host = "127.0.0.1", api_key, backend = "vulkan", device;
  int port = 8080;       // 0: any free port (the one chosen is printed)
  int ctx = 0;           // KV cache rows (0: the artifact's)
  int queue = 16;        // requests that may wait for the model; more are answered 503
  int slots = 2;         // without batching: KV sessions kept (each ModelInfo::kv_cache_bytes)
  bool batching = true;  // false: one request at a time on the slots, as without the engine
  int parallel = 16;     // sequences generated at once (the engine's max_sequences)
  uint64_t kv_budget_mib = 0;  // the KV block pool; 0: room for `parallel` full contexts
  size_t max_body = 1 << 20;
  bool log = true;  // one stderr line per request
};

// Serves until SIGINT or SIGTERM (the running reply finishes, waiting ones get 503), then returns
// 0. Prints "vkllm: serving NAME on http://HOST:PORT" on stderr once listening. Throws
// vkllm::Error when the model cannot be opened or the address cannot be bound.
int run_server(const ServeOptions& options);

}  // namespace vkllm::serve
