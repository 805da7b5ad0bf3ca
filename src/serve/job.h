// A generation request of `vkllm serve` made ready to run before it queues: the request parsed,
// its prompt rendered and encoded, its options checked against the context, and a tool_choice
// that requires a call turned into a constraint; plus the reply parser that splits tool calls off.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serve/anthropic.h"
#include "serve/openai.h"
#include "serve/tools.h"
#include "vkllm/vkllm.h"

namespace vkllm::serve {

// What one generation needs: the prompt and options, checked before the request queues.
struct Job {
  Request r;
  std::string text;             // chat: the rendered conversation
  std::vector<int32_t> tokens;  // completions: the prompt's ids
  std::vector<int32_t> ids;     // the prompt's ids (chat: of text), what the engine runs
  std::string id;
  int64_t created = 0;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  bool anthropic = false;  // /v1/messages
  int prompt_tokens = 0;
  std::string forced_prefix;  // a forced call: the prompt's end, the reply parser's start
};

class JobMaker {
 public:
  JobMaker(std::shared_ptr<Model> model, int ctx, CallSyntax syntax)
      : model_(std::move(model)), ctx_(ctx), syntax_(syntax) {}
  // The job of a request body (chat: /v1/chat/completions, else /v1/completions; anthropic:
  // /v1/messages). HttpError on a request that cannot run.
  Job prepare(const std::string& body, bool chat, bool anthropic = false);
  // The reply parser of a chat job: splits tool calls off the text when tools are offered (fed
  // the forced call's prefix first: the reply starts inside the call).
  ToolCallStream reply_parser(const Job& job) const;
  // A whole reply's tool calls, taken out of `text` (left with the content before them).
  std::vector<ChatToolCall> split_calls(const Job& job, std::string& text) const;

 private:
  void constrain_tool_choice(Job& job, size_t& n) const;
  std::shared_ptr<Model> model_;
  int ctx_;
  CallSyntax syntax_;
  std::atomic<uint64_t> ids_{0};
};

}  // namespace vkllm::serve
