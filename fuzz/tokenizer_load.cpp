// fuzz_tokenizer_load: tokenizer.json, NUL, tokenizer_config.json, NUL, a text. Loads the pair as
// an artifact's embedded files are loaded (Tokenizer::from_text), then encodes the text and
// decodes the ids: every id must be in range and streaming detokenization must equal decode().
#include <optional>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace vkllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_parts(data, size, 3);
  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::from_text(parts[0], parts[1], "tokenizer.json"));
  } catch (const Error&) {
    return 0;
  }
  try {
    const std::vector<int32_t> ids = tok->encode(parts[2], (size & 1) != 0);
    for (int32_t id : ids) VKLLM_FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
    const std::string text = tok->decode(ids);
    StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    VKLLM_FUZZ_CHECK(streamed == text);
  } catch (const Error&) {
    // A vocab hole (an id no entry spells) or a regex that hits PCRE2's match limit.
  }
  return 0;
}
