// vkllm serve: the OpenAI-compatible HTTP server of src/serve (docs/serve.md).
#include "cli/commands.h"
#include "serve/server.h"

namespace vkllm::cli {

void add_serve(CLI::App& app) {
  auto o = std::make_shared<serve::ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve a model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
      "/v1/models, /health) with a chat page at /; SIGINT/SIGTERM finish the running reply and "
      "exit 0 (docs/serve.md)");
  cmd->add_option("-m,--model_path,--model", o->model_path, "Model artifact (.vkllm) or HF folder")
      ->required();
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "TCP port (default 8080; 0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key,
                  "Require Authorization: Bearer KEY on /v1/ requests (default: $VKLLM_API_KEY)")
      ->envname("VKLLM_API_KEY");
  cmd->add_option("--ctx", o->ctx, "Context length in tokens (default: the artifact's)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--queue", o->queue,
                  "Requests that may wait beyond the running ones (default 16); more get 503 "
                  "with Retry-After")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--parallel", o->parallel,
                  "Requests generated at once by continuous batching (default 16)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-budget", o->kv_budget_mib,
                  "KV cache memory in MiB, a pool of 16-token blocks shared by the requests "
                  "(default: room for --parallel requests at the full context; the start line "
                  "prints the pool). Per token: 2 x layers x kv_heads x head_dim values (f16 or "
                  "f32, as the recipe), e.g. Qwen3-0.6B fp16 112 KiB")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_flag("--no-batching{false}", o->batching,
                "Serve one request at a time on KV sessions (--slots), as on a backend without "
                "the batched forward");
  cmd->add_option("--slots", o->slots,
                  "Without batching (--no-batching, or a backend without the batched forward), "
                  "where requests run one at a time: KV sessions kept (default 2), each reusing "
                  "its conversation's prefix; "
                  "one KV cache of the full context each")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--max-body", o->max_body, "Largest request body in bytes (larger: 413)")
      ->check(CLI::Range(1024, 1 << 30));
  cmd->add_option("--model-name", o->model_name,
                  "The model id clients see (default: the artifact's file name without extension)");
  cmd->add_option("--device", o->device, "Vulkan device index or name");
  cmd->add_option("--backend", o->backend, "vulkan (default) or cpu (the reference)")
      ->check(CLI::IsMember({"vulkan", "cpu"}));
  cmd->add_flag("--quiet{false},-q{false}", o->log, "No per-request log lines on stderr");
  cmd->callback([o] {
    const int rc = serve::run_server(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vkllm::cli
