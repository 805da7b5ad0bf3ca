#include "serve/anthropic.h"

#include <fmt/format.h>

#include <random>

namespace vkllm::serve {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // tool inputs and schemas keep their key order

namespace {

[[noreturn]] void bad_message(const std::string& param, const std::string& message) {
  throw HttpError(400, message, param, "invalid_value");
}

const ojson* msg_field(const ojson& o, const char* name) {
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

double msg_number(const ojson& o, const char* name, double lo, double hi, double dflt) {
  const ojson* v = msg_field(o, name);
  if (!v) return dflt;
  if (!v->is_number()) bad_message(name, fmt::format("'{}' must be a number", name));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    bad_message(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, d, lo, hi));
  return d;
}

int64_t msg_integer(const ojson& o, const char* name, int64_t lo, int64_t hi) {
  const ojson* v = msg_field(o, name);
  if (!v || !v->is_number_integer() ||
      (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    bad_message(name, fmt::format("'{}' must be an integer in [{}, {}]", name, lo, hi));
  return v->get<int64_t>();
}

// A string, or an array of {"type": "text", "text"} blocks.
std::string text_of(const ojson& c, const std::string& p) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_message(p, "'" + p + "' must be a string or an array of text blocks");
  std::string out;
  for (const ojson& b : c) {
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") ||
        !b["text"].is_string())
      bad_message(p, "'" + p + "' blocks must be {\"type\": \"text\", \"text\": STRING}");
    out += b["text"].get<std::string>();
  }
  return out;
}

// One message's blocks as turns: user text, tool results (each a tool turn, before the text that
// follows them), assistant text and tool_use calls.
void add_message(const ojson& m, const std::string& p, std::vector<ChatTurn>& turns) {
  if (!m.is_object()) bad_message(p, "'" + p + "' must be an object");
  const std::string role = m.value("role", "");
  if (role != "user" && role != "assistant")
    bad_message(p + ".role", "'" + p + ".role' must be \"user\" or \"assistant\"");
  const ojson* c = msg_field(m, "content");
  if (!c) bad_message(p + ".content", "'" + p + ".content' is required");
  if (c->is_string()) {
    turns.push_back({role, c->get<std::string>()});
    return;
  }
  if (!c->is_array())
    bad_message(p + ".content", "'" + p + ".content' must be a string or an array");
  ChatTurn t{role, ""};
  for (size_t i = 0; i < c->size(); ++i) {
    const ojson& b = (*c)[i];
    const std::string q = fmt::format("{}.content[{}]", p, i);
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text") {
      const ojson* text = msg_field(b, "text");
      if (!text || !text->is_string())
        bad_message(q + ".text", "'" + q + ".text' must be a string");
      t.content += text->get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      const ojson* id = msg_field(b, "id");
      const ojson* name = msg_field(b, "name");
      const ojson* input = msg_field(b, "input");
      if (!id || !id->is_string() || id->get<std::string>().empty() || !name ||
          !name->is_string() || name->get<std::string>().empty() || !input || !input->is_object())
        bad_message(q, "'" + q +
                           "' must be {\"type\": \"tool_use\", \"id\": STRING, \"name\": STRING, "
                           "\"input\": OBJECT}");
      t.tool_calls.push_back({id->get<std::string>(), name->get<std::string>(), input->dump()});
    } else if (type == "tool_result" && role == "user") {
      const ojson* id = msg_field(b, "tool_use_id");
      if (!id || !id->is_string() || id->get<std::string>().empty())
        bad_message(q + ".tool_use_id",
                    "'" + q + ".tool_use_id' must name the tool_use it answers");
      if (!t.content.empty())
        bad_message(q, "'" + q + "': tool results come before the user's text");
      const ojson* rc = msg_field(b, "content");
      ChatTurn r{"tool", rc ? text_of(*rc, q + ".content") : std::string()};
      r.tool_call_id = id->get<std::string>();
      turns.push_back(std::move(r));
    } else {
      bad_message(q + ".type",
                  fmt::format("'{}.type' is \"{}\"; {} messages take text{} blocks", q, type, role,
                              role == "user" ? " and tool_result" : " and tool_use"));
    }
  }
  if (!t.content.empty() || !t.tool_calls.empty() || c->empty()) turns.push_back(std::move(t));
}

}  // namespace

