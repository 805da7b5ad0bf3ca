// Hugging Face tokenizer.json in C++: byte-level BPE as used by Qwen3, Llama 3.x and Phi-4-mini
// (normalizer, Split/ByteLevel pre-tokenizers with PCRE2, BPE with merge ranks, added tokens,
// TemplateProcessing post-processor, ByteLevel decoder) and SentencePiece-style BPE as used by
// Gemma 3, Llama 2 and Mistral v1 (character BPE with <0xNN> byte fallback, Replace/Prepend
// normalizers, Metaspace, Replace/ByteFallback/Fuse/Strip decoders), streaming detokenization and
// native chat templates. See docs/tokenizer.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hf/model_desc.h"
#include "vkllm/vkllm.h"  // ChatToolCall

namespace vkllm {

struct TokenizerImpl;

class Tokenizer {
 public:
  // Loads tokenizer.json and tokenizer_config.json (the config may be an empty path: then only
  // tokenizer.json is read). Throws Error naming the file on any problem.
  static Tokenizer from_files(const std::string& tokenizer_json,
                              const std::string& tokenizer_config_json);
  // Same, from the file contents (artifacts embed both texts); `where` names the source in errors.
  // An empty config text means "no tokenizer_config.json".
  static Tokenizer from_text(const std::string& tokenizer_json,
                             const std::string& tokenizer_config_json, const std::string& where);
  // Loads DIR/tokenizer.json and DIR/tokenizer_config.json (the latter optional).
  static Tokenizer from_dir(const std::string& dir);
  // tokenizer.json in a form that loads several times faster (tokenizer/compiled.cpp: the JSON
  // without the vocab entries and merges, those as binary lists of ids), with the caller's key of
  // that tokenizer.json (artifacts embed it as "tokenizer.compiled", keyed by the xxh64 of their
  // tokenizer.json). Throws as from_text does for a tokenizer.json that does not load.
  static std::string compile(const std::string& tokenizer_json, const std::string& where,
                             uint64_t source_key);
  // The key a compiled form was made with; nullopt for bytes that are not one.
  static std::optional<uint64_t> compiled_source_key(std::string_view compiled);
  // Loads that form (with tokenizer_config.json's text, or empty); every length and id is checked.
  static Tokenizer from_compiled(std::string_view compiled,
                                 const std::string& tokenizer_config_json,
                                 const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text may hold any bytes: invalid UTF-8 sequences are first replaced by U+FFFD (one per maximal
  // invalid subpart, as Python's bytes.decode(errors="replace") and the WHATWG decoder do).
  // add_special runs the post-processor (Llama 3: prepends <|begin_of_text|>; Gemma 3: <bos>).
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Concatenated token bytes, invalid UTF-8 replaced by U+FFFD. skip_special drops special added
  // tokens. Ids >= vocab_size() (embedding rows the tokenizer has no token for, which a model can
  // still pick) decode to nothing, as Hugging Face tokenizers' decode skips them; negative ids
  // throw. Never applies clean_up_tokenization_spaces.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Highest token id + 1 (BPE vocab and added tokens). Embedding tables may have more rows.
  int32_t vocab_size() const;
  // Id of a vocab entry (byte-level spelling, e.g. "Ġthe") or an added token ("<|im_end|>").
  std::optional<int32_t> token_id(std::string_view token) const;
  // Spelling of an id as in tokenizer.json; empty for unused ids. Throws for ids out of range.
  const std::string& token(int32_t id) const;
  // Raw bytes an id stands for (what decode concatenates). Throws for ids out of range.
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token with "special": true
  // From tokenizer_config.json (bos_token / eos_token, string or {"content": ...}); nullopt if
  // unset.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenization: push() returns the text that became complete, never a partial UTF-8
// sequence; the concatenation of all push() results and flush() equals decode() of all ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();  // emits what is held back (an incomplete sequence becomes U+FFFD)

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;    // bytes of an incomplete UTF-8 sequence
  size_t strip_left_ = 0;  // leading characters a Strip decoder may still remove
};

enum class ChatFamily { Qwen3, Llama3, Phi4Mini };
ChatFamily chat_family_for(Arch arch);
const char* chat_family_name(ChatFamily f);  // "qwen3", "llama3", "phi4mini"

struct ChatMessage {
  std::string role, content;               // role: system | user | assistant | tool
  std::vector<ChatToolCall> tool_calls{};  // assistant: the calls it made (after content)
  std::string tool_call_id{};              // tool: the call this result answers
};

struct ChatOptions {
  bool add_generation_prompt = true;
  // Qwen3: append "<think>\n\n</think>\n\n" after the assistant header (enable_thinking=false).
  bool disable_thinking = false;
  // Llama 3: when set, render exactly as the Llama 3.2 Hub template (always a system block with
  // "Cutting Knowledge Date: December 2023\nToday Date: <date>\n\n"). Unset (default): the plain
  // Llama 3 format of docs/design.md section 1 (the ExecuTorch runner's), no date block.
  std::optional<std::string> llama_date;
  // The tools offered to the model: a JSON array of OpenAI tool objects ({"type": "function",
  // "function": {"name", "description", "parameters"}}); empty: none. Rendered as each family's
  // template does (Llama 3: needs llama_date, the Llama 3.2 template; see chat_tools.cpp).
  std::string tools;
};

// Renders a conversation as the model's chat template does. Single user turn (defaults) gives
// exactly the prompts of docs/design.md section 1. Qwen3: default renders no <think> block (as the
// real template when enable_thinking is undefined). Throws Error on an unknown role.
std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs,
                                const ChatOptions& opt);
std::string apply_chat_template(ChatFamily f, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt, bool disable_thinking = false);

}  // namespace vkllm
