#include "serve/openai.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "grammar/grammar.h"
#include "runtime/constraint.h"

namespace vkllm::serve {

using nlohmann::json;

const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 503:
      return "server_overloaded";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json error_body(int status, const std::string& message, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

HttpError::HttpError(int s, const std::string& message, std::string p, std::string c)
    : std::runtime_error(message), status(s), param(std::move(p)), code(std::move(c)) {}

json HttpError::body() const {
  return error_body(status, what(), param, code);
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw HttpError(400, message, param, "invalid_value");
}

// A present, non-null field (null counts as absent, as OpenAI's API treats it).
const json* field(const json& o, const char* name) {
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& o, const char* name, double lo, double hi, double dflt) {
  const json* v = field(o, name);
  if (!v) return dflt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, d, lo, hi));
  return d;
}

std::optional<int64_t> integer(const json& o, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(o, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, v->get<uint64_t>(), lo, hi));
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi)
    bad(name, fmt::format("'{}' is {}; it must be in [{}, {}]", name, i, lo, hi));
  return i;
}

bool boolean(const json& o, const char* name, bool dflt) {
  const json* v = field(o, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be true or false", name));
  return v->get<bool>();
}

}  // namespace

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(param, "'" + param + "' must be a string or an array of text parts");
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      bad(param,
          "'" + param +
              "' parts must be {\"type\": \"text\", \"text\": STRING} (only text is supported)");
    out += part["text"].get<std::string>();
  }
  return out;
}

namespace {

// Nesting depth of a JSON value, counted up to `limit` (an untrusted schema is walked once here,
// without deep recursion, before the compiler sees it).
bool deeper_than(const json& v, int limit) {
  if (limit < 0) return true;
  if (v.is_object())
    for (const auto& [k, x] : v.items())
      if (deeper_than(x, limit - 1)) return true;
  if (v.is_array())
    for (const json& x : v)
      if (deeper_than(x, limit - 1)) return true;
  return false;
}

// response_format: text (no constraint), json_object, or json_schema (its schema compiled; a
// schema outside the supported subset is a 400 naming the keyword).
std::shared_ptr<const Constraint> response_format(const json& rf) {
  const char* p = "response_format";
  const json* type = rf.is_object() ? field(rf, "type") : nullptr;
  if (!type || !type->is_string())
    bad(p, "'response_format' must be an object with a 'type': text, json_object or json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return make_constraint(grammar::any_json_object());
  if (t != "json_schema")
    bad(p, fmt::format("'response_format.type' is \"{}\"; it must be text, json_object or "
                       "json_schema",
                       t));
  const json* js = field(rf, "json_schema");
  if (!js || !js->is_object())
    bad("response_format.json_schema", "'response_format.json_schema' must be an object");
  if (const json* n = field(*js, "name"); n && !n->is_string())
    bad("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  if (const json* st = field(*js, "strict"); st && !st->is_boolean())
    bad("response_format.json_schema.strict",
        "'response_format.json_schema.strict' must be true or false");
  const std::string sp = "response_format.json_schema.schema";
  const json* schema = field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean()))
    bad(sp, "'" + sp + "' must be a JSON schema (an object)");
  constexpr size_t kMaxSchemaBytes = 64 << 10;
  constexpr int kMaxSchemaNesting = 64;
  if (deeper_than(*schema, kMaxSchemaNesting))
    bad(sp, fmt::format("'{}' nests deeper than {} levels", sp, kMaxSchemaNesting));
  if (schema->dump().size() > kMaxSchemaBytes)
    bad(sp, fmt::format("'{}' is longer than {} bytes", sp, kMaxSchemaBytes));
  try {
    return make_constraint(grammar::compile_json_schema(*schema));
  } catch (const grammar::SchemaError& e) {
    throw HttpError(400, e.what(), sp, "unsupported_schema");
  }
}

}  // namespace

