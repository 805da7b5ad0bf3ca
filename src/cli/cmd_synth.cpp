#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "(not implemented yet)");
  cmd->callback([] { fail("'synth' is not implemented yet"); });
}

}  // namespace vkllm::cli
