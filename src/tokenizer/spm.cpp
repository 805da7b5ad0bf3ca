// SentencePiece-style BPE as Hugging Face tokenizer.json describes it (Gemma 3, Llama 2, Mistral
// v1): Replace / Prepend normalizers, the Metaspace pre-tokenizer, BPE over characters with <0xNN>
// byte fallback and the unknown token, and the Replace / ByteFallback / Fuse / Strip decoders.
// Components or options outside that set are refused with one line naming them.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_int.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace vkllm {

using nlohmann::json;

namespace {

std::string replace_all(std::string_view s, std::string_view pat, std::string_view rep) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t pos = 0, e;
  while ((e = s.find(pat, pos)) != std::string_view::npos) {
    out.append(s.substr(pos, e - pos));
    out.append(rep);
    pos = e + pat.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string need_string(const json& j, const char* key, const std::string& where, const char* ctx) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string())
    fail("{}: {} needs a string \"{}\"", where, ctx, key);
  return j.at(key).get<std::string>();
}

// The pattern of a Replace normalizer or decoder: {"String": s} (non-empty). Regex patterns are
// refused.
std::string literal_pattern(const json& j, const std::string& where, const char* ctx) {
  if (!j.contains("pattern") || !j.at("pattern").is_object())
    fail("{}: {} needs a \"pattern\" object", where, ctx);
  const json& p = j.at("pattern");
  if (p.contains("Regex")) fail("{}: unsupported {} with a Regex pattern", where, ctx);
  std::string s = need_string(p, "String", where, ctx);
  if (s.empty()) fail("{}: {} has an empty pattern", where, ctx);
  if (!utf8::is_valid(s)) fail("{}: {} pattern is not valid UTF-8", where, ctx);
  return s;
}

