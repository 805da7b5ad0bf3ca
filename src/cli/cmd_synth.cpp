// vkllm synth: deterministic synthetic Hugging Face checkpoints (docs/synth.md).
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "hf/synth.h"

namespace vkllm::cli {

namespace {

struct SynthArgs {
  bool list = false, json = false, quiet = false;
  std::string lora_dir, lora_base;  // --lora DIR: also the twin adapter (docs/lora.md)
  std::string lora_for;             // --lora-for FOLDER: only an adapter, for that checkpoint
  double lora_strength = 0.5;
  SynthOptions o;
  std::string max_shard = "2GB";
};

// "2GB" (10^9, as transformers' max_shard_size), "500MB", "1GiB", "123" (bytes).
uint64_t parse_shard_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i > 15) fail("--max-shard-size '{}': expected a number with an optional unit", s);
  uint64_t v = std::stoull(s.substr(0, i));
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const struct {
    const char* name;
    uint64_t mul;
  } units[] = {{"", 1},
               {"B", 1},
               {"KB", 1000},
               {"MB", 1000000},
               {"GB", 1000000000},
               {"KIB", 1ull << 10},
               {"MIB", 1ull << 20},
               {"GIB", 1ull << 30}};
  for (auto& u : units)
    if (unit == u.name) return v * u.mul;
  fail("--max-shard-size '{}': unknown unit '{}' (B, KB, MB, GB, KiB, MiB, GiB)", s, s.substr(i));
}

std::string human(uint64_t b) {
  if (b >= 1000000000ull) return fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9);
  return fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
}

void print_list(bool as_json) {
  if (as_json) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto& p : synth_presets())
      arr.push_back({{"name", p.name},
                     {"family", p.family},
                     {"hf_model", p.hf_model},
                     {"arch", p.arch},
                     {"tiny", p.tiny},
                     {"hidden_size", p.hidden},
                     {"num_hidden_layers", p.layers},
                     {"num_attention_heads", p.heads},
                     {"num_key_value_heads", p.kv_heads},
                     {"head_dim", p.head_dim},
                     {"intermediate_size", p.intermediate},
                     {"vocab_size", p.vocab},
                     {"params", synth_param_count(p)},
                     {"bf16_bytes", synth_param_count(p) * 2}});
    std::printf("%s\n", arr.dump(2).c_str());
    return;
  }
  std::printf("%-14s %-9s %-31s %6s %6s %7s %5s %6s %7s %14s %10s\n", "preset", "tokenizer",
              "mirrors", "hidden", "layers", "heads", "hdim", "inter", "vocab", "params", "bf16");
  for (auto& p : synth_presets()) {
    const uint64_t n = synth_param_count(p);
    std::printf("%-14s %-9s %-31s %6d %6d %3d/%-3d %5d %6d %7d %14llu %10s\n", p.name.c_str(),
                p.family.c_str(), p.hf_model.c_str(), p.hidden, p.layers, p.heads, p.kv_heads,
                p.head_dim, p.intermediate, p.vocab, static_cast<unsigned long long>(n),
                human(n * 2).c_str());
  }
}

