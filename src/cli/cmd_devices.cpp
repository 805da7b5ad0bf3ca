#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "(not implemented yet)");
  cmd->callback([] { fail("'devices' is not implemented yet"); });
}

}  // namespace vkllm::cli
