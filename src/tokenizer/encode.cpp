// Encoding (added tokens, normalizer, pre-tokenizers, BPE) and decoding.
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace vkllm {
namespace {

constexpr size_t kCacheMaxWord = 256;  // words longer than this are not cached
constexpr size_t kCacheMaxEntries = 1 << 18;

struct Piece {
  size_t begin, end;
};

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Code point ending right before byte `pos` (text valid UTF-8), and its start.
char32_t prev_char(std::string_view text, size_t pos, size_t* start) {
  size_t s = pos - 1;
  while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
  *start = s;
  size_t i = s;
  return utf8::next(text, i);
}

std::string normalize(std::string_view s, const std::vector<NormalizerStep>& steps) {
  std::string cur(s);
  for (const NormalizerStep& st : steps) {
    if (st.kind != NormalizerStep::Kind::Unicode) {
      cur = apply_normalizer(cur, st);
      continue;
    }
    int opts = UTF8PROC_STABLE;
    switch (st.form) {
      case Normalization::NFC:
        opts |= UTF8PROC_COMPOSE;
        break;
      case Normalization::NFD:
        opts |= UTF8PROC_DECOMPOSE;
        break;
      case Normalization::NFKC:
        opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case Normalization::NFKD:
        opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n_out = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                                          static_cast<utf8proc_ssize_t>(cur.size()), &out,
                                          static_cast<utf8proc_option_t>(opts));
    if (n_out < 0) fail("tokenizer: normalization failed: {}", utf8proc_errmsg(n_out));
    cur.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n_out));
    std::free(out);
  }
  return cur;
}

