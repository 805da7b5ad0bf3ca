// vkllm export <hf-dir> --recipe R -o model.vkllm: the streaming exporter (src/export/exporter.h).
// The artifact is put at -o only when it loads as `vkllm run` loads it (the load check of
// src/artifact/load.h, run by the writer); otherwise the runtime's one-line message, exit 1.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "export/exporter.h"
#include "export/lora.h"
#include "hub/hub.h"

namespace vkllm::cli {

namespace {

struct ExportArgs {
  std::string source, output;
  RecipeOptions recipe;
  bool json = false, plan = false, quiet = false;
  std::string lora;  // --lora ADAPTER (docs/lora.md)
  double lora_scale = 1.0;
};

std::string recipe_list() {
  std::string s;
  for (auto& r : recipe_names()) s += (s.empty() ? "" : ", ") + r;
  return s;
}

void progress_bar(const ExportProgress& p) {
  const int width = 30;
  const double f =
      p.total_bytes ? static_cast<double>(p.bytes) / static_cast<double>(p.total_bytes) : 1.0;
  const int fill = static_cast<int>(f * width);
  std::string name =
      p.tensor.size() > 40 ? "..." + p.tensor.substr(p.tensor.size() - 37) : p.tensor;
  std::fprintf(stderr, "\rexport [%s%s] %3d%% %zu/%zu %-40s", std::string(fill, '#').c_str(),
               std::string(width - fill, '.').c_str(), static_cast<int>(f * 100), p.job, p.jobs,
               p.job == p.jobs ? "done" : name.c_str());
  if (p.job == p.jobs) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void run(const ExportArgs& args) {
  ExportArgs a = args;
  PullOptions po;
  po.progress = !a.quiet && !a.json;
  // --lora: the adapter first (a folder or a hub id); without BASE, the base it names.
  std::unique_ptr<LoraMerge> lora;
  LoraSource lora_src;
  if (!a.lora.empty()) {
    lora_src = resolve_lora_source(a.lora, po);
    if (a.source.empty()) a.source = lora_base_of(lora_src.dir);
  } else if (a.source.empty()) {
    fail(
        "export: the base model (a folder or a model id) is required unless --lora names an "
        "adapter that records its base");
  }
  a.source = model_dir_or_pull(a.source, po);  // a model id (org/name[@rev]) is pulled first
  if (!a.lora.empty()) lora = open_lora_merge(lora_src, a.source, a.lora_scale);
  if (a.plan) {
    ExportResult r = plan_checkpoint(a.source, a.recipe, lora.get());
    if (a.json) {
      nlohmann::json j = r.summary;
      j["file_size"] = r.file_size;
      j["plan_only"] = true;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s with %s: %llu bytes (%.1f MiB), %zu ops (planned, nothing written)\n",
                  a.source.c_str(), a.recipe.recipe.c_str(),
                  static_cast<unsigned long long>(r.file_size), r.file_size / 1048576.0,
                  r.summary["ops"].get<size_t>());
    }
    return;
  }
  if (a.output.empty()) fail("export: -o/--output is required");
  const bool bar = !a.quiet && !a.json && ::isatty(STDERR_FILENO);
  std::function<void(const ExportProgress&)> cb;
  if (bar) cb = progress_bar;
  ExportResult r =
      export_checkpoint(a.source, a.output, a.recipe, cb, int64_t(8) << 20, lora.get());
  if (a.json) {
    nlohmann::json j = r.summary;
    if (lora) j["lora"] = lora->metadata();
    j["output"] = r.path;
    j["file_size"] = r.file_size;
    j["seconds"] = r.seconds;
    j["peak_rss"] = r.peak_rss;
    std::printf("%s\n", j.dump(2).c_str());
  } else if (!a.quiet) {
    std::printf("wrote %s: %.1f MiB, recipe %s, %zu ops, %.1f s, peak RSS %.0f MiB\n",
                r.path.c_str(), r.file_size / 1048576.0, r.recipe.c_str(),
                r.summary["ops"].get<size_t>(), r.seconds, r.peak_rss / 1048576.0);
    if (lora) std::printf("merged LoRA %s\n", lora_summary_line(lora->metadata()).c_str());
  }
}

}  // namespace

void add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export", "Export a Hugging Face checkpoint to one quantized .vkllm artifact");
  cmd->add_option("source", a->source,
                  "Hugging Face model folder (config.json, *.safetensors, tokenizer.json) or model "
                  "id; may be omitted with --lora (the adapter's base_model_name_or_path)");
  cmd->add_option("-r,--recipe", a->recipe.recipe, "Recipe: " + recipe_list())->required();
  cmd->add_option(
      "-o,--output", a->output,
      "Output artifact path (written atomically, and only if it loads as `vkllm run` would "
      "load it)");
  cmd->add_option("--group-size", a->recipe.group_size, "Int4 group size of the linear layers")
      ->default_val(128);
  cmd->add_option("--embedding-bits", a->recipe.embedding_bits,
                  "Embedding bits of -embedding recipes (4)")
      ->default_val(4);
  cmd->add_option("--embedding-group", a->recipe.embedding_group,
                  "Embedding group size of -embedding recipes")
      ->default_val(32);
  cmd->add_option("--max-context", a->recipe.max_context,
                  "KV cache length (capped by the model's max_position_embeddings)")
      ->default_val(2048);
  cmd->add_option("--lora", a->lora,
                  "Merge this LoRA adapter (peft / Unsloth folder or hub id: adapter_config.json "
                  "+ adapter_model.safetensors) into the base in fp32 before quantizing "
                  "(docs/lora.md)");
  cmd->add_option("--lora-scale", a->lora_scale,
                  "Multiplier S of the adapter's delta: W + S * (alpha / r) * B A")
      ->default_val(1.0);
  cmd->add_flag("--json", a->json, "Print a JSON summary on stdout");
  cmd->add_flag("--plan", a->plan,
                "Only plan: print the exact artifact size from config.json, write nothing");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar and no summary line");
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
