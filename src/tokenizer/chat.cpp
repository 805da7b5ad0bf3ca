// Native renderings of the three chat templates (no Jinja engine): each function follows its
// template in tokenizer_config.json statement by statement, tools, tool calls and tool results
// included (tests/tokenizer/reference/chat_tools.json holds @huggingface/jinja's renderings).
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace vkllm {
namespace {

// Python str.strip(chars) / lstrip / rstrip over a set of ASCII characters.
std::string_view lstrip(std::string_view s, std::string_view chars) {
  size_t b = s.find_first_not_of(chars);
  return b == std::string_view::npos ? std::string_view() : s.substr(b);
}
std::string_view rstrip(std::string_view s, std::string_view chars) {
  size_t e = s.find_last_not_of(chars);
  return e == std::string_view::npos ? std::string_view() : s.substr(0, e + 1);
}
std::string_view strip(std::string_view s, std::string_view chars) {
  return lstrip(rstrip(s, chars), chars);
}

// Jinja's trim filter (Python str.strip(): Unicode whitespace).
std::string_view trim(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t j = b;
    char32_t c = utf8::next(s, j);
    if (!utf8::is_whitespace(c) && !(c >= 0x1C && c <= 0x1F)) break;
    b = j;
  }
  size_t e = s.size();
  while (e > b) {
    size_t st = e - 1;
    while (st > b && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    size_t j = st;
    char32_t c = utf8::next(s, j);
    if (!utf8::is_whitespace(c) && !(c >= 0x1C && c <= 0x1F)) break;
    e = st;
  }
  return s.substr(b, e - b);
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

using ojson = nlohmann::ordered_json;

// Jinja's tojson as transformers defines it (Python json.dumps, ensure_ascii=False): ", " and ": "
// separators, keys in their given order; indent > 0: one item a line. An integral float prints as
// an integer (as @huggingface/jinja does).
void tojson(const ojson& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (v.is_object() || v.is_array()) {
    const bool obj = v.is_object();
    if (v.empty()) {
      out += obj ? "{}" : "[]";
      return;
    }
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += indent > 0 ? "," : ", ";
      first = false;
      if (indent > 0) newline(depth + 1);
      if (obj) {
        out += ojson(it.key()).dump(-1, ' ', false, ojson::error_handler_t::replace);
        out += ": ";
      }
      tojson(*it, indent, depth + 1, out);
    }
    if (indent > 0) newline(depth);
    out += obj ? '}' : ']';
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 1e15)
      out += std::to_string(static_cast<int64_t>(d));
    else
      out += v.dump();
  } else {
    out += v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}
std::string tojson(const ojson& v, int indent = 0) {
  std::string out;
  tojson(v, indent, 0, out);
  return out;
}

ojson parse_json(const std::string& text, const char* what) {
  ojson j = ojson::parse(text, nullptr, false);
  if (j.is_discarded()) fail("chat template: {} is not valid JSON", what);
  return j;
}

// The tools of ChatOptions::tools (a JSON array; empty text: none).
ojson tool_list(const ChatOptions& opt) {
  if (opt.tools.empty()) return ojson::array();
  ojson t = parse_json(opt.tools, "the tools");
  if (!t.is_array()) fail("chat template: the tools must be a JSON array");
  return t;
}

void check_role(const ChatMessage& m, std::initializer_list<std::string_view> roles,
                const char* family) {
  for (auto r : roles)
    if (m.role == r) return;
  fail("chat template {}: unsupported role \"{}\"", family, m.role);
}

// Qwen3 tokenizer_config.json chat_template.
std::string qwen3(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  std::string out;
  for (const auto& m : msgs) check_role(m, {"system", "user", "assistant", "tool"}, "qwen3");
  const ojson tools = tool_list(opt);
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (!msgs.empty() && msgs[0].role == "system") out += msgs[0].content + "\n\n";
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ojson& t : tools) out += "\n" + tojson(t);
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (!msgs.empty() && msgs[0].role == "system") {
    out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  }
  // The last user message that is not a tool response.
  const auto n = static_cast<long>(msgs.size());
  long last_query = n - 1;
  for (long i = n - 1; i >= 0; --i) {
    const auto& m = msgs[static_cast<size_t>(i)];
    if (m.role == "user" &&
        !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (long i = 0; i < n; ++i) {
    const auto& m = msgs[static_cast<size_t>(i)];
    bool last = i == n - 1;
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content, reasoning;
      size_t close = m.content.rfind("</think>");
      if (close != std::string::npos) {
        content = lstrip(std::string_view(m.content).substr(close + 8), "\n");
        std::string_view before =
            rstrip(std::string_view(m.content).substr(0, m.content.find("</think>")), "\n");
        size_t open = before.rfind("<think>");
        reasoning = lstrip(open == std::string_view::npos ? before : before.substr(open + 7), "\n");
      }
      if (i > last_query && (last || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n";
        out += strip(reasoning, "\n");
        out += "\n</think>\n\n";
        out += lstrip(content, "\n");
      } else {
        out += "<|im_start|>assistant\n";
        out += content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !content.empty()) out += "\n";
        out += "<tool_call>\n{\"name\": \"" + m.tool_calls[k].name + "\", \"arguments\": ";
        out += tojson(parse_json(m.tool_calls[k].arguments, "a tool call's arguments"));
        out += "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[static_cast<size_t>(i - 1)].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (last || msgs[static_cast<size_t>(i + 1)].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (opt.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (opt.disable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// Llama 3: the plain format (Llama 3.0 template) or, with a date, the Llama 3.2 Hub template
// (tools_in_user_message: the tools go into the first user turn; tool results under ipython).
std::string llama3(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  const ojson tools = tool_list(opt);
  for (const auto& m : msgs) {
    check_role(m, {"system", "user", "assistant", "tool", "ipython"}, "llama3");
    if (!opt.llama_date && (m.role == "tool" || m.role == "ipython" || !m.tool_calls.empty()))
      fail("chat template llama3: tool calls need the Llama 3.2 template (a date)");
  }
  if (!tools.empty() && !opt.llama_date)
    fail("chat template llama3: tools need the Llama 3.2 template (a date)");
  std::string out = "<|begin_of_text|>";
  size_t first = 0;
  if (opt.llama_date) {
    std::string_view system;
    if (!msgs.empty() && msgs[0].role == "system") {
      system = trim(msgs[0].content);
      first = 1;
    }
    out += "<|start_header_id|>system<|end_header_id|>\n\n";
    if (!tools.empty()) out += "Environment: ipython\n";
    out += "Cutting Knowledge Date: December 2023\nToday Date: ";
    out += *opt.llama_date;
    out += "\n\n";
    out += system;
    out += "<|eot_id|>";
    if (!tools.empty()) {
      if (first >= msgs.size())
        fail("chat template llama3: tools go into the first user message, and there is none");
      out +=
          "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
          "respond with a JSON for a function call with its proper arguments that best answers "
          "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
          "dictionary of argument name and its value}.Do not use variables.\n\n";
      for (const ojson& t : tools) out += tojson(t, 4) + "\n\n";
      out += trim(msgs[first].content);
      out += "<|eot_id|>";
      ++first;
    }
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool" || m.role == "ipython") {
      // The template's `content is iterable` holds for a string: it is written as JSON.
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + tojson(ojson(m.content)) +
             "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1)
        fail("chat template llama3: this model only supports single tool-calls at once");
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" +
             m.tool_calls[0].name + "\", \"parameters\": ";
      out += tojson(parse_json(m.tool_calls[0].arguments, "a tool call's arguments"));
      out += "}<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += trim(m.content);
      out += "<|eot_id|>";
    }
  }
  if (opt.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Phi-4-mini tokenizer_config.json chat_template. Its template takes the tools as the text of the
// system turn's "tools" field, and an assistant's calls as part of its content: vkllm writes them
// as Phi-4-mini's model card shows, the functions as a JSON list between <|tool|> and <|/tool|>,
// the calls as a JSON list of {"name", "arguments"} between <|tool_call|> and <|/tool_call|>. With
// tools and no system turn, an empty system turn carries them.
std::string phi4mini(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  const ojson tools = tool_list(opt);
  std::string tool_text;
  if (!tools.empty()) {
    ojson fns = ojson::array();
    for (const ojson& t : tools)
      fns.push_back(t.is_object() && t.contains("function") ? t["function"] : t);
    tool_text = "<|tool|>" + tojson(fns) + "<|/tool|>";
  }
  std::string out;
  if (!tool_text.empty() && (msgs.empty() || msgs[0].role != "system"))
    out += "<|system|>" + tool_text + "<|end|>";
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    check_role(m, {"system", "user", "assistant", "tool"}, "phi4mini");
    out += "<|" + m.role + "|>" + m.content;
    if (i == 0 && m.role == "system") out += tool_text;
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ChatToolCall& c : m.tool_calls)
        calls.push_back(
            {{"name", c.name}, {"arguments", parse_json(c.arguments, "a tool call's arguments")}});
      out += "<|tool_call|>" + tojson(calls) + "<|/tool_call|>";
    }
    out += "<|end|>";
  }
  out += opt.add_generation_prompt ? "<|assistant|>" : "<|endoftext|>";
  return out;
}

}  // namespace

ChatFamily chat_family_for(Arch arch) {
  switch (arch) {
    case Arch::Qwen3:
      return ChatFamily::Qwen3;
    case Arch::Llama:
      return ChatFamily::Llama3;
    case Arch::Phi3:
      return ChatFamily::Phi4Mini;
  }
  fail("chat_family_for: unknown architecture");
}

const char* chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::Qwen3:
      return "qwen3";
    case ChatFamily::Llama3:
      return "llama3";
    case ChatFamily::Phi4Mini:
      return "phi4mini";
  }
  return "?";
}

std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs,
                                const ChatOptions& opt) {
  switch (f) {
    case ChatFamily::Qwen3:
      return qwen3(msgs, opt);
    case ChatFamily::Llama3:
      return llama3(msgs, opt);
    case ChatFamily::Phi4Mini:
      return phi4mini(msgs, opt);
  }
  fail("apply_chat_template: unknown family");
}

std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt, bool disable_thinking) {
  ChatOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  opt.disable_thinking = disable_thinking;
  return apply_chat_template(f, msgs, opt);
}

}  // namespace vkllm
