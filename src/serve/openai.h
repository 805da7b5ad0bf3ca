// The OpenAI-compatible request and response bodies of `vkllm serve` (docs/serve.md): a request's
// JSON checked field by field into a Request, errors as HttpError (status + OpenAI error body),
// and the response and stream-chunk objects.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/tools.h"
#include "vkllm/vkllm.h"

namespace vkllm::serve {

// An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message, std::string param = {}, std::string code = {});
  int status;
  std::string param, code;
  nlohmann::json body() const;
};
nlohmann::json error_body(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
const char* error_type(int status);  // "invalid_request_error", "authentication_error", ...

struct Request {
  bool chat = true;                // /v1/chat/completions (else /v1/completions)
  std::vector<ChatTurn> messages;  // chat
  std::string prompt;              // completions
  bool stream = false, include_usage = false;
  std::optional<int> max_tokens;  // absent: the rest of the context
  bool seeded = false;            // a seed was given (else the server draws one)
  GenerationOptions opts;         // everything but max_new_tokens
  ToolSpec tools;                 // chat: tools, tool_choice, parallel_tool_calls
};

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const nlohmann::json& c, const std::string& param);

// Parses and checks a request body (HttpError 400 naming the field at fault).
Request parse_request(const std::string& body, bool chat);

// The response objects (OpenAI's shapes). finish: "stop", "length" or "tool_calls" (then the
// message has `calls`, and its content is null when `text` is empty).
struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  nlohmann::json to_json() const;
};
nlohmann::json completion_response(const Request& r, const std::string& id, int64_t created,
                                   const std::string& model, const std::string& text,
                                   const std::string& finish, const Usage& usage,
                                   const std::vector<ChatToolCall>& calls = {});
// One streamed chunk: a piece of text (role on the first chat chunk), or the final one with the
// finish reason (text empty), or, with include_usage, the usage chunk (no choices).
nlohmann::json stream_chunk(const Request& r, const std::string& id, int64_t created,
                            const std::string& model, const std::string& text, bool first,
                            const std::string& finish);
// The chunks of a streamed reply's tool calls: tool_call_deltas, each as a chunk's delta.
std::vector<nlohmann::json> tool_call_chunks(const Request& r, const std::string& id,
                                             int64_t created, const std::string& model,
                                             const std::vector<ChatToolCall>& calls);
nlohmann::json usage_chunk(const Request& r, const std::string& id, int64_t created,
                           const std::string& model, const Usage& usage);

}  // namespace vkllm::serve
