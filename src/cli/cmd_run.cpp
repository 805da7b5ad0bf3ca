// vkllm run: generate text from an artifact (or, on the CPU reference engine, a Hugging Face
// folder). Flags follow ExecuTorch's llama_main. stdout: only the generated text, streamed.
// stderr: diagnostics and one final machine-readable stats line.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "vkllm/vkllm.h"

namespace vkllm::cli {

namespace {

struct RunArgs {
  std::string model, tokenizer, prompt, prompt_file, device, backend = "vulkan";
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  int max_new_tokens = 128, seq_len = 0, warmup = 0;
  bool chat = false, no_stats = false;
};

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void run(const RunArgs& a) {
  using clock = std::chrono::steady_clock;
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) prompt = read_text_file(a.prompt_file);
  if (prompt.empty()) fail("no prompt: give --prompt TEXT or --prompt_file FILE");
  if (!a.tokenizer.empty())
    std::fprintf(stderr, "vkllm: note: --tokenizer_path is ignored, the model carries its tokenizer\n");
  auto t0 = clock::now();
  ModelOptions mo;
  mo.backend = a.backend;
  mo.device = a.device;
  mo.context_length = a.seq_len;
  auto model = Model::open(a.model, mo);
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  if (a.chat) prompt = model->chat_prompt(prompt);
  std::vector<int32_t> ids = model->encode(prompt, false);
  GenerationOptions go;
  go.max_new_tokens = a.max_new_tokens;
  go.temperature = a.temperature;
  go.top_p = a.top_p;
  go.seed = a.seed;
  // One session (on Vulkan: one weight upload) serves the warm-up runs and the measured one.
  Session session(model);
  for (int i = 0; i < a.warmup; ++i) {
    GenerationOptions w = go;
    w.max_new_tokens = std::min(go.max_new_tokens, 8);
    session.generate(ids, w);
    session.reset();
  }
  session.generate(ids, go, [](int32_t, const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto& st = session.stats();
  if (!a.no_stats) {
    nlohmann::json j = {{"prompt_tokens", st.prompt_tokens},
                        {"generated_tokens", st.generated_tokens},
                        {"load_ms", load_ms},
                        {"ttft_ms", st.prefill_ms},
                        {"prefill_tok_s", st.prefill_tok_s()},
                        {"decode_tok_s", st.decode_tok_s()},
                        {"stopped_by_eos", st.stopped_by_eos},
                        {"peak_host_mb", peak_rss_mb()},
                        {"peak_gpu_mb", 0},
                        {"backend", model->info().backend},
                        {"device", model->info().device_name}};
    std::fprintf(stderr, "vkllm-stats %s\n", j.dump().c_str());
  }
}

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Generate text from a model artifact (stdout: the text only)");
  cmd->add_option("-m,--model_path,--model", a->model, "Model artifact (.vkllm), or a Hugging Face folder (run unquantized in fp32)")->required();
  cmd->add_option("--tokenizer_path", a->tokenizer, "Accepted for llama_main compatibility; the artifact embeds its tokenizer");
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  cmd->add_option("-f,--prompt_file", a->prompt_file, "Read the prompt from a file (overrides --prompt)");
  cmd->add_option("-n,--max_new_tokens", a->max_new_tokens, "Maximum number of new tokens")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top_p", a->top_p, "Nucleus sampling threshold")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "Sampling seed");
  cmd->add_option("--seq_len", a->seq_len, "Context length (default: the artifact's)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--warmup", a->warmup, "Warm-up generations before the measured one")->check(CLI::Range(0, 100));
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template (one user turn)");
  cmd->add_option("--device", a->device, "Vulkan device index or name (default: $VKLLM_DEVICE or the first GPU)");
  cmd->add_option("--backend", a->backend, "vulkan (default) or cpu (the reference)")->check(CLI::IsMember({"vulkan", "cpu"}));
  cmd->add_flag("--no-stats", a->no_stats, "Do not print the stats line on stderr");
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
