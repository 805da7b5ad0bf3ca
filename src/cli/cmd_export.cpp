#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_export(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "(not implemented yet)");
  cmd->callback([] { fail("'export' is not implemented yet"); });
}

}  // namespace vkllm::cli
