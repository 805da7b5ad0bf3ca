#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_e2e(CLI::App& app) {
  auto* cmd = app.add_subcommand("e2e", "(not implemented yet)");
  cmd->callback([] { fail("'e2e' is not implemented yet"); });
}

}  // namespace vkllm::cli
