// How a model's chat prompts are rendered: through the checkpoint's own Jinja chat template
// (src/template), or, for the seed families whose prompt format vkllm fixes, through the native
// renderers of chat.cpp. docs/tokenizer.md ("Which renderer") states the rule.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf/model_desc.h"
#include "tokenizer/tokenizer.h"

namespace vkllm {

namespace tmpl {
class Template;
}

class ChatRenderer {
 public:
  // arch and tok pick a native family; template_source is the checkpoint's template (the text of
  // chat_template.jinja, else tokenizer_config.json's chat_template; empty: none), see
  // chat_template_of. A template that does not parse is kept as its error, thrown by render(), so
  // a model whose template is broken still loads and completes raw prompts. `where` names the
  // source in errors.
  static ChatRenderer make(Arch arch, const Tokenizer& tok, std::string template_source,
                           const std::string& where);

  // The conversation as the model's prompt. Throws Error (one line: "<where>: chat template: ...")
  // when the template fails to render or raises an exception, or when there is no template.
  std::string render(const std::vector<ChatMessage>& msgs, const ChatOptions& opt) const;

  // One line for people: "the checkpoint's chat template" or "native qwen3 format" ...
  std::string describe() const;
  bool uses_checkpoint_template() const { return !native_; }
  std::optional<ChatFamily> native_family() const { return native_; }

 private:
  std::optional<ChatFamily> native_;
  std::shared_ptr<const tmpl::Template> template_;
  std::string template_error_;  // why the template did not parse; empty if it did or is absent
  bool has_template_ = false;
  std::string bos_, eos_, where_;
};

// The chat template text of a checkpoint: chat_template_jinja (the chat_template.jinja file, as
// transformers saves it; empty: absent) wins over tokenizer_config.json's "chat_template" (a
// string, or a list of {"name", "template"} of which "default" is taken). Empty: none. Throws
// Error on a malformed chat_template value.
std::string chat_template_of(std::string_view tokenizer_config_json,
                             std::string_view chat_template_jinja, const std::string& where);

}  // namespace vkllm
