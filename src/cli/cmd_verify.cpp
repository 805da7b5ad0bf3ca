#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "(not implemented yet)");
  cmd->callback([] { fail("'verify' is not implemented yet"); });
}

}  // namespace vkllm::cli
