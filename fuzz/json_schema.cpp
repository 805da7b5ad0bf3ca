// fuzz_json_schema: a JSON schema (untrusted: response_format and tools of `vkllm serve`), then a
// NUL, then bytes a model might emit. The compiler either refuses the schema with a SchemaError or
// gives a grammar; then, over a small vocabulary (every single byte and a few multi-byte tokens),
// the matcher follows the emitted bytes and at every step the mask must agree with accept_token
// (a token the mask allows is accepted, one it refuses is not), the budget rule must keep the text
// completable, and a walk that always takes the first allowed token must end complete within the
// budget it was given.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "grammar/grammar.h"

using namespace vkllm;

namespace {

std::shared_ptr<const grammar::TokenIndex> small_vocab() {
  static const std::shared_ptr<const grammar::TokenIndex> index = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "12", "\u00e9", "  ",
                          "\n", "[]", "{}", "\"a\""})
      bytes.push_back(t);
    std::vector<bool> special(bytes.size(), false);
    bytes.push_back("<eos>");
    special.push_back(true);
    const int32_t eos = static_cast<int32_t>(bytes.size() - 1);
    return std::make_shared<const grammar::TokenIndex>(bytes, special, std::vector<int32_t>{eos},
                                                       static_cast<int32_t>(bytes.size()));
  }();
  return index;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_parts(data, size, 2);
  const nlohmann::json schema = nlohmann::json::parse(parts[0], nullptr, false);
  if (schema.is_discarded()) return 0;
  grammar::SchemaLimits limits;
  limits.max_nodes = 200;  // small grammars: the walk below stays quick
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::compile_json_schema(schema, limits);
  } catch (const grammar::SchemaError& e) {
    VKLLM_FUZZ_CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return 0;
  }
  const auto index = small_vocab();
  grammar::Matcher m(g, index);
  std::vector<uint8_t> allowed;
  const std::string& text = parts[1];
  for (size_t i = 0; i < std::min<size_t>(text.size(), 64); ++i) {
    m.fill_mask(allowed, 0);
    const int32_t ids[] = {static_cast<int32_t>(static_cast<uint8_t>(text[i])), 256, 258, 260};
    for (int32_t id : ids) {
      grammar::Matcher probe(m);
      VKLLM_FUZZ_CHECK(probe.accept_token(id) == (allowed[static_cast<size_t>(id)] != 0));
      VKLLM_FUZZ_CHECK(m.allows(id, 0) == (allowed[static_cast<size_t>(id)] != 0));
    }
    // One token's verdict equals the mask's under a budget too.
    const int left = 1 + static_cast<int>(i % 5);
    m.fill_mask(allowed, left);
    for (int32_t id = 0; id < static_cast<int32_t>(allowed.size()); ++id)
      VKLLM_FUZZ_CHECK(m.allows(id, left) == (allowed[static_cast<size_t>(id)] != 0));
    if (!m.accept_bytes(text.substr(i, 1))) break;
  }
  if (m.finished()) return 0;
  // The budget rule: with enough tokens left, taking the first allowed token each step completes.
  const int budget = m.distance() + 4;
  VKLLM_FUZZ_CHECK(budget < 100000);
  for (int left = budget; left > 0 && !m.complete(); --left) {
    m.fill_mask(allowed, left);
    for (int32_t id = 0; id < static_cast<int32_t>(allowed.size()); ++id)
      VKLLM_FUZZ_CHECK(m.allows(id, left) == (allowed[static_cast<size_t>(id)] != 0));
    const auto it = std::find(allowed.begin(), allowed.end(), 1);
    VKLLM_FUZZ_CHECK(it != allowed.end());
    VKLLM_FUZZ_CHECK(m.accept_token(static_cast<int32_t>(it - allowed.begin())));
  }
  VKLLM_FUZZ_CHECK(m.complete());
  return 0;
}
