#include "serve/tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>

#include "serve/openai.h"

namespace vkllm::serve {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad_tool(const std::string& param, const std::string& message) {
  throw HttpError(400, message, param, "invalid_value");
}

const json* tool_field(const json& o, const char* name) {
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// OpenAI's function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

constexpr size_t kMaxTools = 128, kMaxCalls = 64;

}  // namespace

ToolSpec parse_tools(const std::string& body, const json& j) {
  for (const char* legacy : {"functions", "function_call"})
    if (tool_field(j, legacy))
      bad_tool(legacy,
               fmt::format("'{}' is not supported (use 'tools' and 'tool_choice')", legacy));
  ToolSpec t;
  if (const json* tools = tool_field(j, "tools")) {
    if (!tools->is_array() || tools->size() > kMaxTools)
      bad_tool("tools", fmt::format("'tools' must be an array of at most {} tools", kMaxTools));
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!tool.is_object() || tool.value("type", json()) != "function")
        bad_tool(p + ".type", "'" + p + "' must be {\"type\": \"function\", \"function\": {...}}");
      const json* fn = tool_field(tool, "function");
      if (!fn || !fn->is_object())
        bad_tool(p + ".function", "'" + p + ".function' must be an object");
      const json* name = tool_field(*fn, "name");
      if (!name || !name->is_string() || !valid_name(name->get<std::string>()))
        bad_tool(p + ".function.name",
                 "'" + p +
                     ".function.name' must be 1 to 64 letters, digits, '_' or "
                     "'-'");
      if (const json* d = tool_field(*fn, "description"); d && !d->is_string())
        bad_tool(p + ".function.description", "'" + p + ".function.description' must be a string");
      if (const json* ps = tool_field(*fn, "parameters"); ps && !ps->is_object())
        bad_tool(p + ".function.parameters",
                 "'" + p + ".function.parameters' must be a JSON Schema object");
      if (const json* s = tool_field(*fn, "strict"); s && !s->is_boolean())
        bad_tool(p + ".function.strict", "'" + p + ".function.strict' must be true or false");
      const std::string n = name->get<std::string>();
      if (std::find(t.names.begin(), t.names.end(), n) != t.names.end())
        bad_tool(p + ".function.name", "two tools are named \"" + n + "\"");
      t.names.push_back(n);
    }
    // The text rendered into the prompt keeps the client's key order (json sorts keys).
    if (!t.names.empty()) t.tools_json = ojson::parse(body).at("tools").dump();
  }
  if (const json* c = tool_field(j, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "auto")
        t.choice = ToolChoice::Auto;
      else if (s == "none")
        t.choice = ToolChoice::None;
      else if (s == "required")
        t.choice = ToolChoice::Required;
      else
        bad_tool(
            "tool_choice",
            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": NAME}}");
    } else {
      const json* fn = c->is_object() && c->value("type", json()) == "function"
                           ? tool_field(*c, "function")
                           : nullptr;
      const json* name = fn && fn->is_object() ? tool_field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        bad_tool(
            "tool_choice",
            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": NAME}}");
      t.choice = ToolChoice::Named;
      t.choice_name = name->get<std::string>();
      if (std::find(t.names.begin(), t.names.end(), t.choice_name) == t.names.end())
        bad_tool("tool_choice",
                 "'tool_choice' names \"" + t.choice_name + "\", which is not in 'tools'");
    }
    if (t.choice == ToolChoice::Required && t.names.empty())
      bad_tool("tool_choice", "'tool_choice' is \"required\" but no 'tools' are given");
  }
  if (const json* pc = tool_field(j, "parallel_tool_calls")) {
    if (!pc->is_boolean())
      bad_tool("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    t.parallel = pc->get<bool>();
  }
  return t;
}

