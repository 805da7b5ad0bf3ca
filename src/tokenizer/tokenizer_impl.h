// Internal state of a loaded tokenizer (shared by the loader, the encoder and the decoder).
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
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

struct TokenizerImpl {
  std::string where;
  std::vector<Normalization> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;

  // BPE model over raw bytes (the byte-level spelling of each vocab entry, decoded).
  std::unordered_map<std::string, int32_t> bytes_to_id;
  std::array<int32_t, 256> byte_id{};
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;
  bool ignore_merges = false;

  std::vector<std::string> id_token;  // spelling in tokenizer.json
  std::vector<std::string> id_bytes;  // raw bytes for decoding
  std::vector<uint8_t> id_special;
  std::unordered_map<std::string, int32_t> token_to_id;
  std::vector<AddedToken> added;
  AddedTrie added_raw, added_normalized;  // tokens with normalized=false / true

  std::vector<int32_t> post_prefix, post_suffix;  // TemplateProcessing "single"
  std::optional<int32_t> bos, eos;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;  // valid UTF-8

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;  // no added tokens
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
};

void load_tokenizer_json(TokenizerImpl& t, const std::string& json_text);
void load_tokenizer_config(TokenizerImpl& t, const std::string& json_text);

}  // namespace vkllm
