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
  cmd->add_option("--queue", o->queue, "Requests that may wait for the model; more get 503")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--slots", o->slots,
                  "KV sessions kept (default 2): interleaved conversations, up to one per slot, "
                  "each reuse their own prefix. Memory: one KV cache per slot, 2 x layers x "
                  "kv_heads x head_dim values (f16 or f32, as the recipe) per context token, e.g. "
                  "Qwen3-0.6B fp16 at 4096 tokens 448 MiB; the start line prints it")
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
