// ChatRenderer: the checkpoint's Jinja chat template, or a native renderer for the seed families
// whose prompt format vkllm fixes (chat.cpp). The conversation is handed to the template in the
// shape transformers and the OpenAI API use: {"role", "content"}, an assistant's
// "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": <object>}}] and a
// tool result's "tool_call_id"; `tools` is the request's array of OpenAI tool objects.
#include "tokenizer/chat_render.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/template.h"

namespace vkllm {

namespace {

using ojson = nlohmann::ordered_json;

ojson parse_json(const std::string& text, const std::string& where, const char* what) {
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) fail("{}: chat template: {} is not valid JSON", where, what);
  return j;
}

// The seed families keep their native renderer where the checkpoint's template is not the format
// vkllm promises: Llama 3 renders the plain Llama 3 format by default (docs/design.md section 1;
// the Llama 3.2 template always adds a dated system block), and Phi-4-mini's template has no
// place for tool definitions or calls (vkllm writes them as its model card shows). Both are
// recognized by the architecture, the family's special tokens and a template (if any) written in
// them, so a Llama-architecture checkpoint with another format (SmolLM2 and SmolLM3's ChatML,
// Mistral's [INST]) gets its own template.
std::optional<ChatFamily> native_override(Arch arch, const Tokenizer& tok,
                                          std::string_view source) {
  const auto speaks = [&](std::string_view marker) {
    return source.empty() || source.find(marker) != std::string_view::npos;
  };
  if (arch == Arch::Llama && tok.token_id("<|start_header_id|>") && tok.token_id("<|eot_id|>") &&
      speaks("<|start_header_id|>"))
    return ChatFamily::Llama3;
  if (arch == Arch::Phi3 && tok.token_id("<|assistant|>") && tok.token_id("<|end|>") &&
      speaks("<|assistant|>"))
    return ChatFamily::Phi4Mini;
  return std::nullopt;
}

// Without a template: the native renderer of the architecture's seed family, if it has one.
std::optional<ChatFamily> native_fallback(Arch arch, const Tokenizer& tok) {
  if (arch == Arch::Qwen3 && tok.token_id("<|im_start|>")) return ChatFamily::Qwen3;
  return native_override(arch, tok, "");
}

}  // namespace

std::string chat_template_of(std::string_view tokenizer_config_json,
                             std::string_view chat_template_jinja, const std::string& where) {
  if (!chat_template_jinja.empty()) return std::string(chat_template_jinja);
  if (tokenizer_config_json.empty()) return {};
  const nlohmann::json cfg = nlohmann::json::parse(tokenizer_config_json, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    fail("{}: tokenizer_config.json is not a JSON object", where);
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") ||
          !t.at("name").is_string() || !t.at("template").is_string())
        fail(
            "{}: tokenizer_config.json chat_template: each entry must be {{\"name\": string, "
            "\"template\": string}}",
            where);
      if (t.at("name") == "default") return t.at("template").get<std::string>();
    }
    fail("{}: tokenizer_config.json chat_template: the list has no \"default\" template", where);
  }
  fail("{}: tokenizer_config.json chat_template must be a string or a list of named templates",
       where);
}

ChatRenderer ChatRenderer::make(Arch arch, const Tokenizer& tok, std::string template_source,
                                const std::string& where) {
  ChatRenderer r;
  r.where_ = where;
  if (auto id = tok.bos_id()) r.bos_ = tok.token(*id);
  if (auto id = tok.eos_id()) r.eos_ = tok.token(*id);
  r.native_ = native_override(arch, tok, template_source);
  if (r.native_) return r;
  if (template_source.empty()) {
    r.native_ = native_fallback(arch, tok);
    return r;
  }
  r.has_template_ = true;
  try {
    r.template_ = std::make_shared<const tmpl::Template>(tmpl::Template::parse(template_source));
  } catch (const tmpl::TemplateError& e) {
    r.template_error_ = e.what();
  }
  return r;
}

std::string ChatRenderer::describe() const {
  if (native_) return fmt::format("native {} format", chat_family_name(*native_));
  if (!has_template_) return "none (the checkpoint has no chat template)";
  if (!template_)
    return "the checkpoint's chat template (it does not parse: " + template_error_ + ")";
  return "the checkpoint's chat template (Jinja)";
}

std::string ChatRenderer::render(const std::vector<ChatMessage>& msgs,
                                 const ChatOptions& opt) const {
  if (native_) return apply_chat_template(*native_, msgs, opt);
  if (!has_template_)
    fail(
        "{}: the checkpoint has no chat template (tokenizer_config.json chat_template or "
        "chat_template.jinja): give a raw prompt",
        where_);
  if (!template_) fail("{}: chat template: {}", where_, template_error_);
  ojson messages = ojson::array();
  for (const ChatMessage& m : msgs) {
    ojson j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ChatToolCall& c : m.tool_calls)
        calls.push_back(
            {{"id", c.id},
             {"type", "function"},
             {"function",
              {{"name", c.name},
               {"arguments", parse_json(c.arguments, where_, "a tool call's arguments")}}}});
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(j));
  }
  ojson ctx = {{"messages", std::move(messages)},
               {"add_generation_prompt", opt.add_generation_prompt},
               {"bos_token", bos_},
               {"eos_token", eos_}};
  if (!opt.tools.empty()) {
    ojson tools = parse_json(opt.tools, where_, "the tools");
    if (!tools.is_array()) fail("{}: chat template: the tools must be a JSON array", where_);
    if (!tools.empty()) ctx["tools"] = std::move(tools);
  }
  if (opt.disable_thinking) ctx["enable_thinking"] = false;
  if (opt.llama_date) ctx["date_string"] = *opt.llama_date;
  try {
    return template_->render(ctx);
  } catch (const tmpl::TemplateError& e) {
    fail("{}: chat template: {}", where_, e.what());
  }
}

}  // namespace vkllm
