// vkllm verify model.vkllm [--recipe R] [--max-size 770MiB] [--json]: exit 1 with the reasons when
// the artifact does not deliver what its recipe promises (src/artifact/verify.h).
#include <cstdio>
#include <map>
#include <memory>

#include "artifact/verify.h"
#include "cli/commands.h"
#include "core/error.h"

namespace vkllm::cli {

namespace {

struct VerifyArgs {
  std::string path, recipe, max_size;
  bool json = false;
};

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
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
