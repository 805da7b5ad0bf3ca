// The grammar's token index of a fixture tokenizer (its token bytes, specials and eos), as
// src/runtime/api.cpp builds it for a model, over `vocab` logits (at least the tokenizer's).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace vkllm::test {

inline std::shared_ptr<const grammar::TokenIndex> token_index_of(const Tokenizer& t,
                                                                 int32_t vocab) {
  std::vector<std::string> bytes(static_cast<size_t>(t.vocab_size()));
  std::vector<bool> special(bytes.size());
  for (int32_t i = 0; i < t.vocab_size(); ++i) {
    bytes[static_cast<size_t>(i)] = t.token_bytes(i);
    special[static_cast<size_t>(i)] = t.is_special(i);
  }
  std::vector<int32_t> eos;
  if (auto e = t.eos_id()) eos.push_back(*e);
  return std::make_shared<grammar::TokenIndex>(bytes, special, eos, vocab);
}

}  // namespace vkllm::test
