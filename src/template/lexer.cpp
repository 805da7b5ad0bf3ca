// Tokenizing chat templates: the preprocessing @huggingface/jinja applies (trailing newline,
// lstrip_blocks, trim_blocks, {% generation %} tags removed) and its tokenizer. Every token keeps
// the offset of its first character in the original template, so errors name the line and column
// the author sees.
#include "template/lexer.h"

#include <fmt/format.h>

#include <cstring>

#include "template/internal.h"

namespace vkllm::tmpl::detail {
namespace {

// A preprocessed template: the text and, for each byte, its offset in the original.
struct Src {
  std::string s;
  std::vector<uint32_t> at;
  void put(char c, uint32_t o) {
    s.push_back(c);
    at.push_back(o);
  }
};

bool line_start(const Src& x, size_t i) {
  if (i == 0) return true;
  const char c = x.s[i - 1];
  if (c == '\n' || c == '\r') return true;
  // U+2028 and U+2029 also end a line for JavaScript's multiline ^.
  return i >= 3 && x.s.compare(i - 3, 2, "\xE2\x80") == 0 &&
         (x.s[i - 1] == '\xA8' || x.s[i - 1] == '\xA9');
}

Src preprocess(std::string_view source) {
  Src x;
  for (size_t i = 0; i < source.size(); ++i) x.put(source[i], static_cast<uint32_t>(i));
  if (!x.s.empty() && x.s.back() == '\n') {
    x.s.pop_back();
    x.at.pop_back();
  }
  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
  Src y;
  for (size_t i = 0; i < x.s.size();) {
    if (line_start(x, i)) {
      size_t j = i;
      while (j < x.s.size() && (x.s[j] == ' ' || x.s[j] == '\t')) ++j;
      if (j > i && j + 1 < x.s.size() && x.s[j] == '{' &&
          (x.s[j + 1] == '#' || x.s[j + 1] == '%' || x.s[j + 1] == '-')) {
        i = j;
        continue;
      }
    }
    y.put(x.s[i], x.at[i]);
    ++i;
  }
  // trim_blocks: /([#%-]})\n/g -> "$1"
  Src z;
  for (size_t i = 0; i < y.s.size();) {
    if (i + 2 < y.s.size() && (y.s[i] == '#' || y.s[i] == '%' || y.s[i] == '-') &&
        y.s[i + 1] == '}' && y.s[i + 2] == '\n') {
      z.put(y.s[i], y.at[i]);
      z.put('}', y.at[i + 1]);
      i += 3;
      continue;
    }
    z.put(y.s[i], y.at[i]);
    ++i;
  }
  // {% generation %} and {% endgeneration %} (assistant-mask markers) are removed:
  // /{%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, "-" also trimming the whitespace around.
  Src w;
  size_t last = 0;
  for (size_t i = 0; i + 1 < z.s.size(); ++i) {
    if (z.s[i] != '{' || z.s[i + 1] != '%') continue;
    size_t j = i + 2;
    const bool lstrip = j < z.s.size() && z.s[j] == '-';
    if (lstrip) ++j;
    while (size_t n = js_space_at(z.s, j)) j += n;
    if (z.s.compare(j, 3, "end") == 0) j += 3;
    if (z.s.compare(j, 10, "generation") != 0) continue;
    j += 10;
    while (size_t n = js_space_at(z.s, j)) j += n;
    const bool rstrip = j < z.s.size() && z.s[j] == '-';
    if (rstrip) ++j;
    if (z.s.compare(j, 2, "%}") != 0) continue;
    j += 2;
    size_t after = j;
    while (size_t n = js_space_at(z.s, after)) after += n;
    size_t end = i;
    if (lstrip) {
      while (end > last) {
        size_t k = end - 1;
        while (k > last && (static_cast<unsigned char>(z.s[k]) & 0xC0) == 0x80) --k;
        if (!js_space_at(z.s, k)) break;
        end = k;
      }
    }
    for (size_t k = last; k < end; ++k) w.put(z.s[k], z.at[k]);
    if (!rstrip)
      for (size_t k = j; k < after; ++k) w.put(z.s[k], z.at[k]);
    last = after;
    i = after - 1;
  }
  for (size_t k = last; k < z.s.size(); ++k) w.put(z.s[k], z.at[k]);
  return w;
}

}  // namespace

const char* tok_name(Tok t) {
  static const char* names[] = {"text",     "number", "string",     "identifier", "'='",
                                "'('",      "')'",    "'{%'",       "'%}'",       "'{{'",
                                "'}}'",     "'['",    "']'",        "'{'",        "'}'",
                                "','",      "'.'",    "':'",        "'|'",        "operator",
                                "operator", "'**'",   "comparison", "operator",   "comment"};
  return names[static_cast<int>(t)];
}

namespace {

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone UTF-16 surrogate
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string_view original, const Src& src) : orig_(original), x_(src) {}

