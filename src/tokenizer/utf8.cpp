#include "tokenizer/utf8.h"

namespace vkllm::utf8 {
namespace {

// Length of the valid sequence starting at s[i] (1..4), or 0 when invalid; *need is set to the
// number of bytes the lead byte announces. *valid_len counts how many bytes were valid so far.
struct Step {
  int need = 0;   // total length the lead byte announces (0: invalid lead)
  int valid = 0;  // bytes that form a valid prefix starting at i (<= need)
};

Step step(const unsigned char* p, size_t n) {
  Step st;
  unsigned char b = p[0];
  if (b < 0x80) return {1, 1};
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    st.need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    st.need = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    st.need = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  st.valid = 1;
  for (int k = 1; k < st.need; ++k) {
    if (static_cast<size_t>(k) >= n) return st;
    unsigned char c = p[k];
    if (c < lo || c > hi) return st;
    lo = 0x80;
    hi = 0xBF;
    st.valid = k + 1;
  }
  return st;
}

const char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

size_t valid_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    Step st = step(p + i, n - i);
    if (st.need == 0 || st.valid < st.need) return i;
    i += static_cast<size_t>(st.need);
  }
  return n;
}

size_t append_lossy(std::string_view s, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    size_t start = i;
    while (i < n && p[i] < 0x80) ++i;
    out.append(s.data() + start, i - start);
    if (i >= n) break;
    Step st = step(p + i, n - i);
    if (st.need != 0 && st.valid == st.need) {
      out.append(s.data() + i, static_cast<size_t>(st.need));
      i += static_cast<size_t>(st.need);
    } else if (st.need != 0 && !final && i + static_cast<size_t>(st.valid) == n) {
      return i;  // incomplete sequence at the end: wait for more bytes
    } else {
      out.append(kReplacement);
      i += st.valid > 0 ? static_cast<size_t>(st.valid) : 1;
    }
  }
  return n;
}

char32_t next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x3F >> (len - 1));
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(len);
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : extra++;
    }
    return t;
  }();
  return table;
}

int char_to_byte(char32_t c) {
  static const std::array<int16_t, 512> inv = [] {
    std::array<int16_t, 512> t{};
    t.fill(-1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) t[fwd[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return t;
  }();
  return c < 512 ? inv[c] : -1;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace vkllm::utf8