Request parse_request(const std::string& body, bool chat) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    throw HttpError(400, "the request body is not valid JSON", "", "invalid_json");
  if (!j.is_object())
    throw HttpError(400, "the request body must be a JSON object", "", "invalid_json");
  Request r;
  r.chat = chat;
  if (const json* m = field(j, "model"); m && !m->is_string())
    bad("model", "'model' must be a string");
  if (chat) {
    const json* msgs = field(j, "messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < msgs->size(); ++i)
      r.messages.push_back(parse_turn((*msgs)[i], fmt::format("messages[{}]", i)));
    check_tool_history(r.messages);
    r.tools = parse_tools(body, j);
  } else {
    const json* p = field(j, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string())
      r.prompt = (*p)[0].get<std::string>();
    else if (p->is_string())
      r.prompt = p->get<std::string>();
    else
      bad("prompt", "'prompt' must be a string (or an array of one string)");
    if (r.prompt.empty()) bad("prompt", "'prompt' is empty");
  }
  r.stream = boolean(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  constexpr int64_t kMaxTokens = 1 << 20;
  auto mt = integer(j, "max_completion_tokens", 1, kMaxTokens);
  if (!mt) mt = integer(j, "max_tokens", 1, kMaxTokens);
  if (mt) r.max_tokens = static_cast<int>(*mt);
  if (auto n = integer(j, "n", 1, std::numeric_limits<int>::max()); n && *n != 1)
    bad("n", "'n' must be 1 (one choice per request)");
  GenerationOptions& o = r.opts;
  o.temperature = static_cast<float>(number(j, "temperature", 0, 2, 1.0));
  o.top_p = static_cast<float>(number(j, "top_p", 0, 1, 1.0));
  o.min_p = static_cast<float>(number(j, "min_p", 0, 1, 0.0));
  o.presence_penalty = static_cast<float>(number(j, "presence_penalty", -2, 2, 0.0));
  o.frequency_penalty = static_cast<float>(number(j, "frequency_penalty", -2, 2, 0.0));
  o.repetition_penalty = static_cast<float>(number(j, "repetition_penalty", 0.01, 100, 1.0));
  if (auto k = integer(j, "top_k", -1, 1 << 24)) o.top_k = *k < 0 ? 0 : static_cast<int>(*k);
  if (const json* s = field(j, "seed")) {
    if (!s->is_number_integer()) bad("seed", "'seed' must be an integer");
    o.seed =
        s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    r.seeded = true;
  }
  o.stop_at_eos = !boolean(j, "ignore_eos", false);
  if (const json* s = field(j, "stop")) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const json& e : *s) {
        if (!e.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        stops.push_back(e.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
    for (const auto& x : stops)
      if (x.empty()) bad("stop", "'stop' holds an empty string");
    o.stop = std::move(stops);
  }
  if (boolean(j, "logprobs", false) || field(j, "top_logprobs"))
    bad("logprobs", "'logprobs' is not supported");
  if (!chat)
    for (const char* unsupported : {"tools", "functions", "tool_choice", "function_call"})
      if (const json* t = field(j, unsupported); t && !(t->is_array() && t->empty()))
        bad(unsupported, fmt::format("'{}' is for /v1/chat/completions", unsupported));
  if (const json* rf = field(j, "response_format")) r.opts.constraint = response_format(*rf);
  if (!chat && boolean(j, "echo", false)) bad("echo", "'echo' is not supported");
  return r;
}

json Usage::to_json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json completion_response(const Request& r, const std::string& id, int64_t created,
                         const std::string& model, const std::string& text,
                         const std::string& finish, const Usage& usage,
                         const std::vector<ChatToolCall>& calls) {
  json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
  if (r.chat && !calls.empty())
    choice["message"] = {{"role", "assistant"},
                         {"content", text.empty() ? json(nullptr) : json(text)},
                         {"tool_calls", tool_calls_json(calls)}};
  else if (r.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  return {{"id", id},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage.to_json()}};
}

json stream_chunk(const Request& r, const std::string& id, int64_t created,
                  const std::string& model, const std::string& text, bool first,
                  const std::string& finish) {
  json choice = {{"index", 0},
                 {"finish_reason", finish.empty() ? json(nullptr) : json(finish)},
                 {"logprobs", nullptr}};
  if (r.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (finish.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

std::vector<json> tool_call_chunks(const Request& r, const std::string& id, int64_t created,
                                   const std::string& model,
                                   const std::vector<ChatToolCall>& calls) {
  std::vector<json> out;
  for (const json& delta : tool_call_deltas(calls)) {
    out.push_back(stream_chunk(r, id, created, model, "", false, ""));
    out.back()["choices"][0]["delta"] = delta;
  }
  return out;
}

json usage_chunk(const Request& r, const std::string& id, int64_t created, const std::string& model,
                 const Usage& usage) {
  return {{"id", id},
          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage.to_json()}};
}

}  // namespace vkllm::serve
