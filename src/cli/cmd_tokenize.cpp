// vkllm tokenize: text -> ids (or ids -> text) with a Hugging Face tokenizer.json, for people and
// scripts. --jsonl processes a batch (one JSON string or id array per line) with one load.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "artifact/load.h"
#include "artifact/reader.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/tokenizer.h"

namespace vkllm::cli {

// The tokenizer embedded in an artifact and its chat renderer, through the load check every verb
// runs (load_artifact: the weights are not hashed here, only the metadata and the embedded files
// are read).
ArtifactLoad load_tokenizer_from_artifact(const std::string& path) {
  ReadOptions ro;
  ro.check_data_hash = false;
  ArtifactReader r(path, ro);
  return load_artifact(r);
}

namespace {

struct TokenizeArgs {
  std::string tokenizer, model, text, positional, family;
  bool ids = false, to_text = false, chat = false, jsonl = false, add_special = false,
       skip_special = false, no_think = false;
};

Tokenizer load_from_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return Tokenizer::from_dir(path);
  if (!fs::exists(path)) fail("{}: no such file or directory", path);
  std::string cfg = (fs::path(path).parent_path() / "tokenizer_config.json").string();
  return Tokenizer::from_files(path, fs::exists(cfg) ? cfg : std::string());
}

std::optional<ChatFamily> family_of(const Tokenizer& tok, const std::string& name) {
  if (name == "qwen3") return ChatFamily::Qwen3;
  if (name == "llama3") return ChatFamily::Llama3;
  if (name == "phi4mini") return ChatFamily::Phi4Mini;
  if (!name.empty()) fail("--family: unknown chat family \"{}\" (qwen3, llama3, phi4mini)", name);
  // Recognize the family by its special tokens.
  if (tok.token_id("<|im_start|>")) return ChatFamily::Qwen3;
  if (tok.token_id("<|start_header_id|>")) return ChatFamily::Llama3;
  if (tok.token_id("<|assistant|>")) return ChatFamily::Phi4Mini;
  return std::nullopt;
}

// --tokenizer DIR --chat: the named or recognized native family, else the template of DIR's
// tokenizer_config.json (or chat_template.jinja). The tokenizer alone has no architecture: the
// renderer is made as for a Llama-architecture model with this tokenizer.
std::optional<ChatRenderer> renderer_for_dir(const std::string& path, const Tokenizer& tok) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path cfg = dir / "tokenizer_config.json", jinja = dir / "chat_template.jinja";
  std::string source =
      chat_template_of(fs::exists(cfg) ? read_text_file(cfg.string()) : std::string(),
                       fs::exists(jinja) ? read_text_file(jinja.string()) : std::string(), path);
  if (source.empty()) return std::nullopt;
  return ChatRenderer::make(Arch::Llama, tok, std::move(source), path);
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::vector<int32_t> parse_ids(const std::string& s, const std::string& where) {
  std::vector<int32_t> ids;
  std::string t = s;
  for (char& c : t)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(t);
  std::string w;
  while (in >> w) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0 || v > INT32_MAX) fail("{}: \"{}\" is not a token id", where, w);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void run(const TokenizeArgs& a) {
  if (a.tokenizer.empty() == a.model.empty())
    fail("tokenize: give exactly one of --tokenizer PATH or --model ARTIFACT");
  std::optional<ArtifactLoad> artifact;
  if (!a.model.empty()) artifact.emplace(load_tokenizer_from_artifact(a.model));
  const Tokenizer tok = artifact ? std::move(artifact->tokenizer) : load_from_path(a.tokenizer);
  // --chat: --family names a native format; otherwise the artifact's renderer, or the family the
  // tokenizer's special tokens show, or the template of the tokenizer's folder.
  std::optional<ChatFamily> family;
  std::optional<ChatRenderer> renderer;
  if (a.chat) {
    if (!a.family.empty() || !artifact) family = family_of(tok, a.family);
    if (artifact && !family) renderer = std::move(artifact->chat);
    if (!family && !renderer) renderer = renderer_for_dir(a.tokenizer, tok);
    if (!family && !renderer)
      fail("--chat: this tokenizer has no chat template and no known family; pass --family");
  }
  const bool decode = a.to_text;
  auto encode_one = [&](const std::string& text) {
    std::string input = text;
    if (a.chat) {
      ChatOptions opt;
      opt.disable_thinking = a.no_think;
      const std::vector<ChatMessage> msgs{{"user", text}};
      input = family ? apply_chat_template(*family, msgs, opt) : renderer->render(msgs, opt);
    }
    return tok.encode(input, a.add_special);
  };
  if (a.jsonl) {
    std::string line;
    size_t n = 0;
    while (std::getline(std::cin, line)) {
      ++n;
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        fail("stdin line {}: not valid JSON", n);
      }
      if (decode) {
        if (!j.is_array()) fail("stdin line {}: expected a JSON array of ids", n);
        std::vector<int32_t> ids;
        for (const auto& x : j) {
          if (!x.is_number_integer()) fail("stdin line {}: ids must be integers", n);
          ids.push_back(x.get<int32_t>());
        }
        std::cout << nlohmann::json(tok.decode(ids, a.skip_special))
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << '\n';
      } else {
        if (!j.is_string()) fail("stdin line {}: expected a JSON string", n);
        std::cout << ids_json(encode_one(j.get<std::string>())) << '\n';
      }
    }
    return;
  }
  if (!a.text.empty() && !a.positional.empty())
    fail("tokenize: give the input once (--text or an argument)");
  std::string input = a.text.empty() ? a.positional : a.text;
  if (a.text.empty() && a.positional.empty()) {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    input = ss.str();
  }
  if (decode) {
    std::cout << tok.decode(parse_ids(input, "input"), a.skip_special);
    std::cout.flush();
    return;
  }
  std::vector<int32_t> ids = encode_one(input);
  if (a.ids) {
    std::cout << ids_json(ids) << '\n';
    return;
  }
  // Default: one token per line, id and its text (JSON-quoted so whitespace stays visible).
  for (int32_t id : ids) {
    nlohmann::json t = tok.decode(std::vector<int32_t>{id});
    std::cout << id << '\t' << t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << '\n';
  }
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand(
      "tokenize", "Encode text to token ids (or decode ids) with a model's tokenizer");
  cmd->footer(
      "Input: --text TEXT, a TEXT argument, or stdin. Default output: one `id<TAB>\"token text\"`\n"
      "line per token. --ids prints the JSON array of ids. --decode turns ids (JSON array or\n"
      "whitespace/comma separated) back into text. --jsonl: every stdin line is a JSON string, "
      "every\n"
      "output line the JSON array of its ids (with --decode: id arrays in, JSON strings out).\n"
      "No special tokens are added unless --add-special (Llama: <|begin_of_text|>).\n"
      "Example: vkllm tokenize --tokenizer .fixtures/qwen3 --chat --ids 'What is the capital of "
      "France?'");
  cmd->add_option(
      "--tokenizer", a->tokenizer,
      "Directory holding tokenizer.json (+ tokenizer_config.json), or the tokenizer.json file");
  cmd->add_option("--model,-m", a->model, "A .vkllm artifact (its embedded tokenizer)");
  cmd->add_flag("--ids", a->ids, "Print the ids as one JSON array");
  cmd->add_option("--text", a->text, "Text to encode (instead of an argument or stdin)");
  cmd->add_flag("--decode", a->to_text, "Decode: input is token ids, output is text");
  cmd->add_flag("--chat", a->chat, "Wrap the input as one user turn in the model's chat template");
  cmd->add_option(
      "--family", a->family,
      "Native chat format for --chat: qwen3 | llama3 | phi4mini (default: an artifact's own "
      "renderer, else the family its tokens show, else the folder's chat template)");
  cmd->add_flag("--no-think", a->no_think,
                "Qwen3 --chat: empty <think></think> block (enable_thinking=false)");
  cmd->add_flag("--jsonl", a->jsonl,
                "Batch mode over stdin lines (JSON strings in, JSON id arrays out)");
  cmd->add_flag("--add-special", a->add_special,
                "Run the post-processor (Llama: prepend <|begin_of_text|>)");
  cmd->add_flag("--skip-special", a->skip_special, "With --decode: drop special tokens");
  cmd->add_option("input", a->positional, "Text to encode (or ids to decode); default: read stdin");
  cmd->callback([a] {
    if (a->ids && a->to_text) fail("tokenize: --ids and --decode exclude each other");
    if (a->jsonl && (!a->text.empty() || !a->positional.empty()))
      fail("tokenize: --jsonl reads stdin only");
    run(*a);
  });
}

}  // namespace vkllm::cli
