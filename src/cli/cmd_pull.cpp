// vkllm pull org/name[@revision]: fetch a pinned checkpoint into the Hugging Face cache.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "hub/hub.h"

namespace vkllm::cli {

void add_pull(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "pull",
      "Download a model's config, tokenizer and safetensors into the Hugging Face cache (the "
      "layout huggingface_hub uses), verified against the hub's hashes.\n"
      "Environment: HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE, HF_TOKEN (or the token "
      "file under HF_HOME), HF_HUB_DOWNLOAD_TIMEOUT. Prints the snapshot directory last.");
  struct Args {
    std::string spec, cache_dir, endpoint;
    bool offline = false, json = false, quiet = false;
    int retries = 5;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("model", args->spec, "org/name[@revision] (branch, tag or 40-hex commit)")
      ->required();
  cmd->add_flag("--offline", args->offline,
                "do not contact the hub: serve from the cache or say what is missing");
  cmd->add_flag("--json", args->json, "print the result as one JSON object on stdout");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bars");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "cache root (default: HF_HUB_CACHE, HF_HOME/hub)");
  cmd->add_option("--endpoint", args->endpoint, "hub URL (default: HF_ENDPOINT or huggingface.co)");
  cmd->add_option("--retries", args->retries, "retries per request on 5xx/timeouts (default 5)")
      ->check(CLI::Range(0, 20));
  cmd->callback([args] {
    PullOptions opts;
    opts.offline = args->offline;
    opts.cache_dir = args->cache_dir;
    opts.endpoint = args->endpoint;
    opts.progress = !args->quiet && !args->json;
    opts.max_retries = args->retries;
    PullResult r = hub_pull(args->spec, opts);
    if (args->json) {
      nlohmann::json j = {{"repo", r.repo},       {"revision", r.revision},
                          {"commit", r.commit},   {"snapshot_dir", r.snapshot_dir},
                          {"offline", r.offline}, {"files", nlohmann::json::array()}};
      for (const auto& f : r.files)
        j["files"].push_back({{"name", f.name},
                              {"path", f.path},
                              {"etag", f.etag},
                              {"size", f.size},
                              {"downloaded", f.downloaded}});
      std::printf("%s\n", j.dump(1).c_str());
      return;
    }
    size_t fetched = 0;
    uint64_t bytes = 0;
    for (const auto& f : r.files) {
      if (f.downloaded) ++fetched;
      bytes += f.size;
    }
    std::fprintf(stderr, "%s@%s -> commit %s: %zu files (%.1f MiB), %zu downloaded%s\n",
                 r.repo.c_str(), r.revision.c_str(), r.commit.c_str(), r.files.size(),
                 double(bytes) / (1024.0 * 1024.0), fetched, r.offline ? " (offline)" : "");
    std::printf("%s\n", r.snapshot_dir.c_str());
  });
}

}  // namespace vkllm::cli
