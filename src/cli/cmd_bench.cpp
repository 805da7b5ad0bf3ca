#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "(not implemented yet)");
  cmd->callback([] { fail("'bench' is not implemented yet"); });
}

}  // namespace vkllm::cli
