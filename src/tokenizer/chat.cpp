// Native renderings of the three chat templates (no Jinja engine): each function follows its
// template in tokenizer_config.json statement by statement for plain text conversations.
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
std::string_view strip(std::string_view s, std::string_view chars) { return lstrip(rstrip(s, chars), chars); }

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

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

void check_role(const ChatMessage& m, std::initializer_list<std::string_view> roles, const char* family) {
  for (auto r : roles)
    if (m.role == r) return;
  fail("chat template {}: unsupported role \"{}\"", family, m.role);
}

// Qwen3 tokenizer_config.json chat_template (no tools).
std::string qwen3(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  std::string out;
  for (const auto& m : msgs) check_role(m, {"system", "user", "assistant", "tool"}, "qwen3");
  if (!msgs.empty() && msgs[0].role == "system") out += "<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n";
  // The last user message that is not a tool response.
  const auto n = static_cast<long>(msgs.size());
  long last_query = n - 1;
  for (long i = n - 1; i >= 0; --i) {
    const auto& m = msgs[static_cast<size_t>(i)];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
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
        std::string_view before = rstrip(std::string_view(m.content).substr(0, m.content.find("</think>")), "\n");
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

// Llama 3: the plain format (Llama 3.0 template) or, with a date, the Llama 3.2 Hub template.
std::string llama3(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  for (const auto& m : msgs) check_role(m, {"system", "user", "assistant"}, "llama3");
  std::string out = "<|begin_of_text|>";
  size_t first = 0;
  if (opt.llama_date) {
    std::string_view system;
    if (!msgs.empty() && msgs[0].role == "system") {
      system = trim(msgs[0].content);
      first = 1;
    }
    out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ";
    out += *opt.llama_date;
    out += "\n\n";
    out += system;
    out += "<|eot_id|>";
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n";
    out += trim(msgs[i].content);
    out += "<|eot_id|>";
  }
  if (opt.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Phi-4-mini tokenizer_config.json chat_template (no tools).
std::string phi4mini(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  std::string out;
  for (const auto& m : msgs) {
    check_role(m, {"system", "user", "assistant"}, "phi4mini");
    out += "<|" + m.role + "|>" + m.content + "<|end|>";
  }
  out += opt.add_generation_prompt ? "<|assistant|>" : "<|endoftext|>";
  return out;
}

}  // namespace

ChatFamily chat_family_for(Arch arch) {
  switch (arch) {
    case Arch::Qwen3: return ChatFamily::Qwen3;
    case Arch::Llama: return ChatFamily::Llama3;
    case Arch::Phi3: return ChatFamily::Phi4Mini;
  }
  fail("chat_family_for: unknown architecture");
}

const char* chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::Qwen3: return "qwen3";
    case ChatFamily::Llama3: return "llama3";
    case ChatFamily::Phi4Mini: return "phi4mini";
  }
  return "?";
}

std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs, const ChatOptions& opt) {
  switch (f) {
    case ChatFamily::Qwen3: return qwen3(msgs, opt);
    case ChatFamily::Llama3: return llama3(msgs, opt);
    case ChatFamily::Phi4Mini: return phi4mini(msgs, opt);
  }
  fail("apply_chat_template: unknown family");
}

std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                bool disable_thinking) {
  ChatOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  opt.disable_thinking = disable_thinking;
  return apply_chat_template(f, msgs, opt);
}

}  // namespace vkllm
