// Internal state of a loaded tokenizer (shared by the loader, the encoder and the decoder).
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vkllm {

// A compiled PCRE2 pattern (UTF + UCP, JIT when available).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Finds the next match in subject[from..); returns false when none. subject is valid UTF-8.
  bool find(std::string_view subject, size_t from, size_t* begin, size_t* end) const;

 private:
  pcre2_code* code_ = nullptr;
};

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };
enum class Normalization { NFC, NFD, NFKC, NFKD };

// One normalizer step: a Unicode normalization form, Replace (literal pattern -> content), or
// Prepend (content before a non-empty text).
struct NormalizerStep {
  enum class Kind { Unicode, Replace, Prepend } kind = Kind::Unicode;
  Normalization form = Normalization::NFC;
  std::string pattern, content;
};

// The Metaspace pre-tokenizer: spaces become `replacement`, which is prepended per `scheme`
// (First: only to a segment starting at the beginning of the input); `split` cuts before each
// replacement character (behavior MergedWithNext).
struct MetaspaceStep {
  enum class Scheme { Always, First, Never } scheme = Scheme::Always;
  std::string replacement;
  bool split = true;
};

struct PreTokenizerStep {
  std::shared_ptr<Regex> regex;  // Split pattern, or the GPT-2 pattern for ByteLevel(use_regex)
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
};

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Byte trie over the added tokens' contents (leftmost-longest matching).
class AddedTrie {
 public:
  void insert(std::string_view s, int32_t index);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest token starting at text[pos]: returns its index and sets *len, or -1.
  int32_t longest(std::string_view text, size_t pos, size_t* len) const;
  bool may_start(unsigned char b) const { return first_[b]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t token = -1;
  };
  std::vector<Node> nodes_{1};
  std::array<bool, 256> first_{};
};

// Hash of a string's bytes that also takes string_views, so lookups need not allocate a key.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenizerImpl {
  std::string where;
  std::vector<NormalizerStep> normalizers;
  std::optional<MetaspaceStep> metaspace;  // runs before pre_tokenizers
  std::vector<PreTokenizerStep> pre_tokenizers;

  // byte_level (a ByteLevel pre-tokenizer): BPE over raw bytes, bytes_to_id keyed by the decoded
  // byte-level spelling. Otherwise (SentencePiece style) BPE over characters: bytes_to_id keyed by
  // the spelling itself, characters missing from the vocab become <0xNN> tokens (byte_fallback) or
  // the unknown token (runs of them fused into one with fuse_unk), or are dropped without either.
  bool byte_level = true;
  StringIds bytes_to_id;
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<char32_t, int32_t> char_id;  // single-character vocab entries (char mode)
  bool byte_fallback = false;
  std::array<int32_t, 256> fallback_id{};  // <0xNN> token ids, -1 where absent
  std::optional<int32_t> unk;
  bool fuse_unk = false;

  // Decoding (char mode): per-token text is the spelling with dec_replace applied, or the byte of a
  // <0xNN> token (dec_byte_fallback); then up to strip_start leading copies of strip_content are
  // removed from the decoded text (a Strip decoder after Fuse).
  std::vector<std::pair<std::string, std::string>> dec_replace;
  bool dec_byte_fallback = false;
  size_t strip_start = 0;
  std::string strip_content;
  struct Merge {
    int32_t rank, id;
  };
  // Open-addressing table (pair of ids -> merge), faster than std::unordered_map on the hot path.
  class MergeTable {
   public:
    void reserve(size_t n);
    bool insert(int32_t a, int32_t b, Merge m);  // false if the pair is present (first one wins)
    const Merge* find(int32_t a, int32_t b) const {
      uint64_t key = pack(a, b);
      for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s.m;
        if (s.key == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~0ull;
    static uint64_t pack(int32_t a, int32_t b) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    static size_t hash(uint64_t k) {
      return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20);
    }
    struct Slot {
      uint64_t key = kEmpty;
      Merge m{};
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0, size_ = 0;
  };
  MergeTable merges;
  bool ignore_merges = false;

  std::vector<std::string> id_token;  // spelling in tokenizer.json
  std::vector<std::string> id_bytes;  // raw bytes for decoding
  std::vector<uint8_t> id_special;
  StringIds token_to_id;
  std::vector<AddedToken> added;
  AddedTrie added_raw, added_normalized;  // tokens with normalized=false / true

  std::vector<int32_t> post_prefix, post_suffix;  // TemplateProcessing "single"
  std::optional<int32_t> bos, eos;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;  // valid UTF-8
  // Removes the leading strip_content copies a Strip decoder drops; *left counts how many may still
  // go. Returns false when `text` is a strict prefix of strip_content (more bytes are needed).
  bool strip_decoded(std::string& text, size_t* left) const;

 private:
  // No added tokens in text; at_start: the segment begins at the start of the input.
  void encode_segment(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
  // Char mode: the initial BPE symbols of a word (vocab characters, byte fallback, unknown).
  void char_symbols(std::string_view word, std::vector<int32_t>& sym) const;
  void merge_symbols(const std::vector<int32_t>& sym, std::vector<int32_t>& out) const;
};

// spm.cpp: the SentencePiece-style components.
std::string apply_normalizer(std::string_view text, const NormalizerStep& step);
std::string apply_metaspace(std::string_view text, const MetaspaceStep& m, bool at_start);
// Normalizer types Replace and Prepend; false for other types.
bool load_spm_normalizer(TokenizerImpl& t, const nlohmann::json& n, const std::string& type);
void load_metaspace(TokenizerImpl& t, const nlohmann::json& p);
// Decoder (char mode): Replace, ByteFallback, Fuse, Strip, alone or in a Sequence.
void load_spm_decoder(TokenizerImpl& t, const nlohmann::json& d);
// Char mode, after the vocab and decoder are read: char_id, fallback_id, unk, id_bytes.
void finish_char_model(TokenizerImpl& t, const nlohmann::json& model);

// A BPE model's vocabulary and merges, as tokenizer.json holds them once parsed.
struct ModelLists {
  std::vector<std::pair<std::string, int32_t>> vocab;  // (spelling, id), by spelling, unique
  std::vector<std::array<int32_t, 3>> merges;          // by rank: the ids of a, b and a + b
};
// Loads tokenizer.json into t. rest (if given): the same JSON without the model's vocab entries
// and merges (an empty object and array there), which lists (if given) receives.
void load_tokenizer_json(TokenizerImpl& t, const std::string& json_text,
                         std::string* rest = nullptr, ModelLists* lists = nullptr);
// The same from those two parts (tokenizer/compiled.cpp): no vocab entry or merge spelled in JSON
// to lex, and no merge to look up by its spellings.
void load_tokenizer_parts(TokenizerImpl& t, const std::string& rest, ModelLists lists);
void load_tokenizer_config(TokenizerImpl& t, const std::string& json_text);

}  // namespace vkllm
