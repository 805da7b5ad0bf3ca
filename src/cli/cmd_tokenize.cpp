#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

void add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "(not implemented yet)");
  cmd->callback([] { fail("'tokenize' is not implemented yet"); });
}

}  // namespace vkllm::cli
