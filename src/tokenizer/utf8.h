// UTF-8 helpers of the tokenizer: lossy decoding with U+FFFD per maximal invalid subpart (the
// WHATWG / Python errors="replace" rule), code point iteration, the GPT-2 byte-level alphabet.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace vkllm::utf8 {

// Length of the longest prefix of s that is valid UTF-8.
size_t valid_prefix(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

// Appends s to out with every invalid sequence replaced by U+FFFD. When `final` is false, an
// incomplete but so far valid sequence at the very end is not consumed; returns the number of
// bytes consumed (== s.size() when final).
size_t append_lossy(std::string_view s, std::string& out, bool final = true);
inline std::string lossy(std::string_view s) {
  std::string out;
  append_lossy(s, out, true);
  return out;
}

// Decodes the code point at s[i] (s valid UTF-8), advancing i.
char32_t next(std::string_view s, size_t& i);
void append(std::string& out, char32_t cp);

// The GPT-2 byte <-> unicode table of the ByteLevel pre-tokenizer and decoder.
const std::array<char32_t, 256>& byte_to_char();
// Inverse; returns -1 for code points outside the table.
int char_to_byte(char32_t c);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_whitespace(char32_t c);

}  // namespace vkllm::utf8
