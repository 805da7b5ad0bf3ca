// A small Jinja interpreter for Hugging Face chat templates (tokenizer_config.json's
// chat_template). It follows @huggingface/jinja, the renderer of transformers.js and of the Hub:
// the template is preprocessed with trim_blocks and lstrip_blocks on, a trailing newline is
// dropped, undefined values are falsy and render empty, `none` renders empty, booleans render as
// true/false, and tojson writes keys in insertion order. docs/tokenizer.md lists the subset.
//
// Templates come from downloaded checkpoints, so both parsing and rendering are bounded (Limits)
// and every failure is a TemplateError whose what() is one line with the position in the template.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace vkllm::tmpl {

namespace detail {
struct Node;
}

// Bounds on one render. Exceeding one is a TemplateError, never a crash or a hang.
struct Limits {
  uint64_t max_steps = 1'000'000;  // statements, loop iterations and calls executed
  size_t max_output = 4u << 20;    // bytes of output, and of any one string built on the way
  size_t max_items = 100'000;      // elements of any one list built on the way (range, +, ...)
  int max_call_depth = 32;         // nested macro calls
  std::optional<std::time_t> now;  // strftime_now's clock (default: the system clock)
};

class TemplateError : public std::runtime_error {
 public:
  // raised: the template called raise_exception; message() is then its argument.
  TemplateError(const std::string& what, std::string message, bool raised)
      : std::runtime_error(what), message_(std::move(message)), raised_(raised) {}
  const std::string& message() const { return message_; }
  bool raised() const { return raised_; }

 private:
  std::string message_;
  bool raised_;
};

class Template {
 public:
  // Parses once; throws TemplateError ("template syntax error at line L, column C: ...").
  // Templates longer than max_source bytes or nested deeper than 200 levels are refused.
  static Template parse(std::string_view source);
  static constexpr size_t max_source = 1u << 20;

  // Renders with the context's top-level keys as variables (messages, tools,
  // add_generation_prompt, bos_token, ...). Object keys keep the context's order (JavaScript's
  // order: integer-like keys first), as tojson shows them. Throws TemplateError
  // ("template error at line L, column C: ...").
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;
  std::string render(const nlohmann::json& context, const Limits& limits = {}) const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace vkllm::tmpl