ChatTurn parse_turn(const json& m, const std::string& p) {
  if (!m.is_object()) bad_tool(p, "'" + p + "' must be an object");
  const json* role = tool_field(m, "role");
  if (!role || !role->is_string() || role->get<std::string>().empty())
    bad_tool(p + ".role", "'" + p + ".role' must be a non-empty string");
  ChatTurn t;
  t.role = role->get<std::string>();
  if (t.role == "developer") t.role = "system";
  if (t.role != "system" && t.role != "user" && t.role != "assistant" && t.role != "tool")
    bad_tool(p + ".role",
             fmt::format("'{}.role' is \"{}\"; the roles are system (or developer), user, "
                         "assistant and tool",
                         p, role->get<std::string>()));
  if (const json* calls = tool_field(m, "tool_calls")) {
    if (t.role != "assistant")
      bad_tool(p + ".tool_calls", "only assistant messages have 'tool_calls'");
    if (!calls->is_array() || calls->size() > kMaxCalls)
      bad_tool(p + ".tool_calls",
               fmt::format("'{}.tool_calls' must be an array of at most {} calls", p, kMaxCalls));
    for (size_t k = 0; k < calls->size(); ++k) {
      const json& c = (*calls)[k];
      const std::string q = fmt::format("{}.tool_calls[{}]", p, k);
      const json* id = c.is_object() ? tool_field(c, "id") : nullptr;
      const json* fn = c.is_object() ? tool_field(c, "function") : nullptr;
      if (!id || !id->is_string() || id->get<std::string>().empty() || !fn || !fn->is_object() ||
          (tool_field(c, "type") && c["type"] != "function"))
        bad_tool(q,
                 "'" + q +
                     "' must be {\"id\": STRING, \"type\": \"function\", \"function\": {\"name\", "
                     "\"arguments\"}}");
      const json* name = tool_field(*fn, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        bad_tool(q + ".function.name", "'" + q + ".function.name' must be a non-empty string");
      const json* args = tool_field(*fn, "arguments");
      if (!args || !args->is_string())
        bad_tool(q + ".function.arguments",
                 "'" + q + ".function.arguments' must be a string (a JSON object's text)");
      const json parsed = json::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_object())
        bad_tool(q + ".function.arguments",
                 "'" + q + ".function.arguments' is not the text of a JSON object");
      t.tool_calls.push_back(
          {id->get<std::string>(), name->get<std::string>(), args->get<std::string>()});
    }
  }
  const json* c = tool_field(m, "content");
  if (c)
    t.content = content_text(*c, p + ".content");
  else if (t.tool_calls.empty())
    bad_tool(p + ".content", "'" + p + ".content' is required");
  if (t.role == "tool") {
    const json* id = tool_field(m, "tool_call_id");
    if (!id || !id->is_string() || id->get<std::string>().empty())
      bad_tool(p + ".tool_call_id",
               "'" + p + ".tool_call_id' must name the call this result answers");
    t.tool_call_id = id->get<std::string>();
  }
  return t;
}

void check_tool_history(const std::vector<ChatTurn>& turns) {
  std::set<std::string> ids;
  for (size_t i = 0; i < turns.size(); ++i) {
    for (const ChatToolCall& c : turns[i].tool_calls) ids.insert(c.id);
    if (turns[i].role == "tool" && !ids.count(turns[i].tool_call_id))
      bad_tool(fmt::format("messages[{}].tool_call_id", i),
               fmt::format("'messages[{}].tool_call_id' is \"{}\", which no earlier assistant "
                           "message's tool_calls has",
                           i, turns[i].tool_call_id));
  }
}

CallSyntax call_syntax_for(const std::string& architecture) {
  if (architecture == "llama") return CallSyntax::Llama3;
  if (architecture == "phi3") return CallSyntax::Phi4Mini;
  return CallSyntax::Qwen3;
}

ToolCallStream::ToolCallStream(CallSyntax syntax, std::vector<std::string> names, bool parallel)
    : syntax_(syntax), names_(std::move(names)), parallel_(parallel) {}

std::string ToolCallStream::push(std::string_view piece) {
  held_ += piece;
  if (in_call_) return {};
  std::string out;
  if (syntax_ == CallSyntax::Llama3) {
    // Llama 3.2 answers a call with a JSON object as its whole reply (or after <|python_tag|>).
    if (!decided_) {
      const size_t b = held_.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) return {};
      const std::string_view rest = std::string_view(held_).substr(b);
      constexpr std::string_view tag = "<|python_tag|>";
      if (rest[0] == '{' || rest.substr(0, tag.size()) == tag) {
        in_call_ = decided_ = true;
        return {};
      }
      if (tag.substr(0, rest.size()) == rest) return {};
      decided_ = true;
    }
    out.swap(held_);
    return out;
  }
  const std::string_view marker = syntax_ == CallSyntax::Qwen3 ? "<tool_call>" : "<|tool_call|>";
  if (const size_t k = held_.find(marker); k != std::string::npos) {
    out = held_.substr(0, k);
    held_.erase(0, k);
    in_call_ = true;
    return out;
  }
  // Hold back the longest end of the text that could begin the marker.
  size_t keep = std::min(marker.size() - 1, held_.size());
  while (keep > 0 && std::string_view(held_).substr(held_.size() - keep) != marker.substr(0, keep))
    --keep;
  out = held_.substr(0, held_.size() - keep);
  held_.erase(0, out.size());
  return out;
}

std::string forced_call_prefix(CallSyntax syntax) {
  switch (syntax) {
    case CallSyntax::Qwen3:
      return "<tool_call>\n";
    case CallSyntax::Phi4Mini:
      return "<|tool_call|>";
    case CallSyntax::Llama3:
      break;
  }
  return "";
}

