#include "artifact/load.h"

#include <nlohmann/json.hpp>

#include "artifact/xxh64.h"
#include "core/error.h"

namespace vkllm {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

ArtifactLoad load_artifact_parts(
    const std::string& path, const ModelDesc& desc,
    const std::vector<std::pair<std::string, std::string_view>>& files) {
  const std::string_view* tokenizer = nullptr;
  const std::string_view* compiled = nullptr;
  const std::string_view* tokenizer_config = nullptr;
  const std::string_view* chat_template_jinja = nullptr;
  for (const auto& [name, bytes] : files) {
    // The generation and model configs are provenance copies (the runtime reads the model
    // description), but a damaged copy is a damaged artifact.
    // (tokenizer.json, 2-10 MB, is not parsed twice: Tokenizer::from_text below refuses it
    // with its own one-line Error when it is not valid JSON.)
    if (ends_with(name, ".json") && name != "tokenizer.json" && !nlohmann::json::accept(bytes))
      fail("{}: the embedded {} is not valid JSON", path, name);
    if (name == "tokenizer.json" && !tokenizer) tokenizer = &bytes;
    if (name == "tokenizer.compiled" && !compiled) compiled = &bytes;
    if (name == "tokenizer_config.json" && !tokenizer_config) tokenizer_config = &bytes;
    if (name == "chat_template.jinja" && !chat_template_jinja) chat_template_jinja = &bytes;
  }
  if (!tokenizer) fail("{}: the artifact embeds no tokenizer", path);
  // The compiled form where the exporter embedded one made from this tokenizer.json (the same
  // tokenizer, loaded several times faster); otherwise (none, or one keyed by another
  // tokenizer.json) the tokenizer.json itself.
  const std::string config = tokenizer_config ? std::string(*tokenizer_config) : "{}";
  const bool use_compiled = compiled && Tokenizer::compiled_source_key(*compiled) ==
                                            xxh64(tokenizer->data(), tokenizer->size());
  Tokenizer tok = use_compiled ? Tokenizer::from_compiled(*compiled, config, path)
                               : Tokenizer::from_text(std::string(*tokenizer), config, path);
  // The chat template: parsed here, so a broken one is known at load; its error is raised when a
  // chat prompt is rendered (raw prompts still run).
  std::string source =
      chat_template_of(tokenizer_config ? *tokenizer_config : std::string_view(),
                       chat_template_jinja ? *chat_template_jinja : std::string_view(), path);
  ChatRenderer chat = ChatRenderer::make(desc.arch, tok, std::move(source), path);
  return {std::move(tok), std::move(chat)};
}

ArtifactLoad load_artifact(const ArtifactReader& r) {
  std::vector<std::pair<std::string, std::string_view>> files;
  for (const std::string& name : r.file_names()) files.emplace_back(name, r.file(name));
  return load_artifact_parts(r.path(), r.desc(), files);
}

}  // namespace vkllm