  std::vector<Token> run() {
    const std::string& s = x_.s;
    const size_t n = s.size();
    while (cur_ < n) {
      const Tok* last = toks_.empty() ? nullptr : &toks_.back().type;
      if (!last || *last == Tok::CloseStmt || *last == Tok::CloseExpr || *last == Tok::Comment) {
        size_t end = cur_;
        while (true) {
          end = s.find('{', end);
          if (end == std::string::npos) {
            end = n;
            break;
          }
          if (end + 1 < n && (s[end + 1] == '%' || s[end + 1] == '{' || s[end + 1] == '#')) break;
          ++end;
        }
        if (end > cur_) {
          push(Tok::Text, s.substr(cur_, end - cur_), cur_);
          cur_ = end;
          continue;
        }
      }
      if (s[cur_] == '{' && cur_ + 1 < n) {
        const char next = s[cur_ + 1];
        if (next == '#') {
          const size_t open = cur_;
          cur_ += 2;
          const bool strip_before = cur_ < n && s[cur_] == '-';
          if (strip_before) ++cur_;
          const size_t end = s.find("#}", cur_);
          if (end == std::string::npos) fail_at(open, "missing end of comment tag '#}'");
          std::string comment = s.substr(cur_, end - cur_);
          const bool strip_after = !comment.empty() && comment.back() == '-';
          if (strip_before) strip_trailing();
          push(Tok::Comment, std::move(comment), open);
          cur_ = end + 2;
          if (strip_after) skip_space();
          continue;
        }
        if (cur_ + 2 < n && s[cur_ + 2] == '-' && (next == '%' || next == '{')) {
          strip_trailing();
          push(next == '%' ? Tok::OpenStmt : Tok::OpenExpr, next == '%' ? "{%" : "{{", cur_);
          if (next == '{') depth_ = 0;
          cur_ += 3;
          continue;
        }
      }
      while (size_t w = js_space_at(s, cur_)) {
        cur_ += w;
        if (cur_ >= n) fail_at(n, "unexpected end of template inside a tag");
      }
      const char c = s[cur_];
      if (c == '-' && cur_ + 2 < n && s[cur_ + 2] == '}' &&
          (s[cur_ + 1] == '%' || s[cur_ + 1] == '}')) {
        push(s[cur_ + 1] == '%' ? Tok::CloseStmt : Tok::CloseExpr, "", cur_);
        cur_ += 3;
        skip_space();
        continue;
      }
      if (c == '-' || c == '+') {
        const Tok* lt = toks_.empty() ? nullptr : &toks_.back().type;
        if (!lt || *lt == Tok::Text) fail_at(cur_, fmt::format("unexpected character '{}'", c));
        if (*lt != Tok::Ident && *lt != Tok::Num && *lt != Tok::Str && *lt != Tok::RParen &&
            *lt != Tok::RBracket) {
          const size_t start = cur_++;
          std::string num = digits();
          if (!num.empty() && cur_ + 1 < n && s[cur_] == '.' && is_digit(s[cur_ + 1])) {
            ++cur_;
            num += "." + digits();
          }
          if (num.empty())
            push(Tok::Unary, std::string(1, c), start);
          else
            push(Tok::Num, c + num, start);
          continue;
        }
      }
      if (match_table()) continue;
      if (c == '\'' || c == '"') {
        const size_t start = cur_++;
        push(Tok::Str, string_body(c, start), start);
        ++cur_;
        continue;
      }
      if (is_digit(c)) {
        const size_t start = cur_;
        std::string num = digits();
        const bool after_dot = !toks_.empty() && toks_.back().type == Tok::Dot;
        if (!after_dot && cur_ + 1 < n && s[cur_] == '.' && is_digit(s[cur_ + 1])) {
          ++cur_;
          num += "." + digits();
        }
        push(Tok::Num, std::move(num), start);
        continue;
      }
      if (is_word(c)) {
        const size_t start = cur_;
        while (cur_ < n && is_word(s[cur_])) ++cur_;
        if (cur_ >= n) fail_at(n, "unexpected end of template inside a tag");
        push(Tok::Ident, s.substr(start, cur_ - start), start);
        continue;
      }
      fail_at(cur_, fmt::format("unexpected character '{}'", printable(cur_)));
    }
    return std::move(toks_);
  }

 private:
  std::string_view orig_;
  const Src& x_;
  size_t cur_ = 0;
  int depth_ = 0;  // '{' minus '}' inside {{ }}: a '}}' there closes dict literals, not the tag
  std::vector<Token> toks_;

