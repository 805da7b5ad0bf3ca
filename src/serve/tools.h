// Tool calling for `vkllm serve` (docs/serve.md): the request's tools, tool_choice and tool
// history checked, and the model's generated text parsed back into tool calls in the syntax of
// its chat family (Qwen3 <tool_call> blocks, Llama 3.2 JSON objects, Phi-4-mini <|tool_call|>
// lists), whole or while it streams.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "vkllm/vkllm.h"

namespace vkllm::serve {

enum class ToolChoice { Auto, None, Required, Named };

struct ToolSpec {
  std::string tools_json;          // the tools array as the client sent it (key order kept)
  std::vector<std::string> names;  // the functions' names, in order
  ToolChoice choice = ToolChoice::Auto;
  std::string choice_name;  // ToolChoice::Named
  bool parallel = true;     // parallel_tool_calls: several calls in one reply
  // Tools are rendered into the prompt and the reply parsed for calls.
  bool active() const { return !names.empty() && choice != ToolChoice::None; }
};

// The request's `tools`, `tool_choice` and `parallel_tool_calls` (`body`: the raw request, read
// again in key order for the tools' text). HttpError 400 naming the field at fault.
ToolSpec parse_tools(const std::string& body, const nlohmann::json& request);

// One entry of `messages` (path `p`, e.g. "messages[2]") as a ChatTurn: system (developer),
// user, assistant (content may be null with tool_calls) or tool (tool_call_id required).
ChatTurn parse_turn(const nlohmann::json& m, const std::string& p);
// Every tool turn answers a call made by an earlier assistant turn (HttpError 400 otherwise).
void check_tool_history(const std::vector<ChatTurn>& turns);

// The call syntax of a model's chat family, from ModelInfo::architecture.
enum class CallSyntax { Qwen3, Llama3, Phi4Mini };
CallSyntax call_syntax_for(const std::string& architecture);

// Generated text split into content and tool calls as it streams: push() returns the content that
// can be shown now, holding back text that may begin a call; finish() parses what was held back.
// A call whose text is malformed, names no offered function or is cut short stays content.
class ToolCallStream {
 public:
  ToolCallStream(CallSyntax syntax, std::vector<std::string> names, bool parallel);
  std::string push(std::string_view piece);
  struct End {
    std::string content;  // held-back text that turned out to be content
    std::vector<ChatToolCall> calls;
  };
  End finish();

 private:
  CallSyntax syntax_;
  std::vector<std::string> names_;
  bool parallel_;
  std::string held_;      // text not yet shown (a possible call's start, or the call region)
  bool in_call_ = false;  // held_ begins a call
  bool decided_ = false;  // Llama: the reply's first non-blank text was seen
  std::vector<ChatToolCall> parse(std::string_view region) const;
};

// A reply that must be a call (tool_choice "required" or a named function): the text that the
// prompt ends with so that the reply starts inside the call (Qwen3: "<tool_call>\n", Phi-4-mini:
// "<|tool_call|>", Llama 3.2: none), and the JSON schema of what follows: one call object (a
// Phi-4-mini list of them, one at most without parallel_tool_calls) whose "name" is an offered
// function (the named one) and whose arguments (Llama: "parameters") follow that function's
// parameters schema, or any JSON object with `any_arguments` (a schema outside the grammar's
// subset). The reply parser is fed the prefix first (ToolCallStream::push).
std::string forced_call_prefix(CallSyntax syntax);
nlohmann::json forced_call_schema(const ToolSpec& tools, CallSyntax syntax, bool any_arguments);

// A tool call's id: "call_" and 24 random letters and digits.
std::string new_call_id();

// The OpenAI shapes: message.tool_calls, and the stream's deltas that build them (per call: its
// index, id, type and name, then its arguments in pieces).
nlohmann::json tool_calls_json(const std::vector<ChatToolCall>& calls);
std::vector<nlohmann::json> tool_call_deltas(const std::vector<ChatToolCall>& calls);

}  // namespace vkllm::serve
