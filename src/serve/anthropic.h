// The Anthropic Messages API of `vkllm serve` (POST /v1/messages, docs/serve.md): a request's
// JSON checked into the server's Request (system, messages of text / tool_use / tool_result
// blocks, tools, tool_choice, max_tokens, stop_sequences, sampling), the message response, the
// stream's events and Anthropic's error shape.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/openai.h"

namespace vkllm::serve {

// Parses and checks a /v1/messages body (HttpError 400 naming the field at fault).
Request parse_messages_request(const std::string& body);

// {"type": "error", "error": {"type", "message"}} with Anthropic's error types.
nlohmann::json anthropic_error(int status, const std::string& message);

// stop_reason from the generation's end: "end_turn", "max_tokens", "stop_sequence", "tool_use".
struct MessageEnd {
  std::string text;
  std::vector<ChatToolCall> calls;  // ids "toolu_..."
  std::string stop_reason;
  std::string stop_sequence;  // the stop sequence met ("stop_sequence" only)
  int input_tokens = 0, output_tokens = 0, cached_tokens = 0;
};
nlohmann::json message_response(const std::string& id, const std::string& model,
                                const MessageEnd& end);

// The stream's events (server-sent events "event: TYPE\ndata: JSON\n\n"), in order: start(),
// text() for each piece of text, finish() with the calls and the stop reason.
class MessageStream {
 public:
  MessageStream(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  std::string start(int input_tokens, int cached_tokens) const;
  std::string text(const std::string& piece);
  std::string finish(const MessageEnd& end);

 private:
  std::string open_text();
  std::string id_, model_;
  int index_ = 0;           // the next content block's index
  bool text_open_ = false;  // a text block is open
};
std::string sse_event(const std::string& type, const nlohmann::json& data);

}  // namespace vkllm::serve
