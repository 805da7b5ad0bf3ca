// Each verb of the `vkllm` binary registers itself on the root app (one file per verb).
#pragma once
#include <CLI/CLI.hpp>

namespace vkllm::cli {

// Each add_* creates a subcommand and sets its callback. Callbacks throw vkllm::Error on failure
// (printed by main as one line, exit 1) or throw CLI::RuntimeError(code) for other exit codes.
void add_synth(CLI::App& app);
void add_pull(CLI::App& app);
void add_export(CLI::App& app);
void add_verify(CLI::App& app);
void add_run(CLI::App& app);
void add_chat(CLI::App& app);
void add_serve(CLI::App& app);
void add_bench(CLI::App& app);
void add_e2e(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_devices(CLI::App& app);
void add_selftest(CLI::App& app);

}  // namespace vkllm::cli
