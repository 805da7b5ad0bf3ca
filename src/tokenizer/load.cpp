// Loading tokenizer.json / tokenizer_config.json into TokenizerImpl. Everything read is validated;
// unsupported components are refused with one clear line (never silently tokenized differently).
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_int.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace vkllm {

using nlohmann::json;

// ---- Regex -------------------------------------------------------------------------------------

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: pre-tokenizer regex does not compile at offset {}: {}", where, off,
         reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when unavailable
}

Regex::~Regex() {
  pcre2_code_free(code_);
}

namespace {
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
    pcre2_match_data_free(data);
  }
};
}  // namespace

bool Regex::find(std::string_view subject, size_t from, size_t* begin, size_t* end) const {
  thread_local MatchScratch scratch;
  int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), from,
                       PCRE2_NO_UTF_CHECK, scratch.data, scratch.ctx);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    fail("tokenizer: regex match failed: {}", reinterpret_cast<char*>(msg));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

// ---- AddedTrie ---------------------------------------------------------------------------------

void AddedTrie::insert(std::string_view s, int32_t index) {
  if (s.empty()) return;
  first_[static_cast<unsigned char>(s[0])] = true;
  size_t node = 0;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    int32_t child = -1;
    for (auto& [b, n] : nodes_[node].next)
      if (b == c) child = n;
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = static_cast<size_t>(child);
  }
  if (nodes_[node].token < 0) nodes_[node].token = index;
}

int32_t AddedTrie::longest(std::string_view text, size_t pos, size_t* len) const {
  size_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (auto& [b, n] : nodes_[node].next)
      if (b == c) child = n;
    if (child < 0) break;
    node = static_cast<size_t>(child);
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

// ---- MergeTable --------------------------------------------------------------------------------

void TokenizerImpl::MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

bool TokenizerImpl::MergeTable::insert(int32_t a, int32_t b, Merge m) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Slot& s : old)
      if (s.key != kEmpty)
        insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffu), s.m);
  }
  uint64_t key = pack(a, b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return false;
    if (s.key == kEmpty) {
      s.key = key;
      s.m = m;
      ++size_;
      return true;
    }
  }
}

// ---- tokenizer.json ----------------------------------------------------------------------------

namespace {

constexpr int64_t kMaxVocab =
    1 << 21;  // ids beyond this are refused (largest real vocabularies: ~262k)

const json& need(const json& j, const char* key, const std::string& where, const char* ctx) {
  if (!j.is_object() || !j.contains(key)) fail("{}: {} has no \"{}\"", where, ctx, key);
  return j.at(key);
}

bool flag(const json& j, const char* key, bool def = false) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  if (!j.at(key).is_boolean())
    throw json::type_error::create(302, std::string(key) + " must be a boolean", &j);
  return j.at(key).get<bool>();
}

