// vkllm verify model.vkllm [--recipe R] [--max-size 770MiB] [--json]: exit 1 with the reasons when
// the artifact does not deliver what its recipe promises (src/artifact/verify.h).
// With --agree PROMPT_FILE it also decodes greedily on Vulkan against the CPU reference on the
// same artifact (src/runtime/agreement.h).
#include <cstdio>
#include <map>
#include <memory>

#include "artifact/verify.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "export/lora.h"
#include "runtime/agreement.h"
#include "tokenizer/tokenizer.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm::cli {

namespace {

struct VerifyArgs {
  std::string path, recipe, max_size;
  bool json = false;
  std::string agree_prompt_file, device;
  int agree_tokens = 50;
  double max_nmse = 0;  // 0: by recipe (agreement_bounds)
};

// Vulkan against the CPU reference on the artifact's own program and weights.
nlohmann::json agreement(const VerifyArgs& a, const ArtifactReader& r) {
#ifdef VKLLM_WITH_VULKAN
  const Tokenizer tok = Tokenizer::from_text(
      std::string(r.file("tokenizer.json")),
      r.has_file("tokenizer_config.json") ? std::string(r.file("tokenizer_config.json")) : "{}",
      a.path);
  const auto prompt = tok.encode(read_text_file(a.agree_prompt_file), false);
  if (prompt.empty()) fail("{}: the prompt encodes to no tokens", a.agree_prompt_file);
  if (static_cast<int64_t>(prompt.size()) + a.agree_tokens > r.program().max_ctx)
    fail("{}: prompt ({} tokens) plus {} new tokens exceed the context length {}",
         a.agree_prompt_file, prompt.size(), a.agree_tokens, r.program().max_ctx);
  VulkanOptions vo;
  vo.device = a.device;
  auto vk = make_vulkan_executor(r.program(), r, vo);
  auto cpu = make_cpu_executor(r.program(), r), cpu2 = make_cpu_executor(r.program(), r);
  AgreementOptions o;
  o.max_new_tokens = a.agree_tokens;
  // The recipe's bounds (src/runtime/agreement.cpp, measured: docs/gates.md).
  o.bounds = agreement_bounds(r.recipe_name());
  if (a.max_nmse > 0) o.bounds.max_nmse = a.max_nmse;
  o.eos_ids.assign(r.desc().eos_ids.begin(), r.desc().eos_ids.end());
  const auto& logits = r.program().tensors[r.program().logits];
  const Agreement g = check_agreement(*vk, *cpu, cpu2.get(), prompt, logits.shape.back(), o);
  return {{"ok", g.ok},
          {"reason", g.reason},
          {"steps", g.steps},
          {"exact", g.exact},
          {"near_ties", g.near_ties},
          {"max_near_ties", g.max_near_ties},
          {"worst_tie_margin", g.worst_tie_margin},
          {"max_tie_margin", o.bounds.max_tie_margin},
          {"worst_topk_diff", g.worst_topk_diff},
          {"max_topk_diff", o.bounds.max_topk_diff},
          {"top_k", kAgreementTopK},
          {"worst_logits_nmse", g.worst_nmse},
          {"max_logits_nmse", o.bounds.max_nmse},
          {"greedy_tokens_equal", g.tokens_equal()},
          {"tokens", g.tokens},
          {"logits_nmse", g.nmse},
          {"topk_diff", g.topk_diff},
          {"reference_tokens", g.reference_tokens}};
#else
  (void)r;
  fail("--agree needs the Vulkan backend (this build has none)");
#endif
}

std::string mib(uint64_t b) {
  return fmt::format("{:.1f} MiB", b / 1048576.0);
}

void run(const VerifyArgs& a) {
  VerifyOptions o;
  o.recipe = a.recipe;
  if (!a.max_size.empty()) o.max_size = parse_size(a.max_size);
  VerifyReport rep;
  try {
    ArtifactReader r(a.path);  // checks the whole-file hash too
    rep = verify_artifact(r, o);
    if (r.metadata().contains("producer") && r.metadata()["producer"].contains("lora"))
      rep.summary["lora"] = r.metadata()["producer"]["lora"];  // a merged adapter (docs/lora.md)
    if (!a.agree_prompt_file.empty()) {
      rep.summary["agreement"] = agreement(a, r);
      if (!rep.summary["agreement"]["ok"].get<bool>()) {
        rep.ok = false;
        rep.reasons.push_back("Vulkan disagrees with the CPU reference: " +
                              rep.summary["agreement"]["reason"].get<std::string>());
      }
    }
  } catch (const Error& e) {
    if (!a.json) throw;
    nlohmann::json j = {{"file", a.path}, {"ok", false}, {"reasons", {e.what()}}};
    std::printf("%s\n", j.dump(2).c_str());
    throw CLI::RuntimeError(1);
  }
  const auto& s = rep.summary;
  if (a.json) {
    std::printf("%s\n", s.dump(2).c_str());
  } else {
    std::printf("%s: %s\n", a.path.c_str(), rep.ok ? "OK" : "FAILED");
    const auto& rc = s["recipe"];
    std::printf("  recipe     %s (linear group %d, embedding group %d, context %d)\n",
                rc["name"].get<std::string>().c_str(), rc.value("group_size", 0),
                rc.value("embedding_group", 0), s["max_context"].get<int>());
    std::printf("  model      %s, %d layers, hidden %d, vocab %d%s\n",
                s["model"]["hf_class"].get<std::string>().c_str(), s["model"]["layers"].get<int>(),
                s["model"]["hidden"].get<int>(), s["model"]["vocab"].get<int>(),
                s["model"]["tied_embeddings"].get<bool>() ? ", tied embeddings" : "");
    std::printf("  size       %s (%llu bytes)%s\n", mib(s["file_size"]).c_str(),
                static_cast<unsigned long long>(s["file_size"].get<uint64_t>()),
                o.max_size ? (", limit " + mib(o.max_size)).c_str() : "");
    std::string fam, back, dt;
    for (auto& [k, v] : s["op_families"].items())
      fam += fmt::format("{}{} {}", fam.empty() ? "" : ", ", k, v.get<int>());
    for (auto& [k, v] : s["backends"].items())
      back += fmt::format("{}{} {}", back.empty() ? "" : ", ", v.get<int>(), k);
    for (auto& [k, v] : s["weight_bytes_by_dtype"].items())
      dt += fmt::format("{}{} {}", dt.empty() ? "" : ", ", k, mib(v.get<uint64_t>()));
    std::printf("  ops        %zu (%s)\n", s["ops"].get<size_t>(), back.c_str());
    std::printf("  families   %s\n", fam.c_str());
    std::printf("  weights    %s\n", dt.c_str());
    std::printf("  integrity  xxh64 of the whole file checked\n");
    if (s.contains("lora")) std::printf("  lora       %s\n", lora_summary_line(s["lora"]).c_str());
    if (s.contains("agreement")) {
      const auto& g = s["agreement"];
      std::printf(
          "  agreement  Vulkan vs CPU, %d greedy steps: %d same token, %d near ties (limit %d, "
          "worst CPU margin %.3g, limit %.3g), worst top-%d logit diff %.3g (limit %.3g), worst "
          "logits NMSE %.3g (limit %.3g); greedy tokens %s\n",
          g["steps"].get<int>(), g["exact"].get<int>(), g["near_ties"].get<int>(),
          g["max_near_ties"].get<int>(), g["worst_tie_margin"].get<double>(),
          g["max_tie_margin"].get<double>(), g["top_k"].get<int>(),
          g["worst_topk_diff"].get<double>(), g["max_topk_diff"].get<double>(),
          g["worst_logits_nmse"].get<double>(), g["max_logits_nmse"].get<double>(),
          g["greedy_tokens_equal"].get<bool>() ? "identical" : "differ after a near tie");
    }
  }
  if (!rep.ok) {
    for (auto& why : rep.reasons)
      std::fprintf(stderr, "vkllm verify: %s: %s\n", a.path.c_str(), why.c_str());
    throw CLI::RuntimeError(1);
  }
}

}  // namespace

void add_verify(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand(
      "verify", "Check an artifact: integrity, GPU delegation, the recipe's op families, size");
  cmd->add_option("artifact", a->path, "The .vkllm file")->required();
  cmd->add_option("-r,--recipe", a->recipe,
                  "Expected recipe (default: the one recorded in the artifact)");
  cmd->add_option("--max-size", a->max_size,
                  "Fail when the file is larger (e.g. 770MiB, 1.5GiB, 800MB)");
  cmd->add_flag("--json", a->json, "Print the report as JSON on stdout");
  cmd->add_option("--agree", a->agree_prompt_file,
                  "Also decode this prompt file greedily on Vulkan and on the CPU reference and "
                  "check that they agree (the recipe's bounds, docs/gates.md: every Vulkan token "
                  "the CPU's argmax or a capped number of near ties, top-k logits and NMSE close)")
      ->check(CLI::ExistingFile);
  cmd->add_option("-n,--agree-tokens", a->agree_tokens, "New tokens for --agree")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option(
      "--max-nmse", a->max_nmse,
      "Largest logits NMSE --agree accepts (default: the recipe's bound, docs/gates.md)");
  cmd->add_option("--device", a->device, "Vulkan device index or name substring for --agree");
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
