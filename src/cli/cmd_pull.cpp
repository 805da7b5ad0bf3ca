#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_pull(CLI::App& app) {
  auto* cmd = app.add_subcommand("pull", "(not implemented yet)");
  cmd->callback([] { fail("'pull' is not implemented yet"); });
}

}  // namespace vkllm::cli