std::string raw_bytes_of(const std::string& spelling) {
  // Byte-level spelling -> bytes; a token with a character outside the byte alphabet stands for its
  // own UTF-8 text (as the Hugging Face ByteLevel decoder does).
  std::string out;
  out.reserve(spelling.size());
  size_t i = 0;
  while (i < spelling.size()) {
    char32_t c = utf8::next(spelling, i);
    int b = utf8::char_to_byte(c);
    if (b < 0) return spelling;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

void load_normalizer(TokenizerImpl& t, const json& n) {
  if (n.is_null()) return;
  std::string type = need(n, "type", t.where, "normalizer").get<std::string>();
  if (type == "Sequence") {
    for (const auto& s : need(n, "normalizers", t.where, "normalizer Sequence"))
      load_normalizer(t, s);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    NormalizerStep st;
    st.form = type == "NFC"    ? Normalization::NFC
              : type == "NFD"  ? Normalization::NFD
              : type == "NFKC" ? Normalization::NFKC
                               : Normalization::NFKD;
    t.normalizers.push_back(st);
  } else if (!load_spm_normalizer(t, n, type)) {
    fail("{}: unsupported normalizer type \"{}\"", t.where, type);
  }
}

// The GPT-2 pattern ByteLevel uses when use_regex is true.
const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string quote_literal(const std::string& s) {
  std::string out = "\\Q";
  size_t pos = 0, e;
  while ((e = s.find("\\E", pos)) != std::string::npos) {
    out += s.substr(pos, e - pos) + "\\E\\\\E\\Q";
    pos = e + 2;
  }
  return out + s.substr(pos) + "\\E";
}

void load_pre_tokenizer(TokenizerImpl& t, const json& p, bool* byte_level) {
  if (p.is_null()) return;
  std::string type = need(p, "type", t.where, "pre_tokenizer").get<std::string>();
  if (type == "Sequence") {
    for (const auto& s : need(p, "pretokenizers", t.where, "pre_tokenizer Sequence"))
      load_pre_tokenizer(t, s, byte_level);
  } else if (type == "Split") {
    if (*byte_level) fail("{}: unsupported pre_tokenizer: Split after ByteLevel", t.where);
    const json& pat = need(p, "pattern", t.where, "Split pre_tokenizer");
    PreTokenizerStep st;
    if (pat.contains("Regex")) {
      st.regex = std::make_shared<Regex>(pat.at("Regex").get<std::string>(), t.where);
    } else if (pat.contains("String")) {
      st.regex =
          std::make_shared<Regex>(quote_literal(pat.at("String").get<std::string>()), t.where);
    } else {
      fail("{}: Split pre_tokenizer pattern needs \"Regex\" or \"String\"", t.where);
    }
    std::string b = need(p, "behavior", t.where, "Split pre_tokenizer").get<std::string>();
    if (b == "Isolated")
      st.behavior = SplitBehavior::Isolated;
    else if (b == "Removed")
      st.behavior = SplitBehavior::Removed;
    else if (b == "MergedWithPrevious")
      st.behavior = SplitBehavior::MergedWithPrevious;
    else if (b == "MergedWithNext")
      st.behavior = SplitBehavior::MergedWithNext;
    else if (b == "Contiguous")
      st.behavior = SplitBehavior::Contiguous;
    else
      fail("{}: unknown Split behavior \"{}\"", t.where, b);
    st.invert = flag(p, "invert");
    t.pre_tokenizers.push_back(std::move(st));
  } else if (type == "Metaspace") {
    if (t.byte_level) fail("{}: unsupported pre_tokenizer: Metaspace with ByteLevel", t.where);
    load_metaspace(t, p);
  } else if (type == "ByteLevel") {
    if (flag(p, "add_prefix_space"))
      fail("{}: unsupported pre_tokenizer: ByteLevel with add_prefix_space=true", t.where);
    if (flag(p, "use_regex", true)) {
      PreTokenizerStep st;
      st.regex = std::make_shared<Regex>(kGpt2Pattern, t.where);
      t.pre_tokenizers.push_back(std::move(st));
    }
    *byte_level = true;
  } else {
    fail("{}: unsupported pre_tokenizer type \"{}\"", t.where, type);
  }
}

void load_post_processor(TokenizerImpl& t, const json& p) {
  if (p.is_null()) return;
  std::string type = need(p, "type", t.where, "post_processor").get<std::string>();
  if (type == "Sequence") {
    for (const auto& s : need(p, "processors", t.where, "post_processor Sequence"))
      load_post_processor(t, s);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const json& specials = need(p, "special_tokens", t.where, "TemplateProcessing");
    bool seen_a = false;
    for (const auto& piece : need(p, "single", t.where, "TemplateProcessing")) {
      if (piece.contains("Sequence")) {
        if (piece.at("Sequence").at("id").get<std::string>() != "A")
          fail("{}: TemplateProcessing single template must use sequence A", t.where);
        seen_a = true;
      } else if (piece.contains("SpecialToken")) {
        std::string name = piece.at("SpecialToken").at("id").get<std::string>();
        if (!specials.contains(name))
          fail("{}: TemplateProcessing special token \"{}\" is not defined", t.where, name);
        for (const auto& id :
             need(specials.at(name), "ids", t.where, "TemplateProcessing special token")) {
          const int64_t v = json_int<int64_t>(id, t.where + ": TemplateProcessing id");
          if (v < 0 || v >= static_cast<int64_t>(t.id_token.size()))
            fail("{}: TemplateProcessing special token \"{}\" has id {} outside the vocabulary",
                 t.where, name, v);
          (seen_a ? t.post_suffix : t.post_prefix).push_back(static_cast<int32_t>(v));
        }
      } else {
        fail("{}: TemplateProcessing piece must be Sequence or SpecialToken", t.where);
      }
    }
  } else {
    fail("{}: unsupported post_processor type \"{}\"", t.where, type);
  }
}

// Whether the pre-tokenizer (or a Sequence in it) has a ByteLevel step: then BPE runs over bytes.
bool has_byte_level(const json& p) {
  if (!p.is_object() || !p.contains("type") || !p.at("type").is_string()) return false;
  if (p.at("type") == "ByteLevel") return true;
  if (p.at("type") == "Sequence" && p.contains("pretokenizers") && p.at("pretokenizers").is_array())
    for (const auto& s : p.at("pretokenizers"))
      if (has_byte_level(s)) return true;
  return false;
}

void check_decoder(TokenizerImpl& t, const json& d) {
  if (d.is_null()) fail("{}: no decoder (a ByteLevel decoder is required)", t.where);
  std::string type = need(d, "type", t.where, "decoder").get<std::string>();
  if (type == "Sequence") {
    for (const auto& s : need(d, "decoders", t.where, "decoder Sequence")) check_decoder(t, s);
  } else if (type != "ByteLevel") {
    fail("{}: unsupported decoder type \"{}\"", t.where, type);
  }
}

// tokenizer.json's DOM, built by a SAX pass that keeps model.vocab's entries and model.merges'
// elements out of it: a vocabulary's object of ~100k keys is most of a DOM parse's time (a map
// node a key, and as long again to free). They go to two vectors, and the DOM holds an empty object
// and an empty array in their place. The vocab's entries come sorted by key, the last of equal
// keys kept, as the DOM's object would hold them; a repeated "vocab" or "merges" key, or "model"
// key, keeps the last, as the DOM does.
class TokenizerDom {
 public:
  json root;
  std::vector<std::pair<std::string, json>> vocab;
  std::vector<json> merges;
  std::string error;  // a parse error's message

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return put(json(v)); }
  bool string(std::string& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json(std::move(v))); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

  // The vocab in the DOM object's order: by key, the last of equal keys.
  void sort_vocab() {
    std::stable_sort(vocab.begin(), vocab.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t out = 0;
    for (size_t i = 0; i < vocab.size(); ++i)
      if (i + 1 == vocab.size() || vocab[i + 1].first != vocab[i].first) {
        if (out != i) vocab[out] = std::move(vocab[i]);
        ++out;
      }
    vocab.resize(out);
  }

 private:
  enum class Kind { Plain, Model, Vocab, Merges };
  struct Frame {
    json value;
    Kind kind;
    std::string key;  // its key in the parent object
  };
  std::vector<Frame> stack_;
  std::string key_;

  bool open(bool object) {
    Kind kind = Kind::Plain;
    if (!stack_.empty() && stack_.back().value.is_object()) {
      const Kind parent = stack_.back().kind;
      if (stack_.size() == 1 && parent == Kind::Plain && object && key_ == "model")
        kind = Kind::Model;
      else if (parent == Kind::Model && object && key_ == "vocab")
        kind = Kind::Vocab;
      else if (parent == Kind::Model && !object && key_ == "merges")
        kind = Kind::Merges;
    }
    if (kind == Kind::Vocab) vocab.clear();
    if (kind == Kind::Merges) merges.clear();
    stack_.push_back({json(object ? json::value_t::object : json::value_t::array), kind, key_});
    return true;
  }
  bool close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    key_ = std::move(f.key);
    return put(std::move(f.value));
  }
  bool put(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return true;
    }
    Frame& top = stack_.back();
    if (top.kind == Kind::Vocab)
      vocab.emplace_back(key_, std::move(v));
    else if (top.kind == Kind::Merges)
      merges.push_back(std::move(v));
    else if (top.value.is_object())
      top.value[key_] = std::move(v);
    else
      top.value.push_back(std::move(v));
    return true;
  }
};

