#include "cli/gen_flags.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace vkllm::cli {

GenerationOptions GenFlags::options() const {
  GenerationOptions o = opts;
  o.stop_at_eos = !ignore_eos;
  if (!json_schema_file.empty()) {
    std::ifstream f(json_schema_file, std::ios::binary);
    if (!f) fail("--json-schema {}: cannot read the file", json_schema_file);
    std::ostringstream text;
    text << f.rdbuf();
    try {
      o.constraint = json_schema_constraint(text.str());
    } catch (const Error& e) {
      fail("--json-schema {}: {}", json_schema_file, e.what());
    }
  } else if (json_object) {
    o.constraint = json_object_constraint();
  }
  return o;
}

void add_generation_flags(CLI::App* cmd, GenFlags& g) {
  GenerationOptions& o = g.opts;
  cmd->add_option("-n,--max_new_tokens", o.max_new_tokens,
                  "Maximum number of new tokens (stops earlier at an eos id or a stop string)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", o.temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top_p", o.top_p, "Nucleus sampling threshold")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top_k", o.top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--min_p", o.min_p,
                  "Drop tokens less likely than min_p times the most likely one (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition_penalty,--repeat_penalty", o.repetition_penalty,
                  "Divide the logits of tokens already in the context (1: off; also greedy)")
      ->check(CLI::Range(0.01, 100.0));
  cmd->add_option("--presence_penalty", o.presence_penalty,
                  "Subtract from the logit of every token already generated (OpenAI's)")
      ->check(CLI::Range(-100.0, 100.0));
  cmd->add_option("--frequency_penalty", o.frequency_penalty,
                  "Subtract this times its count from each generated token's logit (OpenAI's)")
      ->check(CLI::Range(-100.0, 100.0));
  cmd->add_option("--stop", o.stop,
                  "Stop when the reply contains this text (repeatable; matched across tokens, "
                  "never printed)")
      ->allow_extra_args(false)
      ->check([](const std::string& s) { return s.empty() ? "a stop string is empty" : ""; });
  cmd->add_flag("--ignore_eos", g.ignore_eos,
                "Do not stop at the model's end-of-sequence tokens (they are generated as text)");
  cmd->add_option("--seed", o.seed,
                  "Sampling seed: the same seed, prompt and flags give the same tokens");
  auto* schema = cmd->add_option("--json-schema", g.json_schema_file,
                                 "Constrain the reply to JSON that this JSON schema file accepts "
                                 "(the subset docs/serve.md lists)");
  cmd->add_flag("--json-object", g.json_object,
                "Constrain the reply to a JSON object (any properties)")
      ->excludes(schema);
}

void add_llama_main_flags(CLI::App* cmd, LlamaMainFlags& f) {
  cmd->add_option("--cpu_threads", f.cpu_threads,
                  "llama_main's CPU thread count: only -1 (the default) is accepted");
  cmd->add_option("--data_paths,--data_path", f.data_paths,
                  "llama_main's separate weight files: refused (the artifact holds its weights)");
  cmd->add_option("--method_name", f.method_name,
                  "llama_main's program method: only \"forward\" (the artifact's one program)");
  cmd->add_option("--etdump_path", f.etdump_path,
                  "llama_main's ExecuTorch trace: refused (see VKLLM_PROFILE and vkllm-stats)");
}

void LlamaMainFlags::check() const {
  if (cpu_threads != -1)
    fail(
        "--cpu_threads {}: refused, vkllm runs the model on the Vulkan device and its CPU "
        "reference backend is single-threaded (only -1, the default, is accepted)",
        cpu_threads);
  if (!data_paths.empty())
    fail(
        "--data_paths {}: refused, a .vkllm artifact holds its weights itself (there are no "
        "separate data files to load)",
        data_paths.front());
  if (method_name != "forward")
    fail("--method_name {}: refused, an artifact has one program, \"forward\"", method_name);
  if (!etdump_path.empty())
    fail(
        "--etdump_path {}: refused, ETDump is ExecuTorch's trace format; vkllm prints its run "
        "figures as the vkllm-stats line and per-op GPU times with VKLLM_PROFILE=1",
        etdump_path);
}

}  // namespace vkllm::cli