bool is_one_char(const std::string& s) {
  if (s.empty() || !utf8::is_valid(s)) return false;
  size_t i = 0;
  utf8::next(s, i);
  return i == s.size();
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte a "<0xNN>" token stands for (hex digits of either case, as the ByteFallback decoder
// reads them), or -1.
int byte_token(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::string apply_normalizer(std::string_view text, const NormalizerStep& step) {
  switch (step.kind) {
    case NormalizerStep::Kind::Replace:
      return replace_all(text, step.pattern, step.content);
    case NormalizerStep::Kind::Prepend:
      return text.empty() ? std::string() : step.content + std::string(text);
    case NormalizerStep::Kind::Unicode:
      break;
  }
  return std::string(text);
}

std::string apply_metaspace(std::string_view text, const MetaspaceStep& m, bool at_start) {
  std::string s = replace_all(text, " ", m.replacement);
  bool prepend = m.scheme == MetaspaceStep::Scheme::Always ||
                 (m.scheme == MetaspaceStep::Scheme::First && at_start);
  if (prepend && s.compare(0, m.replacement.size(), m.replacement) != 0) s.insert(0, m.replacement);
  return s;
}

bool load_spm_normalizer(TokenizerImpl& t, const json& n, const std::string& type) {
  NormalizerStep st;
  if (type == "Replace") {
    st.kind = NormalizerStep::Kind::Replace;
    st.pattern = literal_pattern(n, t.where, "Replace normalizer");
    st.content = need_string(n, "content", t.where, "Replace normalizer");
  } else if (type == "Prepend") {
    st.kind = NormalizerStep::Kind::Prepend;
    st.content = need_string(n, "prepend", t.where, "Prepend normalizer");
  } else {
    return false;
  }
  if (!utf8::is_valid(st.content)) fail("{}: {} normalizer text is not valid UTF-8", t.where, type);
  t.normalizers.push_back(std::move(st));
  return true;
}

void load_metaspace(TokenizerImpl& t, const json& p) {
  if (t.metaspace || !t.pre_tokenizers.empty())
    fail("{}: unsupported pre_tokenizer: Metaspace after another pre-tokenizer", t.where);
  MetaspaceStep m;
  m.replacement = need_string(p, "replacement", t.where, "Metaspace pre_tokenizer");
  if (!is_one_char(m.replacement)) fail("{}: Metaspace replacement must be one character", t.where);
  if (p.contains("prepend_scheme") && !p.at("prepend_scheme").is_null()) {
    std::string s = need_string(p, "prepend_scheme", t.where, "Metaspace pre_tokenizer");
    if (s == "always")
      m.scheme = MetaspaceStep::Scheme::Always;
    else if (s == "first")
      m.scheme = MetaspaceStep::Scheme::First;
    else if (s == "never")
      m.scheme = MetaspaceStep::Scheme::Never;
    else
      fail("{}: unknown Metaspace prepend_scheme \"{}\"", t.where, s);
  } else if (p.contains("add_prefix_space") && p.at("add_prefix_space").is_boolean()) {
    // Serializations before prepend_scheme existed.
    m.scheme = p.at("add_prefix_space").get<bool>() ? MetaspaceStep::Scheme::Always
                                                    : MetaspaceStep::Scheme::Never;
  }
  m.split = true;
  if (p.contains("split") && !p.at("split").is_null()) {
    if (!p.at("split").is_boolean()) fail("{}: Metaspace split must be a boolean", t.where);
    m.split = p.at("split").get<bool>();
  }
  if (m.split) {
    // One character between \Q and \E: a literal (a lone backslash included).
    PreTokenizerStep st;
    st.regex = std::make_shared<Regex>("\\Q" + m.replacement + "\\E", t.where);
    st.behavior = SplitBehavior::MergedWithNext;
    t.pre_tokenizers.push_back(std::move(st));
  }
  t.metaspace = std::move(m);
}

void load_spm_decoder(TokenizerImpl& t, const json& d) {
  if (d.is_null()) fail("{}: no decoder", t.where);
  std::vector<const json*> steps;
  if (d.is_object() && d.value("type", "") == "Sequence") {
    if (!d.contains("decoders") || !d.at("decoders").is_array())
      fail("{}: decoder Sequence has no \"decoders\" array", t.where);
    for (const auto& s : d.at("decoders")) steps.push_back(&s);
  } else {
    steps.push_back(&d);
  }
  bool fused = false, stripped = false;
  for (const json* s : steps) {
    std::string type = need_string(*s, "type", t.where, "decoder");
    if (stripped) fail("{}: unsupported decoder: {} after Strip", t.where, type);
    if (type == "Replace") {
      if (t.dec_byte_fallback || fused)
        fail("{}: unsupported decoder: Replace after ByteFallback or Fuse", t.where);
      std::string pat = literal_pattern(*s, t.where, "Replace decoder");
      std::string content = need_string(*s, "content", t.where, "Replace decoder");
      if (!utf8::is_valid(content)) fail("{}: Replace decoder content is not valid UTF-8", t.where);
      t.dec_replace.emplace_back(std::move(pat), std::move(content));
    } else if (type == "ByteFallback") {
      if (fused) fail("{}: unsupported decoder: ByteFallback after Fuse", t.where);
      t.dec_byte_fallback = true;
    } else if (type == "Fuse") {
      fused = true;
    } else if (type == "Strip") {
      // After Fuse the decoded text is one token: Strip trims its start.
      if (!fused) fail("{}: unsupported decoder: Strip before Fuse", t.where);
      t.strip_content = need_string(*s, "content", t.where, "Strip decoder");
      if (!is_one_char(t.strip_content))
        fail("{}: Strip decoder content must be one character", t.where);
      const int64_t start =
          json_int<int64_t>(s->value("start", json(0)), t.where + ": Strip start");
      const int64_t stop = json_int<int64_t>(s->value("stop", json(0)), t.where + ": Strip stop");
      if (start < 0 || start > 1024) fail("{}: Strip start {} out of range", t.where, start);
      if (stop != 0) fail("{}: unsupported decoder: Strip with stop={}", t.where, stop);
      t.strip_start = static_cast<size_t>(start);
      stripped = true;
    } else if (type == "ByteLevel") {
      fail("{}: unsupported decoder: ByteLevel without a ByteLevel pre_tokenizer", t.where);
    } else {
      fail("{}: unsupported decoder type \"{}\"", t.where, type);
    }
  }
}

void finish_char_model(TokenizerImpl& t, const json& m) {
  t.fallback_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    // The spelling the model looks up (Rust's format!("<{:#04X}>")): "<0x" + two upper-case digits.
    auto it = t.bytes_to_id.find(fmt::format("<0x{:02X}>", b));
    if (it != t.bytes_to_id.end()) t.fallback_id[static_cast<size_t>(b)] = it->second;
  }
  t.char_id.reserve(t.bytes_to_id.size() / 4);
  for (const auto& [spelling, id] : t.bytes_to_id) {
    if (!utf8::is_valid(spelling))
      fail("{}: vocab entry {} is not valid UTF-8", t.where, json(spelling).dump());
    size_t i = 0;
    char32_t c = utf8::next(spelling, i);
    if (i == spelling.size()) t.char_id.emplace(c, id);
  }
  if (m.contains("unk_token") && !m.at("unk_token").is_null()) {
    if (!m.at("unk_token").is_string()) fail("{}: model.unk_token must be a string", t.where);
    const std::string& name = m.at("unk_token").get_ref<const std::string&>();
    auto it = t.bytes_to_id.find(name);
    if (it == t.bytes_to_id.end())
      fail("{}: model.unk_token {} is not in the vocab", t.where, json(name).dump());
    t.unk = it->second;
  }
  if (m.contains("fuse_unk") && !m.at("fuse_unk").is_null()) {
    if (!m.at("fuse_unk").is_boolean()) fail("{}: model.fuse_unk must be a boolean", t.where);
    t.fuse_unk = m.at("fuse_unk").get<bool>();
  }
  // What each id decodes to (added tokens go through the decoder as well).
  for (size_t id = 0; id < t.id_token.size(); ++id) {
    const std::string& s = t.id_token[id];
    if (s.empty()) continue;
    int b = t.dec_byte_fallback ? byte_token(s) : -1;
    if (b >= 0) {
      t.id_bytes[id] = std::string(1, static_cast<char>(b));
      continue;
    }
    std::string text = s;
    for (const auto& [pat, rep] : t.dec_replace) text = replace_all(text, pat, rep);
    t.id_bytes[id] = std::move(text);
  }
}

void TokenizerImpl::char_symbols(std::string_view word, std::vector<int32_t>& sym) const {
  sym.reserve(word.size());
  bool prev_unk = false;
  size_t i = 0;
  while (i < word.size()) {
    size_t b = i;
    char32_t c = utf8::next(word, i);
    auto it = char_id.find(c);
    if (it != char_id.end()) {
      sym.push_back(it->second);
      prev_unk = false;
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (size_t k = b; k < i; ++k)
        all = all && fallback_id[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        for (size_t k = b; k < i; ++k)
          sym.push_back(fallback_id[static_cast<unsigned char>(word[k])]);
        prev_unk = false;
        continue;
      }
    }
    // Neither in the vocab nor bytes: the unknown token (one per run with fuse_unk); without an
    // unknown token the character is dropped, as Hugging Face tokenizers does.
    if (unk && !(fuse_unk && prev_unk)) sym.push_back(*unk);
    prev_unk = unk.has_value();
  }
}

bool TokenizerImpl::strip_decoded(std::string& text, size_t* left) const {
  const std::string& c = strip_content;
  while (*left > 0 && !text.empty()) {
    if (text.size() >= c.size() && text.compare(0, c.size(), c) == 0) {
      text.erase(0, c.size());
      --*left;
    } else if (text.size() < c.size() && c.compare(0, text.size(), text) == 0) {
      return false;
    } else {
      *left = 0;
    }
  }
  return true;
}

}  // namespace vkllm