void set_id(TokenizerImpl& t, int64_t id, const std::string& spelling, std::string bytes) {
  auto i = static_cast<size_t>(id);
  if (t.id_token.size() <= i) {
    t.id_token.resize(i + 1);
    t.id_bytes.resize(i + 1);
    t.id_special.resize(i + 1, 0);
  }
  t.id_token[i] = spelling;
  t.id_bytes[i] = std::move(bytes);
}

// A merge's token ids (a, b and the merged a + b), or why it has none.
struct MergeIds {
  enum Status : uint8_t { kOk, kMalformed, kSpaces, kMissing };
  int32_t a = -1, b = -1, c = -1;
  Status status = kOk;
};

// The merges' ids, looked up on several threads where there are many: three hash lookups a merge,
// mostly cache misses (Llama-3's 280,000 merges took ~150 ms of its 0.4 s load on one thread).
std::vector<MergeIds> resolve_merges(const StringIds& ids, const std::vector<json>& merges) {
  std::vector<MergeIds> out(merges.size());
  auto resolve = [&](size_t from, size_t to) {
    std::string ab;
    for (size_t i = from; i < to; ++i) {
      const json& mg = merges[i];
      MergeIds& r = out[i];
      std::string_view a, b;
      if (mg.is_string()) {
        const std::string& s = mg.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          r.status = MergeIds::kSpaces;
          continue;
        }
        a = std::string_view(s).substr(0, sp);
        b = std::string_view(s).substr(sp + 1);
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        a = mg[0].get_ref<const std::string&>();
        b = mg[1].get_ref<const std::string&>();
      } else {
        r.status = MergeIds::kMalformed;
        continue;
      }
      ab.assign(a);
      ab.append(b);
      const auto ia = ids.find(a), ib = ids.find(b), ic = ids.find(std::string_view(ab));
      if (ia == ids.end() || ib == ids.end() || ic == ids.end()) {
        r.status = MergeIds::kMissing;
        continue;
      }
      r.a = ia->second;
      r.b = ib->second;
      r.c = ic->second;
    }
  };
  constexpr size_t kPerThread = 32768;
  const size_t threads = std::min<size_t>(
      {std::max(1u, std::thread::hardware_concurrency()), 8, merges.size() / kPerThread + 1});
  std::vector<std::thread> pool;
  const size_t chunk = (merges.size() + threads - 1) / threads;
  for (size_t k = 1; k < threads; ++k)
    pool.emplace_back(resolve, std::min(merges.size(), k * chunk),
                      std::min(merges.size(), (k + 1) * chunk));
  resolve(0, std::min(merges.size(), chunk));
  for (std::thread& th : pool) th.join();
  return out;
}

