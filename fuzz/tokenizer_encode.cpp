// fuzz_tokenizer_encode: arbitrary bytes through the three real tokenizers (.fixtures/: Qwen3,
// Llama 3.2, Phi-4-mini; the first input byte picks one). Invalid UTF-8 is replaced, never
// rejected, so encode() must always succeed; ids must be in range; decode(encode(x)) must give
// back x (with U+FFFD for invalid sequences; Qwen3 also NFC-normalizes); streaming
// detokenization must equal decode().
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace vkllm;

namespace {

struct Loaded {
  std::string name;
  Tokenizer tok;
  bool nfc;
};
std::vector<std::unique_ptr<Loaded>> g_toks;

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  VKLLM_FUZZ_CHECK(n >= 0);
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("VKLLM_FIXTURES_DIR");
  const std::string dir = env ? env : VKLLM_SOURCE_DIR "/.fixtures";
  try {
    for (const char* fam : {"qwen3", "llama3.2", "phi4mini"})
      g_toks.push_back(std::make_unique<Loaded>(
          Loaded{fam, Tokenizer::from_dir(dir + "/" + fam), std::string(fam) == "qwen3"}));
  } catch (const Error& e) {
    std::fprintf(stderr,
                 "fuzz_tokenizer_encode: %s\n(the fixtures come from tools/fixtures/"
                 "make_fixtures.sh; VKLLM_FIXTURES_DIR points elsewhere)\n",
                 e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Loaded& l = *g_toks[data[0] % g_toks.size()];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = l.tok.encode(text);
  for (int32_t id : ids) VKLLM_FUZZ_CHECK(id >= 0 && id < l.tok.vocab_size());
  const std::string back = l.tok.decode(ids);
  std::string expect = utf8::is_valid(text) ? text : utf8::lossy(text);
  // Qwen3's added tokens (all "<...>") are matched before NFC; elsewhere NFC covers the whole text.
  if (!l.nfc || expect.find('<') == std::string::npos) {
    if (l.nfc) expect = nfc(expect);
    VKLLM_FUZZ_CHECK(back == expect);
  }
  StreamDecoder sd(l.tok);
  std::string streamed;
  for (int32_t id : ids) streamed += sd.push(id);
  streamed += sd.flush();
  VKLLM_FUZZ_CHECK(streamed == back);
  return 0;
}