Request parse_messages_request(const std::string& body) {
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!j.is_object()) throw HttpError(400, "the request body must be a JSON object");
  Request r;
  r.chat = true;
  if (const ojson* m = msg_field(j, "model"); m && !m->is_string())
    bad_message("model", "'model' must be a string");
  if (!msg_field(j, "max_tokens")) bad_message("max_tokens", "'max_tokens' is required");
  r.max_tokens = static_cast<int>(msg_integer(j, "max_tokens", 1, 1 << 20));
  if (const ojson* s = msg_field(j, "system")) {
    const std::string system = text_of(*s, "system");
    if (!system.empty()) r.messages.push_back({"system", system});
  }
  const ojson* msgs = msg_field(j, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty())
    bad_message("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < msgs->size(); ++i)
    add_message((*msgs)[i], fmt::format("messages[{}]", i), r.messages);
  try {
    check_tool_history(r.messages);
  } catch (const HttpError& e) {
    bad_message("messages", "a tool_result answers no earlier tool_use: " + std::string(e.what()));
  }
  // Tools: Anthropic's {name, description, input_schema} as OpenAI function tools (the prompt's).
  ojson tools = ojson::array();
  if (const ojson* ts = msg_field(j, "tools")) {
    if (!ts->is_array() || ts->size() > 128)
      bad_message("tools", "'tools' must be an array of at most 128 tools");
    for (size_t i = 0; i < ts->size(); ++i) {
      const ojson& t = (*ts)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) bad_message(p, "'" + p + "' must be an object");
      if (const ojson* type = msg_field(t, "type"); type && *type != "custom")
        bad_message(p + ".type", "'" + p + ".type': only custom (client) tools are supported");
      const ojson* schema = msg_field(t, "input_schema");
      if (!schema || !schema->is_object())
        bad_message(p + ".input_schema", "'" + p + ".input_schema' must be a JSON Schema object");
      ojson fn = {{"name", t.value("name", ojson())}};
      if (const ojson* d = msg_field(t, "description")) {
        if (!d->is_string())
          bad_message(p + ".description", "'" + p + ".description' must be a string");
        fn["description"] = *d;
      }
      fn["parameters"] = *schema;
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
  }
  // tool_choice: auto / any / tool {name} / none, and disable_parallel_tool_use.
  json openai = {{"tools", json::parse(tools.dump())}};
  if (const ojson* tc = msg_field(j, "tool_choice")) {
    const std::string type = tc->is_object() ? tc->value("type", "") : "";
    if (type == "auto" || type == "none")
      openai["tool_choice"] = type;
    else if (type == "any")
      openai["tool_choice"] = "required";
    else if (type == "tool" && tc->contains("name") && (*tc)["name"].is_string())
      openai["tool_choice"] = {{"type", "function"},
                               {"function", {{"name", (*tc)["name"].get<std::string>()}}}};
    else
      bad_message("tool_choice",
                  "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": "
                  "\"tool\", \"name\": NAME}");
    if (const ojson* d = msg_field(*tc, "disable_parallel_tool_use")) {
      if (!d->is_boolean())
        bad_message("tool_choice", "'disable_parallel_tool_use' must be true or false");
      openai["parallel_tool_calls"] = !d->get<bool>();
    }
  }
  r.tools = parse_tools(json(openai).dump(), openai);
  if (!r.tools.names.empty()) r.tools.tools_json = tools.dump();
  GenerationOptions& o = r.opts;
  o.temperature = static_cast<float>(msg_number(j, "temperature", 0, 1, 1.0));
  o.top_p = static_cast<float>(msg_number(j, "top_p", 0, 1, 1.0));
  if (msg_field(j, "top_k")) o.top_k = static_cast<int>(msg_integer(j, "top_k", 0, 1 << 24));
  if (const ojson* s = msg_field(j, "stop_sequences")) {
    if (!s->is_array() || s->size() > 16)
      bad_message("stop_sequences", "'stop_sequences' must be an array of at most 16 strings");
    for (const ojson& e : *s) {
      if (!e.is_string() || e.get<std::string>().empty())
        bad_message("stop_sequences", "'stop_sequences' must hold non-empty strings");
      o.stop.push_back(e.get<std::string>());
    }
  }
  if (const ojson* s = msg_field(j, "stream")) {
    if (!s->is_boolean()) bad_message("stream", "'stream' must be true or false");
    r.stream = s->get<bool>();
  }
  if (const ojson* t = msg_field(j, "thinking"); t && t->value("type", "") == "enabled")
    bad_message("thinking", "'thinking' is not supported");
  return r;
}

