// The generation flags `vkllm run` and `vkllm chat` share (sampling, penalties, stop strings, eos)
// and ExecuTorch llama_main's remaining flags: each does what it means here or is refused.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "vkllm/vkllm.h"

namespace vkllm::cli {

struct GenFlags {
  GenerationOptions opts;  // max_new_tokens, temperature, top_p, top_k, min_p, penalties, stop
  bool ignore_eos = false;
  std::string json_schema_file;  // --json-schema: the reply follows this JSON schema
  bool json_object = false;      // --json-object: the reply is a JSON object
  // opts with stop_at_eos = !ignore_eos and the constraint of --json-schema / --json-object (Error
  // with one line on an unreadable file or an unsupported schema).
  GenerationOptions options() const;
};

// Adds -n/--max_new_tokens, --temperature, --top_p, --top_k, --min_p, --repetition_penalty,
// --presence_penalty, --frequency_penalty, --stop (repeatable), --ignore_eos, --seed,
// --json-schema FILE, --json-object.
void add_generation_flags(CLI::App* cmd, GenFlags& g);

// llama_main's flags that have no counterpart in vkllm beyond what they mean: --cpu_threads,
// --data_paths, --method_name, --etdump_path. check() throws vkllm::Error with one line naming
// the flag and why it is refused; the accepted values (the defaults) do nothing.
struct LlamaMainFlags {
  int cpu_threads = -1;
  std::vector<std::string> data_paths;
  std::string method_name = "forward", etdump_path;
  void check() const;
};
void add_llama_main_flags(CLI::App* cmd, LlamaMainFlags& f);

}  // namespace vkllm::cli
