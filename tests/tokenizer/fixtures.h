// Shared helpers of the tokenizer tests: the fixture tokenizers (loaded once) and the corpus.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace vkllm::test {

inline std::string fixtures_dir() {
  return VKLLM_SOURCE_DIR "/.fixtures";
}
inline std::string tests_dir() {
  return VKLLM_SOURCE_DIR "/tests/tokenizer";
}

// The fixture tokenizer NAME (qwen3, llama3.2, phi4mini), loaded once per process. Returns null and
// records a failure (never a skip) when the fixtures have not been generated.
inline const Tokenizer* fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::string dir = fixtures_dir() + "/" + name;
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    ADD_FAILURE() << "tokenizer fixtures missing: " << dir
                  << "/tokenizer.json not found; run `tools/fixtures/make_fixtures.sh .fixtures` "
                     "in the repository root";
    return nullptr;
  }
  auto tok = std::make_unique<Tokenizer>(Tokenizer::from_dir(dir));
  return cache.emplace(name, std::move(tok)).first->second.get();
}

// The one-line message of the Error f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace vkllm::test