// Splits text on added tokens (leftmost-longest), honouring lstrip/rstrip/single_word. Calls
// emit(begin, end, added_index) for text pieces (added_index -1) and matched tokens, in order.
template <typename Emit>
void split_added(std::string_view text, const AddedTrie& trie, const std::vector<AddedToken>& added,
                 Emit&& emit) {
  size_t seg = 0, i = 0, n = text.size();
  while (i < n) {
    if (!trie.may_start(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t len = 0;
    int32_t k = trie.longest(text, i, &len);
    if (k < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = added[static_cast<size_t>(k)];
    size_t b = i, e = i + len;
    if (tok.single_word) {
      size_t ps = 0;
      bool ok = (b == 0 || !is_word_char(prev_char(text, b, &ps)));
      size_t j = e;
      if (ok && e < n) ok = !is_word_char(utf8::next(text, j));
      if (!ok) {
        ++i;
        continue;
      }
    }
    if (tok.lstrip) {
      size_t ps = 0;
      while (b > seg && utf8::is_whitespace(prev_char(text, b, &ps))) b = ps;
    }
    if (tok.rstrip) {
      while (e < n) {
        size_t j = e;
        if (!utf8::is_whitespace(utf8::next(text, j))) break;
        e = j;
      }
    }
    if (b > seg) emit(seg, b, -1);
    emit(b, e, k);
    seg = i = e;
  }
  if (seg < n) emit(seg, n, -1);
}

void apply_split(std::string_view s, const PreTokenizerStep& st, const std::vector<Piece>& in,
                 std::vector<Piece>& out) {
  out.clear();
  std::vector<std::pair<Piece, bool>> parts;  // (range, is_match) after invert
  for (const Piece& p : in) {
    std::string_view sub = s.substr(p.begin, p.end - p.begin);
    parts.clear();
    size_t pos = 0, mb = 0, me = 0;
    while (pos < sub.size() && st.regex->find(sub, pos, &mb, &me)) {
      if (me == mb) {  // empty match: step over one character
        size_t j = mb;
        if (j >= sub.size()) break;
        utf8::next(sub, j);
        pos = j;
        continue;
      }
      if (mb > pos) parts.push_back({{p.begin + pos, p.begin + mb}, st.invert});
      parts.push_back({{p.begin + mb, p.begin + me}, !st.invert});
      pos = me;
    }
    if (pos < sub.size()) parts.push_back({{p.begin + pos, p.end}, st.invert});

    // As Hugging Face tokenizers: a delimiter joins the neighbouring piece only when that piece is
    // not a delimiter itself ("a--b" merged with previous: "a-", "-", "b").
    size_t first_out = out.size();
    for (size_t k = 0; k < parts.size(); ++k) {
      auto [r, match] = parts[k];
      switch (st.behavior) {
        case SplitBehavior::Isolated:
          out.push_back(r);
          break;
        case SplitBehavior::Removed:
          if (!match) out.push_back(r);
          break;
        case SplitBehavior::MergedWithPrevious:
          if (match && out.size() > first_out && !parts[k - 1].second)
            out.back().end = r.end;
          else
            out.push_back(r);
          break;
        case SplitBehavior::MergedWithNext:
          if (!match && k > 0 && parts[k - 1].second)
            out.back().end = r.end;
          else
            out.push_back(r);
          break;
        case SplitBehavior::Contiguous:
          if (match && k > 0 && parts[k - 1].second)
            out.back().end = r.end;
          else
            out.push_back(r);
          break;
      }
    }
  }
}

}  // namespace

void TokenizerImpl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  split_added(text, added_raw, added, [&](size_t b, size_t e, int32_t k) {
    if (k >= 0) {
      out.push_back(added[static_cast<size_t>(k)].id);
      return;
    }
    std::string_view seg = text.substr(b, e - b);
    if (normalizers.empty() && added_normalized.empty()) {
      encode_segment(seg, b == 0, out);
      return;
    }
    std::string norm = normalize(seg, normalizers);
    split_added(norm, added_normalized, added, [&](size_t b2, size_t e2, int32_t k2) {
      if (k2 >= 0)
        out.push_back(added[static_cast<size_t>(k2)].id);
      else
        encode_segment(std::string_view(norm).substr(b2, e2 - b2), b == 0 && b2 == 0, out);
    });
  });
}

void TokenizerImpl::encode_segment(std::string_view text, bool at_start,
                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string replaced;
  if (metaspace) {
    replaced = apply_metaspace(text, *metaspace, at_start);
    text = replaced;
  }
  std::vector<Piece> pieces{{0, text.size()}}, next;
  for (const auto& st : pre_tokenizers) {
    apply_split(text, st, pieces, next);
    pieces.swap(next);
  }
  for (const Piece& p : pieces)
    if (p.end > p.begin) bpe(text.substr(p.begin, p.end - p.begin), out);
}

void TokenizerImpl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1 && byte_level) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    auto it = bytes_to_id.find(word);
    if (it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWord) {
    bpe_uncached(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t first = out.size();
  bpe_uncached(word, out);
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() >= kCacheMaxEntries) cache.clear();
  cache.emplace(std::move(key),
                std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void TokenizerImpl::bpe_uncached(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> sym;
  if (byte_level) {
    sym.reserve(word.size());
    for (char c : word) sym.push_back(byte_id[static_cast<unsigned char>(c)]);
  } else {
    char_symbols(word, sym);
  }
  merge_symbols(sym, out);
}

// Byte-pair merging over a linked list of symbols with a heap of candidate pairs ordered by
// (rank, position): O(n log n) in the word length.
void TokenizerImpl::merge_symbols(const std::vector<int32_t>& ids,
                                  std::vector<int32_t>& out) const {
  // Symbols form a linked list. Heap entries pack (rank << 32 | position) in one integer: the
  // smallest is the lowest-rank, leftmost pair. Stale entries (a side already merged) are detected
  // at pop time by looking the pair up again.
  struct Sym {
    int32_t id, prev, next;
  };
  const auto n = static_cast<int32_t>(ids.size());
  if (n == 0) return;
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    sym[static_cast<size_t>(i)] = {ids[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  auto key = [](int32_t rank, int32_t pos) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos);
  };
  std::vector<uint64_t> heap;
  heap.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m =
            merges.find(sym[static_cast<size_t>(i)].id, sym[static_cast<size_t>(i) + 1].id))
      heap.push_back(key(m->rank, i));
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  auto push_pair = [&](int32_t a) {
    if (a < 0) return;
    int32_t b = sym[static_cast<size_t>(a)].next;
    if (b < 0) return;
    if (const Merge* m =
            merges.find(sym[static_cast<size_t>(a)].id, sym[static_cast<size_t>(b)].id)) {
      heap.push_back(key(m->rank, a));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    uint64_t top = heap.back();
    heap.pop_back();
    auto pos = static_cast<int32_t>(top & 0xffffffffu);
    auto rank = static_cast<int32_t>(top >> 32);
    Sym& a = sym[static_cast<size_t>(pos)];
    if (a.id < 0 || a.next < 0) continue;  // merged away, or now last
    Sym& b = sym[static_cast<size_t>(a.next)];
    const Merge* m = merges.find(a.id, b.id);
    if (!m || m->rank != rank) continue;  // stale: the pair at pos changed
    a.id = m->id;
    b.id = -1;
    a.next = b.next;
    if (b.next >= 0) sym[static_cast<size_t>(b.next)].prev = pos;
    push_pair(a.prev);
    push_pair(pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next)
    out.push_back(sym[static_cast<size_t>(i)].id);
}

// ---- Tokenizer::encode / decode ----------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) out.insert(out.end(), impl_->post_prefix.begin(), impl_->post_prefix.end());
  if (utf8::is_valid(text)) {
    impl_->encode_text(text, out);
  } else {
    impl_->encode_text(utf8::lossy(text), out);
  }
  if (add_special) out.insert(out.end(), impl_->post_suffix.begin(), impl_->post_suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if ((skip_special && is_special(id)) || id >= vocab_size()) continue;  // see tokenizer.h
    bytes += token_bytes(id);
  }
  size_t left = impl_->strip_start;
  impl_->strip_decoded(bytes, &left);
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::lossy(bytes);
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special)
    : tok_(&tok), skip_special_(skip_special), strip_left_(tok.impl_->strip_start) {}

std::string StreamDecoder::push(int32_t id) {
  if ((skip_special_ && tok_->is_special(id)) || id >= tok_->vocab_size()) return {};
  pending_ += tok_->token_bytes(id);
  if (strip_left_ > 0 && !tok_->impl_->strip_decoded(pending_, &strip_left_)) return {};
  std::string out;
  size_t used = utf8::append_lossy(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace vkllm
