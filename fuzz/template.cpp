// fuzz_template: a chat template (the whole input), parsed and rendered with a fixed conversation
// under small limits. Every failure must be a TemplateError; anything else (a crash, another
// exception, a hang past the limits) is a finding.
#include "template/template.h"

#include <nlohmann/json.hpp>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? \u00e9\ud83d\ude00"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "content": "{\"t\": 21.5}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nSunny.", "reasoning_content": "ok"},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"
  })");
  vkllm::tmpl::Limits limits;
  limits.max_steps = 20000;
  limits.max_output = 1 << 16;
  limits.max_items = 2000;
  limits.now = 0;
  try {
    const auto t =
        vkllm::tmpl::Template::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    const std::string out = t.render(context, limits);
    VKLLM_FUZZ_CHECK(out.size() <= limits.max_output);
  } catch (const vkllm::tmpl::TemplateError& e) {
    VKLLM_FUZZ_CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  return 0;
}
