// vkllm: one binary, one verb per pipeline stage (docs/design.md section 6).
#include <cstdio>
#include <exception>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "vkllm: export Hugging Face LLMs to one quantized artifact and run them on any Vulkan GPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "vkllm 0.1.0");
  vkllm::cli::add_synth(app);
  vkllm::cli::add_pull(app);
  vkllm::cli::add_export(app);
  vkllm::cli::add_verify(app);
  vkllm::cli::add_run(app);
  vkllm::cli::add_chat(app);
#ifdef VKLLM_WITH_SERVE
  vkllm::cli::add_serve(app);
#endif
  vkllm::cli::add_bench(app);
  vkllm::cli::add_e2e(app);
  vkllm::cli::add_tokenize(app);
  vkllm::cli::add_devices(app);
  vkllm::cli::add_selftest(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const vkllm::Error& e) {
    std::fprintf(stderr, "vkllm: %s\n", e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the system refuses (too long, not searchable) reached a std::filesystem query: an
    // input problem, not an internal error.
    std::fprintf(stderr, "vkllm: %s: %s\n", e.path1().c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "vkllm: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vkllm: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