json forced_call_schema(const ToolSpec& tools, CallSyntax syntax, bool any_arguments) {
  const json list = json::parse(tools.tools_json, nullptr, false);
  const char* key = syntax == CallSyntax::Llama3 ? "parameters" : "arguments";
  json calls = json::array();
  for (size_t i = 0; i < tools.names.size(); ++i) {
    const std::string& name = tools.names[i];
    if (tools.choice == ToolChoice::Named && name != tools.choice_name) continue;
    json args = {{"type", "object"}};
    if (!any_arguments && list.is_array() && i < list.size())
      if (const json* fn = tool_field(list[i], "function"))
        if (const json* ps = tool_field(*fn, "parameters"); ps && ps->is_object()) args = *ps;
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", name}}}, {key, args}}},
                     {"required", {"name", key}},
                     {"additionalProperties", false}});
  }
  json call = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  if (syntax != CallSyntax::Phi4Mini) return call;
  json array = {{"type", "array"}, {"items", call}, {"minItems", 1}};
  if (!tools.parallel) array["maxItems"] = 1;
  return array;
}

ToolCallStream::End ToolCallStream::finish() {
  End e;
  if (in_call_) e.calls = parse(held_);
  if (e.calls.empty())
    e.content.swap(held_);
  else if (!parallel_)
    e.calls.resize(1);
  held_.clear();
  in_call_ = false;
  decided_ = false;
  return e;
}

std::vector<ChatToolCall> ToolCallStream::parse(std::string_view region) const {
  std::vector<ChatToolCall> calls;
  // One call object: {"name": NAME, "arguments" (Llama: "parameters"): {...}}.
  const auto add = [&](const ojson& o) {
    if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) return false;
    const std::string name = o["name"].get<std::string>();
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) return false;
    const char* key = o.contains("arguments") ? "arguments" : "parameters";
    const ojson args = o.contains(key) ? o[key] : ojson::object();
    if (!args.is_object()) return false;
    calls.push_back(
        {new_call_id(), name, args.dump(-1, ' ', false, ojson::error_handler_t::replace)});
    return true;
  };
  const auto parse_json = [](std::string_view s) {
    return ojson::parse(s.begin(), s.end(), nullptr, false);
  };
  if (syntax_ == CallSyntax::Llama3) {
    region = trim_blanks(region);
    constexpr std::string_view tag = "<|python_tag|>";
    if (region.substr(0, tag.size()) == tag) region = trim_blanks(region.substr(tag.size()));
    if (!add(parse_json(region))) return {};
    return calls;
  }
  // Qwen3: <tool_call>\n{...}\n</tool_call> blocks; Phi-4-mini: <|tool_call|>[...]<|/tool_call|>.
  // Only blanks between and after them; the last may lack its closing tag (the reply stopped).
  const bool qwen = syntax_ == CallSyntax::Qwen3;
  const std::string_view open = qwen ? "<tool_call>" : "<|tool_call|>";
  const std::string_view close = qwen ? "</tool_call>" : "<|/tool_call|>";
  for (region = trim_blanks(region); !region.empty(); region = trim_blanks(region)) {
    if (region.substr(0, open.size()) != open) return {};
    region.remove_prefix(open.size());
    const size_t end = region.find(close);
    const std::string_view body = region.substr(0, end);
    region = end == std::string_view::npos ? std::string_view() : region.substr(end + close.size());
    const ojson j = parse_json(trim_blanks(body));
    if (qwen || j.is_object()) {
      if (!add(j)) return {};
    } else {
      if (!j.is_array() || j.empty()) return {};
      for (const ojson& o : j)
        if (!add(o)) return {};
    }
  }
  return calls;
}

std::string new_call_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

json tool_calls_json(const std::vector<ChatToolCall>& calls) {
  json a = json::array();
  for (const ChatToolCall& c : calls)
    a.push_back({{"id", c.id},
                 {"type", "function"},
                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return a;
}

std::vector<json> tool_call_deltas(const std::vector<ChatToolCall>& calls) {
  std::vector<json> out;
  constexpr size_t kPiece = 24;  // argument bytes a chunk (cut on UTF-8 boundaries)
  for (size_t i = 0; i < calls.size(); ++i) {
    const ChatToolCall& c = calls[i];
    out.push_back({{"tool_calls",
                    {{{"index", i},
                      {"id", c.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", ""}}}}}}});
    for (size_t b = 0; b < c.arguments.size();) {
      size_t e = std::min(b + kPiece, c.arguments.size());
      while (e < c.arguments.size() && (static_cast<unsigned char>(c.arguments[e]) & 0xC0) == 0x80)
        ++e;
      out.push_back(
          {{"tool_calls",
            {{{"index", i}, {"function", {{"arguments", c.arguments.substr(b, e - b)}}}}}}});
      b = e;
    }
  }
  return out;
}

}  // namespace vkllm::serve
