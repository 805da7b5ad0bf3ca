// vkllm run: generate text from an artifact (or, in fp32, a Hugging Face folder). Flags follow
// ExecuTorch's llama_main. stdout: only the generated text, streamed as it is produced (a final
// newline only on a terminal). stderr: diagnostics and, last, one machine-readable line
// `vkllm-stats {json}`. Exit codes: 0 success, 2 no or unreadable prompt, 3 unreadable model,
// 4 no usable Vulkan device, 5 prompt longer than the context, 1 anything else.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/gen_flags.h"
#include "cli/load_stages.h"
#include "core/device_error.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "vkllm/vkllm.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm::cli {

namespace {

enum ExitCode { kOther = 1, kPrompt = 2, kModel = 3, kDevice = 4, kContext = 5 };

struct RunArgs {
  std::string model, tokenizer, prompt, prompt_file, device, backend = "vulkan", ids_file;
  GenFlags gen;
  LlamaMainFlags llama_main;
  int seq_len = 0, warmup = 0, num_bos = 0, num_eos = 0;
  bool chat = false, no_stats = false;
};

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Runs one step; an Error becomes its one line on stderr and the step's exit code.
template <typename F>
auto step(ExitCode code, F&& f) {
  try {
    return f();
  } catch (const DeviceError& e) {  // whatever the step, a device problem is exit code 4
    std::fprintf(stderr, "vkllm: %s\n", e.what());
    throw CLI::RuntimeError(kDevice);
  } catch (const Error& e) {
    std::fprintf(stderr, "vkllm: %s\n", e.what());
    throw CLI::RuntimeError(code);
  }
}

void write_ids(const std::string& path, const std::vector<int32_t>& prompt,
               const std::vector<int32_t>& generated, bool stopped_by_eos) {
  const std::string j =
      nlohmann::json{
          {"prompt_ids", prompt}, {"generated_ids", generated}, {"stopped_by_eos", stopped_by_eos}}
          .dump() +
      "\n";
  AtomicFile f(path);
  f.write(j.data(), j.size());
  f.commit();
}

void run(const RunArgs& a) {
  using clock = std::chrono::steady_clock;
  step(kOther, [&] {
    a.llama_main.check();
    return 0;
  });
  std::string prompt = step(kPrompt, [&] {
    std::string p = a.prompt_file.empty() ? a.prompt : read_text_file(a.prompt_file);
    if (p.empty())
      fail("no prompt: give --prompt TEXT or --prompt_file FILE{}",
           a.prompt_file.empty() ? "" : " (" + a.prompt_file + " is empty)");
    return p;
  });
  if (!a.tokenizer.empty())
    std::fprintf(stderr,
                 "vkllm: note: --tokenizer_path is ignored, the model carries its tokenizer\n");
  const auto t0 = clock::now();
  auto model = step(kModel, [&] {
    ModelOptions mo;
    mo.backend = a.backend;
    mo.device = a.device;
    mo.context_length = a.seq_len;
    return Model::open(a.model, mo);
  });
  const auto t_open = clock::now();
  const double load_ms = std::chrono::duration<double, std::milli>(t_open - t0).count();
  if (a.chat) prompt = model->chat_prompt(prompt);
  const std::vector<int32_t> ids = step(kPrompt, [&] {
    std::vector<int32_t> v;
    if (a.num_bos > 0) {  // llama_main: BOS tokens before the prompt, EOS tokens after it
      const auto bos = model->encode("", true);
      if (bos.size() != 1)
        fail("--num_bos {}: this model's tokenizer has no BOS token to add", a.num_bos);
      v.assign(static_cast<size_t>(a.num_bos), bos[0]);
    }
    const auto text = model->encode(prompt, false);
    v.insert(v.end(), text.begin(), text.end());
    if (a.num_eos > 0) {
      if (model->info().eos_ids.empty())
        fail("--num_eos {}: this model has no end-of-sequence token", a.num_eos);
      v.insert(v.end(), static_cast<size_t>(a.num_eos), model->info().eos_ids.front());
    }
    return v;
  });
  const int ctx = a.seq_len > 0 ? std::min(a.seq_len, model->info().context_length)
                                : model->info().context_length;
  step(kContext, [&] {
    if (ids.empty()) fail("the prompt encodes to no tokens");
    if (static_cast<int64_t>(ids.size()) >= ctx)
      fail(
          "the prompt has {} tokens but the context holds {} (at least one must be left to "
          "generate); "
          "use a shorter prompt{}",
          ids.size(), ctx, a.seq_len > 0 ? " or a larger --seq_len" : "");
    return 0;
  });
  GenerationOptions go = a.gen.options();
  go.max_new_tokens = std::min<int64_t>(go.max_new_tokens, ctx - static_cast<int64_t>(ids.size()));
  // One session (on Vulkan: one weight upload) serves the warm-up runs and the measured one.
  auto session = step(kDevice, [&] { return std::make_unique<Session>(model); });
  const auto t_ready = clock::now();
  for (int i = 0; i < a.warmup; ++i) {
    GenerationOptions w = go;
    w.max_new_tokens = std::min(go.max_new_tokens, 8);
    session->generate(ids, w);
    session->reset();
  }
  const std::vector<int32_t> out = step(kOther, [&] {
    return session->generate(ids, go, [](int32_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
  });
  if (::isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto& st = session->stats();
  if (!a.ids_file.empty()) write_ids(a.ids_file, ids, out, st.stopped_by_eos);
  if (!a.no_stats) {
    uint64_t gpu_bytes = 0, validation = 0;
    std::string device = model->info().device_name;
#ifdef VKLLM_WITH_VULKAN
    const VulkanUsage vu = vulkan_usage();
    gpu_bytes = vu.peak_device_bytes;
    if (a.backend == "vulkan" && !vu.device_name.empty()) device = vu.device_name;
    validation = vk::validation_message_count();
#endif
    nlohmann::json j = {
        {"prompt_tokens", st.prompt_tokens},
        {"generated_tokens", st.generated_tokens},
        {"load_ms", load_ms},
        {"session_ms", std::chrono::duration<double, std::milli>(t_ready - t0).count() - load_ms},
        // (the model's open split into stages, and the session's: cli/load_stages.h)
        {"load_stages_ms",
         cli::load_stages_json(
             *model, load_ms, std::chrono::duration<double, std::milli>(t_ready - t_open).count())},
        {"ttft_ms", st.prefill_ms},
        {"prefill_tok_s", st.prefill_tok_s()},
        {"decode_tok_s", st.decode_tok_s()},
        {"stopped_by_eos", st.stopped_by_eos},
        {"stopped_by_stop", st.stopped_by_stop},
        {"masked_steps", st.masked_steps},
        {"refused_steps", st.refused_steps},
        {"decode_submits", st.decode_submits},
        {"wasted_steps", st.wasted_steps},
        {"constraint_ms", st.constraint_ms},
        {"constraint_logits_ms", st.constraint_logits_ms},
        {"peak_host_mb", peak_rss_mb()},
        {"peak_gpu_mb", static_cast<double>(gpu_bytes) / 1048576.0},
        {"validation_messages", validation},
        {"backend", model->info().backend},
        {"device", device},
        {"recipe", model->info().recipe}};
    std::fprintf(stderr, "vkllm-stats %s\n",
                 j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
}

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run",
      "Generate text from a model artifact (stdout: the text only; stderr: diagnostics and a final "
      "`vkllm-stats {json}` line). Exit codes: 0 ok, 2 prompt, 3 model, 4 device, 5 context, 1 "
      "other");
  cmd->add_option("-m,--model_path,--model", a->model,
                  "Model artifact (.vkllm), or a Hugging Face folder (run unquantized in fp32)")
      ->required();
  cmd->add_option("--tokenizer_path", a->tokenizer,
                  "Accepted for llama_main compatibility; the artifact embeds its tokenizer");
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  cmd->add_option("-f,--prompt_file", a->prompt_file,
                  "Read the prompt from a file (overrides --prompt)");
  add_generation_flags(cmd, a->gen);
  cmd->add_option("--num_bos", a->num_bos, "BOS tokens to put before the prompt (llama_main's)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--num_eos", a->num_eos, "EOS tokens to put after the prompt (llama_main's)")
      ->check(CLI::Range(0, 16));
  add_llama_main_flags(cmd, a->llama_main);
  cmd->add_option("--seq_len", a->seq_len,
                  "Context length: prompt + new tokens (default: the artifact's)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--warmup", a->warmup, "Warm-up generations before the measured one")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template (one user turn)");
  cmd->add_option("--device", a->device,
                  "Vulkan device index or name (default: $VKLLM_DEVICE or the first GPU)");
  cmd->add_option("--backend", a->backend, "vulkan (default) or cpu (the reference)")
      ->check(CLI::IsMember({"vulkan", "cpu"}));
  cmd->add_option("--ids_file", a->ids_file,
                  "Also write the prompt and generated token ids to this file (JSON)");
  cmd->add_flag("--no-stats", a->no_stats, "Do not print the stats line on stderr");
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