// The DOM's vocab entries as ModelLists::vocab, their ids range-checked.
std::vector<std::pair<std::string, int32_t>> vocab_list(TokenizerImpl& t, TokenizerDom& dom) {
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(dom.vocab.size());
  const std::string what_id = t.where + ": model.vocab id";
  for (auto& [key, value] : dom.vocab) {
    const int64_t id = json_int<int64_t>(value, what_id);
    if (id < 0 || id >= kMaxVocab)
      fail("{}: vocab entry {} has id {} out of range", t.where, json(key).dump(), id);
    vocab.emplace_back(std::move(key), static_cast<int32_t>(id));
  }
  return vocab;
}

// tokenizer.json's merges as ModelLists::merges, through t.token_to_id.
std::vector<std::array<int32_t, 3>> merge_list(const TokenizerImpl& t,
                                               const std::vector<json>& merges) {
  const std::vector<MergeIds> ids = resolve_merges(t.token_to_id, merges);
  std::vector<std::array<int32_t, 3>> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const MergeIds& mi = ids[i];
    if (mi.status == MergeIds::kMalformed)
      fail("{}: merge {} must be \"a b\" or [a, b]", t.where, merges[i].dump());
    if (mi.status == MergeIds::kSpaces)
      fail("{}: merge {} must be two tokens separated by one space", t.where, merges[i].dump());
    if (mi.status == MergeIds::kMissing)
      fail("{}: merge {} uses a token missing from the vocab", t.where, merges[i].dump());
    out.push_back({mi.a, mi.b, mi.c});
  }
  return out;
}

