#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "(not implemented yet)");
  cmd->callback([] { fail("'run' is not implemented yet"); });
}

}  // namespace vkllm::cli