void run(SynthArgs& a) {
  if (a.list) {
    print_list(a.json);
    return;
  }
  if (!a.lora_for.empty()) {  // an adapter alone, shaped by the folder's config.json
    if (!a.o.preset.empty()) fail("synth: --lora-for and --preset contradict each other");
    if (a.lora_dir.empty()) fail("synth: --lora-for needs --lora DIR (where the adapter goes)");
    SynthLoraOptions lo;
    lo.base_dir = a.lora_for;
    lo.out_dir = a.lora_dir;
    lo.seed = a.o.seed;
    lo.base_model = a.lora_base;
    lo.strength = a.lora_strength;
    nlohmann::json files = nlohmann::json::array();
    for (auto& f : synth_lora_write(lo)) files.push_back(a.lora_dir + "/" + f);
    if (a.json) {
      std::printf("%s\n", nlohmann::json({{"out_dir", a.lora_dir},
                                          {"base", a.lora_for},
                                          {"seed", a.o.seed},
                                          {"strength", a.lora_strength},
                                          {"files", files}})
                              .dump(2)
                              .c_str());
    } else {
      std::printf("wrote the LoRA adapter for %s into %s (seed %llu, strength %g)\n",
                  a.lora_for.c_str(), a.lora_dir.c_str(), static_cast<unsigned long long>(a.o.seed),
                  a.lora_strength);
    }
    return;
  }
  if (a.o.preset.empty()) fail("synth: --preset is required (see vkllm synth --list)");
  if (a.o.out_dir.empty()) fail("synth: -o DIR is required");
  if (!a.o.tokenizer_dir.empty() && a.o.no_tokenizer)
    fail("synth: --tokenizer-dir and --no-tokenizer contradict each other");
  a.o.max_shard_bytes = parse_shard_size(a.max_shard);
  const bool tty = !a.quiet && ::isatty(STDERR_FILENO);
  if (tty) {
    auto last = std::make_shared<int>(-1);
    const std::string name = a.o.preset;
    a.o.progress = [last, name](uint64_t done, uint64_t total) {
      const int pct = total ? static_cast<int>(done * 100 / total) : 100;
      if (pct == *last) return;
      *last = pct;
      std::fprintf(stderr, "\rsynth %s: %s / %s (%d%%)", name.c_str(), human(done).c_str(),
                   human(total).c_str(), pct);
      std::fflush(stderr);
    };
  }
  SynthResult r = synth_write(a.o);
  if (tty) std::fprintf(stderr, "\n");
  if (!a.lora_dir.empty()) {
    SynthLoraOptions lo;
    lo.preset = a.o.preset;
    lo.out_dir = a.lora_dir;
    lo.seed = a.o.seed;
    lo.base_model = a.lora_base;
    lo.strength = a.lora_strength;
    for (auto& f : synth_lora_write(lo)) r.files.push_back(a.lora_dir + "/" + f);
  }
  if (a.json) {
    nlohmann::json j = r.to_json();
    j["preset"] = a.o.preset;
    j["seed"] = a.o.seed;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("wrote %s: preset %s, seed %llu, %llu params (%s bf16) in %d shard%s%s\n",
              r.out_dir.c_str(), a.o.preset.c_str(), static_cast<unsigned long long>(a.o.seed),
              static_cast<unsigned long long>(r.params), human(r.weight_bytes).c_str(), r.shards,
              r.shards == 1 ? "" : "s",
              r.tokenizer_from.empty() ? ", no tokenizer"
                                       : (", tokenizer from " + r.tokenizer_from).c_str());
  for (auto& f : r.files) std::printf("  %s\n", f.c_str());
}

}  // namespace

void add_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand(
      "synth",
      "Write a deterministic synthetic checkpoint in the Hugging Face layout (config.json, "
      "generation_config.json, bf16 safetensors, tokenizer files). Same preset and seed give "
      "byte-identical files on any machine.");
  cmd->add_flag("--list", args->list, "List the presets and exit");
  cmd->add_option("--preset,-p", args->o.preset, "Preset name (see --list)");
  cmd->add_option("-o,--out", args->o.out_dir, "Output directory (created if missing)");
  cmd->add_option("--seed", args->o.seed, "Generator seed (default 0)");
  cmd->add_option("--tokenizer-dir", args->o.tokenizer_dir,
                  "Folder holding tokenizer.json and tokenizer_config.json (default: "
                  "<repo>/.fixtures/<family>/, written by tools/fixtures/make_fixtures.sh)");
  cmd->add_flag("--no-tokenizer", args->o.no_tokenizer,
                "Write weights and configs only (no tokenizer files)");
  cmd->add_flag("--force", args->o.force,
                "Write into a folder that holds other files too (an earlier synth output is "
                "rewritten without it; old weight files are always removed)");
  cmd->add_option("--max-shard-size", args->max_shard,
                  "Largest shard before splitting, as transformers' max_shard_size (default 2GB)");
  cmd->add_option("--threads", args->o.threads, "Generator threads (default: all cores)")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--lora", args->lora_dir,
                  "Also write the preset's deterministic LoRA adapter (peft layout, r 8, alpha 16, "
                  "every Linear of each layer) into this folder");
  cmd->add_option("--lora-base", args->lora_base,
                  "base_model_name_or_path the adapter records (default: the preset's model id, "
                  "or the --lora-for folder)");
  cmd->add_option(
      "--lora-for", args->lora_for,
      "Write only the adapter (with --lora DIR, no --preset), its shapes read from this "
      "checkpoint folder's config.json (a twin or a real model)");
  cmd->add_option("--lora-strength", args->lora_strength,
                  "The adapter's delta RMS relative to 1/sqrt(fan_in) (default 0.5; 0 writes B = "
                  "0, an adapter that changes nothing)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option(
         "--final-logit-softcapping", args->o.final_logit_softcapping,
         "Set config.json's final_logit_softcapping c: the logits become c * tanh(logits / "
         "c) (Gemma 2 style; default: the preset's, null)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "Machine-readable output (for --list and for the summary)");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress line");
  cmd->callback([args] { run(*args); });
}

}  // namespace vkllm::cli
