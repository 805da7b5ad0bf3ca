#include "serve/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "grammar/grammar.h"
#include "runtime/constraint.h"

namespace vkllm::serve {

Job JobMaker::prepare(const std::string& body, bool chat, bool anthropic) {
  Job job;
  job.anthropic = anthropic;
  job.r = anthropic ? parse_messages_request(body) : parse_request(body, chat);
  size_t n = 0;
  try {
    if (chat) {
      job.text =
          model_->chat_prompt(job.r.messages, job.r.tools.active() ? job.r.tools.tools_json : "");
      job.ids = model_->encode(job.text);
    } else {
      job.tokens = job.ids = model_->encode(job.r.prompt, true);
    }
    n = job.ids.size();
  } catch (const Error& e) {
    throw HttpError(400, e.what(), chat ? "messages" : "prompt");
  }
  if (n + 1 > static_cast<size_t>(ctx_))
    throw HttpError(400,
                    fmt::format("the prompt has {} tokens but the context holds {} tokens (at "
                                "least one must be left to generate)",
                                n, ctx_),
                    chat ? "messages" : "prompt", "context_length_exceeded");
  GenerationOptions& o = job.r.opts;
  const int room = ctx_ - static_cast<int>(n);
  o.max_new_tokens = std::min(job.r.max_tokens.value_or(room), room);
  if (!job.r.seeded) o.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  if (chat) constrain_tool_choice(job, n);
  job.prompt_tokens = static_cast<int>(n);
  job.id = anthropic ? fmt::format("msg_{}", new_call_id().substr(5))
                     : fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ids_.fetch_add(1) + 1);
  job.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return job;
}

// tool_choice "required" or a named function: the prompt ends inside the family's call syntax
// (forced_call_prefix) and decoding is constrained to the call's JSON (forced_call_schema: an
// offered function's name and arguments its parameters schema accepts; any JSON object as the
// arguments where a schema is outside the grammar's subset), so even a weak model answers with
// a valid call. n: the prompt's tokens, updated with the prefix's.
void JobMaker::constrain_tool_choice(Job& job, size_t& n) const {
  const ToolSpec& t = job.r.tools;
  if (t.choice != ToolChoice::Required && t.choice != ToolChoice::Named) return;
  if (job.r.opts.constraint)
    throw HttpError(400, "'response_format' and a required tool call cannot be combined",
                    "response_format");
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::compile_json_schema(forced_call_schema(t, syntax_, false));
  } catch (const grammar::SchemaError&) {
    g = grammar::compile_json_schema(forced_call_schema(t, syntax_, true));
  }
  job.r.opts.constraint = make_constraint(std::move(g));
  job.forced_prefix = forced_call_prefix(syntax_);
  if (job.forced_prefix.empty()) return;
  job.text += job.forced_prefix;
  job.ids = model_->encode(job.text);
  n = job.ids.size();
  if (n + 1 > static_cast<size_t>(ctx_))
    throw HttpError(400, "the prompt leaves no room for the tool call", "messages",
                    "context_length_exceeded");
  job.r.opts.max_new_tokens = std::min(job.r.opts.max_new_tokens, ctx_ - static_cast<int>(n));
}

// The reply parser of a chat job: splits tool calls off the text when tools are offered (fed
// the forced call's prefix first: the reply starts inside the call).
ToolCallStream JobMaker::reply_parser(const Job& job) const {
  std::vector<std::string> names =
      job.r.tools.active() ? job.r.tools.names : std::vector<std::string>();
  if (job.r.tools.choice == ToolChoice::Named) names = {job.r.tools.choice_name};
  ToolCallStream parser(syntax_, std::move(names), job.r.tools.parallel);
  if (!job.forced_prefix.empty()) parser.push(job.forced_prefix);
  return parser;
}

// A whole reply's tool calls, taken out of `text` (left with the content before them).
std::vector<ChatToolCall> JobMaker::split_calls(const Job& job, std::string& text) const {
  ToolCallStream parser = reply_parser(job);
  std::string content = parser.push(text);
  ToolCallStream::End end = parser.finish();
  content += end.content;
  if (!end.calls.empty()) content.erase(content.find_last_not_of(" \t\r\n") + 1);
  text = std::move(content);
  return std::move(end.calls);
}

}  // namespace vkllm::serve