json anthropic_error(int status, const std::string& message) {
  const char* type = "api_error";
  switch (status) {
    case 400:
    case 405:
    case 415:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
    case 529:
      type = "overloaded_error";
      break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

namespace {

json usage_json(const MessageEnd& e) {
  return {{"input_tokens", e.input_tokens},
          {"output_tokens", e.output_tokens},
          {"cache_read_input_tokens", e.cached_tokens},
          {"cache_creation_input_tokens", 0}};
}

json tool_use_block(const ChatToolCall& c) {
  // The arguments were written by ordered_json: parsed again in that order.
  return {{"type", "tool_use"},
          {"id", c.id},
          {"name", c.name},
          {"input", json::parse(c.arguments, nullptr, false)}};
}

}  // namespace

json message_response(const std::string& id, const std::string& model, const MessageEnd& e) {
  json content = json::array();
  if (!e.text.empty() || e.calls.empty()) content.push_back({{"type", "text"}, {"text", e.text}});
  for (const ChatToolCall& c : e.calls) content.push_back(tool_use_block(c));
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", content},
          {"stop_reason", e.stop_reason},
          {"stop_sequence", e.stop_sequence.empty() ? json(nullptr) : json(e.stop_sequence)},
          {"usage", usage_json(e)}};
}

std::string sse_event(const std::string& type, const json& data) {
  return "event: " + type + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n\n";
}

std::string MessageStream::start(int input_tokens, int cached_tokens) const {
  MessageEnd e;
  e.input_tokens = input_tokens;
  e.cached_tokens = cached_tokens;
  json m = message_response(id_, model_, e);
  m["content"] = json::array();
  m["stop_reason"] = nullptr;
  return sse_event("message_start", {{"type", "message_start"}, {"message", m}});
}

std::string MessageStream::open_text() {
  text_open_ = true;
  return sse_event("content_block_start", {{"type", "content_block_start"},
                                           {"index", index_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string MessageStream::text(const std::string& piece) {
  if (piece.empty()) return {};
  std::string out;
  if (!text_open_) out += open_text();
  out += sse_event("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", index_},
                                           {"delta", {{"type", "text_delta"}, {"text", piece}}}});
  return out;
}

std::string MessageStream::finish(const MessageEnd& e) {
  std::string out;
  if (!text_open_ && e.calls.empty()) out += open_text();  // a reply has a text block at least
  if (text_open_) {
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
    text_open_ = false;
  }
  for (const ChatToolCall& c : e.calls) {
    json block = tool_use_block(c);
    block["input"] = json::object();
    out +=
        sse_event("content_block_start",
                  {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
    // The input's JSON text in pieces (cut on UTF-8 boundaries), as Anthropic streams it.
    for (const json& d : tool_call_deltas({c})) {
      const json& fn = d["tool_calls"][0]["function"];
      if (fn.contains("name")) continue;  // the call's opening delta: in content_block_start
      out += sse_event(
          "content_block_delta",
          {{"type", "content_block_delta"},
           {"index", index_},
           {"delta",
            {{"type", "input_json_delta"}, {"partial_json", fn["arguments"].get<std::string>()}}}});
    }
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
  }
  out += sse_event(
      "message_delta",
      {{"type", "message_delta"},
       {"delta",
        {{"stop_reason", e.stop_reason},
         {"stop_sequence", e.stop_sequence.empty() ? json(nullptr) : json(e.stop_sequence)}}},
       {"usage", {{"output_tokens", e.output_tokens}}}});
  out += sse_event("message_stop", {{"type", "message_stop"}});
  return out;
}

}  // namespace vkllm::serve