// m: the model object (its vocab and merges are in `lists`, not in m; merges still as
// tokenizer.json spells them where json_merges is given: resolved into lists.merges here).
void load_model(TokenizerImpl& t, const json& m, ModelLists& lists,
                const std::vector<json>* json_merges) {
  if (!m.is_object()) fail("{}: \"model\" must be an object", t.where);
  if (m.contains("type") && m.at("type") != "BPE")
    fail("{}: unsupported model type {} (only BPE)", t.where, m.at("type").dump());
  t.byte_fallback = flag(m, "byte_fallback");
  if (t.byte_fallback && t.byte_level)
    fail("{}: unsupported BPE option byte_fallback=true with a ByteLevel pre_tokenizer", t.where);
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m.at(k).is_string() && !m.at(k).get<std::string>().empty())
      fail("{}: unsupported BPE option {}", t.where, k);
  if (m.contains("dropout") && m.at("dropout").is_number() && m.at("dropout").get<double>() != 0.0)
    fail("{}: BPE dropout is not supported", t.where);
  t.ignore_merges = flag(m, "ignore_merges");

  if (!need(m, "vocab", t.where, "model").is_object() || lists.vocab.empty())
    fail("{}: model.vocab must be a non-empty object", t.where);
  t.bytes_to_id.reserve(lists.vocab.size());
  t.token_to_id.reserve(lists.vocab.size() + 1024);
  for (const auto& [key, id] : lists.vocab) {
    if (id < 0 || id >= kMaxVocab)
      fail("{}: vocab entry {} has id {} out of range", t.where, json(key).dump(), id);
    std::string bytes = t.byte_level ? raw_bytes_of(key) : key;
    t.bytes_to_id.emplace(bytes, id);
    t.token_to_id[key] = id;
    set_id(t, id, key, std::move(bytes));
  }
  for (int b = 0; b < 256 && t.byte_level; ++b) {
    auto it = t.bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == t.bytes_to_id.end())
      fail("{}: model.vocab lacks the byte-level token for byte 0x{:02x}", t.where, b);
    t.byte_id[static_cast<size_t>(b)] = it->second;
  }

  if (!need(m, "merges", t.where, "model").is_array())
    fail("{}: model.merges must be an array", t.where);
  if (json_merges) lists.merges = merge_list(t, *json_merges);
  const auto vocab_end = static_cast<int32_t>(t.id_token.size());
  t.merges.reserve(lists.merges.size());
  for (size_t i = 0; i < lists.merges.size(); ++i) {
    const auto& [a, b, c] = lists.merges[i];
    if (std::min({a, b, c}) < 0 || std::max({a, b, c}) >= vocab_end)
      fail("{}: merge {} has a token id outside the vocab", t.where, i);
    // (first, lowest rank, wins)
    t.merges.insert(a, b, TokenizerImpl::Merge{static_cast<int32_t>(i), c});
  }
}

void load_added(TokenizerImpl& t, const json& added) {
  if (added.is_null()) return;
  if (!added.is_array()) fail("{}: added_tokens must be an array", t.where);
  for (const auto& a : added) {
    AddedToken tok;
    const int64_t id =
        json_int<int64_t>(need(a, "id", t.where, "added token"), t.where + ": added token id");
    if (id < 0 || id >= kMaxVocab) fail("{}: added token id {} out of range", t.where, id);
    tok.id = static_cast<int32_t>(id);
    tok.content = need(a, "content", t.where, "added token").get<std::string>();
    if (tok.content.empty()) fail("{}: added token {} has empty content", t.where, id);
    if (!utf8::is_valid(tok.content)) fail("{}: added token {} is not valid UTF-8", t.where, id);
    tok.special = flag(a, "special");
    tok.lstrip = flag(a, "lstrip");
    tok.rstrip = flag(a, "rstrip");
    tok.normalized = flag(a, "normalized", !tok.special);
    tok.single_word = flag(a, "single_word");
    set_id(t, id, tok.content, tok.content);
    t.id_special[static_cast<size_t>(id)] = tok.special ? 1 : 0;
    t.token_to_id[tok.content] = tok.id;
    auto index = static_cast<int32_t>(t.added.size());
    (tok.normalized ? t.added_normalized : t.added_raw).insert(tok.content, index);
    t.added.push_back(std::move(tok));
  }
}

}  // namespace