  uint32_t orig_pos(size_t i) const {
    return i < x_.at.size() ? x_.at[i] : static_cast<uint32_t>(orig_.size());
  }
  [[noreturn]] void fail_at(size_t i, const std::string& msg) const {
    syntax_error(orig_, orig_pos(i), msg);
  }
  void push(Tok t, std::string v, size_t at) { toks_.push_back({t, std::move(v), orig_pos(at)}); }
  // The character at i for a message: ASCII as is, a valid UTF-8 sequence whole, else \xNN.
  std::string printable(size_t i) const {
    const unsigned char c = static_cast<unsigned char>(x_.s[i]);
    if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
    const size_t len = c >= 0xF8 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = len > 0 && i + len <= x_.s.size();
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(x_.s[i + k]) & 0xC0) == 0x80;
    if (ok) return x_.s.substr(i, len);
    return fmt::format("\\x{:02x}", c);
  }
  std::string digits() {
    const size_t start = cur_;
    while (cur_ < x_.s.size() && is_digit(x_.s[cur_])) ++cur_;
    if (cur_ >= x_.s.size()) fail_at(x_.s.size(), "unexpected end of template inside a tag");
    return x_.s.substr(start, cur_ - start);
  }
  void strip_trailing() {
    if (toks_.empty() || toks_.back().type != Tok::Text) return;
    std::string& v = toks_.back().value;
    v = js_trim(v, false, true);
    if (v.empty()) toks_.pop_back();
  }
  void skip_space() {
    while (size_t w = js_space_at(x_.s, cur_)) cur_ += w;
  }
  bool match_table() {
    static const std::pair<const char*, Tok> table[] = {
        {"{%", Tok::OpenStmt},  {"%}", Tok::CloseStmt}, {"{{", Tok::OpenExpr},
        {"}}", Tok::CloseExpr}, {"(", Tok::LParen},     {")", Tok::RParen},
        {"{", Tok::LBrace},     {"}", Tok::RBrace},     {"[", Tok::LBracket},
        {"]", Tok::RBracket},   {",", Tok::Comma},      {".", Tok::Dot},
        {":", Tok::Colon},      {"|", Tok::Pipe},       {"<=", Tok::Cmp},
        {">=", Tok::Cmp},       {"==", Tok::Cmp},       {"!=", Tok::Cmp},
        {"<", Tok::Cmp},        {">", Tok::Cmp},        {"+", Tok::Add},
        {"-", Tok::Add},        {"~", Tok::Add},        {"**", Tok::Pow},
        {"*", Tok::Mul},        {"//", Tok::Mul},       {"/", Tok::Mul},
        {"%", Tok::Mul},        {"=", Tok::Equals}};
    for (const auto& [seq, type] : table) {
      if (type == Tok::CloseExpr && depth_ > 0) continue;
      if (x_.s.compare(cur_, std::strlen(seq), seq) != 0) continue;
      push(type, seq, cur_);
      if (type == Tok::OpenExpr) depth_ = 0;
      if (type == Tok::LBrace) ++depth_;
      if (type == Tok::RBrace) --depth_;
      cur_ += std::strlen(seq);
      return true;
    }
    return false;
  }
  std::string string_body(char quote, size_t open) {
    const std::string& s = x_.s;
    std::string out;
    while (true) {
      if (cur_ >= s.size()) fail_at(open, "unterminated string literal");
      const char c = s[cur_];
      if (c == quote) break;
      ++cur_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (cur_ >= s.size()) fail_at(open, "unterminated string literal");
      const char e = s[cur_++];
      if (e == 'x' || e == 'u') {
        const size_t len = e == 'x' ? 2 : 4;
        uint32_t cp = 0;
        for (size_t k = 0; k < len; ++k) {
          const char h = cur_ + k < s.size() ? s[cur_ + k] : '\0';
          const int d = is_digit(h)              ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (d < 0) fail_at(cur_ - 2, fmt::format("invalid escape sequence \\{}", e));
          cp = cp * 16 + static_cast<uint32_t>(d);
        }
        cur_ += len;
        append_utf8(out, cp);
        continue;
      }
      static const std::pair<char, char> escapes[] = {{'n', '\n'},  {'t', '\t'}, {'r', '\r'},
                                                      {'b', '\b'},  {'f', '\f'}, {'v', '\v'},
                                                      {'\'', '\''}, {'"', '"'},  {'\\', '\\'}};
      bool known = false;
      for (const auto& [k, v] : escapes)
        if (k == e) {
          out += v;
          known = true;
        }
      if (!known)
        fail_at(cur_ - 2, fmt::format("unknown escape sequence \\{}", printable(cur_ - 1)));
    }
    return out;
  }
};

}  // namespace

std::pair<int, int> line_col(std::string_view source, size_t offset) {
  int line = 1, col = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

void syntax_error(std::string_view source, size_t offset, const std::string& msg) {
  auto [l, c] = line_col(source, offset);
  const std::string what =
      fmt::format("template syntax error at line {}, column {}: {}", l, c, msg);
  throw TemplateError(what, msg, false);
}

std::vector<Token> tokenize(std::string_view source) {
  const Src src = preprocess(source);
  return Lexer(source, src).run();
}

}  // namespace vkllm::tmpl::detail