namespace {

// tokenizer.json's root (its model's vocab and merges in `lists`) into t.
void load_parsed(TokenizerImpl& t, const json& j, ModelLists& lists,
                 const std::vector<json>* json_merges) {
  try {
    if (!j.is_object()) fail("{}: tokenizer.json must be a JSON object", t.where);
    // A ByteLevel pre-tokenizer makes BPE run over bytes; without one (SentencePiece style) it
    // runs over characters.
    t.byte_level = j.contains("pre_tokenizer") && has_byte_level(j.at("pre_tokenizer"));
    const json& model = need(j, "model", t.where, "tokenizer.json");
    load_model(t, model, lists, json_merges);
    if (j.contains("added_tokens")) load_added(t, j.at("added_tokens"));
    if (j.contains("normalizer")) load_normalizer(t, j.at("normalizer"));
    bool byte_level = false;
    if (j.contains("pre_tokenizer")) load_pre_tokenizer(t, j.at("pre_tokenizer"), &byte_level);
    if (j.contains("post_processor")) load_post_processor(t, j.at("post_processor"));
    const json& decoder = j.contains("decoder") ? j.at("decoder") : json();
    if (t.byte_level) {
      check_decoder(t, decoder);
    } else {
      load_spm_decoder(t, decoder);
      finish_char_model(t, model);
    }
  } catch (const json::exception& e) {
    fail("{}: malformed tokenizer.json ({})", t.where, e.what());
  }
}

}  // namespace

void load_tokenizer_json(TokenizerImpl& t, const std::string& text, std::string* rest,
                         ModelLists* lists_out) {
  TokenizerDom dom;
  if (!json::sax_parse(text, &dom)) fail("{}: not valid JSON ({})", t.where, dom.error);
  dom.sort_vocab();
  ModelLists lists;
  lists.vocab = vocab_list(t, dom);
  load_parsed(t, dom.root, lists, &dom.merges);
  if (rest) *rest = dom.root.dump();
  if (lists_out) *lists_out = std::move(lists);
}

void load_tokenizer_parts(TokenizerImpl& t, const std::string& rest, ModelLists lists) {
  json j;
  try {
    j = json::parse(rest);
  } catch (const json::exception& e) {
    fail("{}: malformed tokenizer.json ({})", t.where, e.what());
  }
  load_parsed(t, j, lists, nullptr);
}

void load_tokenizer_config(TokenizerImpl& t, const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: tokenizer_config.json is not valid JSON ({})", t.where, e.what());
  }
  if (!j.is_object()) fail("{}: tokenizer_config.json must be a JSON object", t.where);
  auto special = [&](const char* key) -> std::optional<int32_t> {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    const json& v = j.at(key);
    std::string name;
    if (v.is_string())
      name = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v.at("content").is_string())
      name = v.at("content").get<std::string>();
    else
      fail("{}: tokenizer_config.json {} must be a string or {{\"content\": ...}}", t.where, key);
    auto it = t.token_to_id.find(name);
    if (it == t.token_to_id.end())
      fail("{}: tokenizer_config.json {} \"{}\" is not a token", t.where, key, name);
    return it->second;
  };
  t.bos = special("bos_token");
  t.eos = special("eos_token");
}

// ---- Tokenizer ---------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_text(const std::string& tokenizer_json,
                               const std::string& tokenizer_config_json, const std::string& where) {
  auto impl = std::make_unique<TokenizerImpl>();
  impl->where = where;
  load_tokenizer_json(*impl, tokenizer_json);
  if (!tokenizer_config_json.empty()) load_tokenizer_config(*impl, tokenizer_config_json);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_files(const std::string& tokenizer_json,
                                const std::string& tokenizer_config_json) {
  std::string tj = read_text_file(tokenizer_json);
  std::string tc =
      tokenizer_config_json.empty() ? std::string() : read_text_file(tokenizer_config_json);
  return from_text(tj, tc, tokenizer_json);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  std::string cfg = dir + "/tokenizer_config.json";
  FILE* f = std::fopen(cfg.c_str(), "rb");
  if (f) std::fclose(f);
  return from_files(dir + "/tokenizer.json", f ? cfg : std::string());
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_token.size());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail("{}: token id {} out of range [0, {})", impl_->where, id, vocab_size());
  return impl_->id_token[static_cast<size_t>(id)];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail("{}: token id {} out of range [0, {})", impl_->where, id, vocab_size());
  return impl_->id_bytes[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->id_special[static_cast<size_t>(id)] != 0;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}

}  // namespace vkllm
