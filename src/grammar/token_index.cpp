// The vocabulary as the matcher sees it (TokenIndex, grammar.h): the usable ids in byte order with
// their common prefixes (the mask's trie walk), the plain ones by character count, and each id's
// character count where it is plain (the greedy check's shortcut inside strings).
#include <algorithm>

#include "grammar/internal.h"

namespace vkllm::grammar {

namespace {

TokenIndex::Sorted sort_tokens(std::vector<int32_t> ids, const std::vector<std::string>& bytes) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)];
  });
  TokenIndex::Sorted s;
  s.lcp.resize(ids.size(), 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string& a = bytes[static_cast<size_t>(ids[i - 1])];
    const std::string& b = bytes[static_cast<size_t>(ids[i])];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    s.lcp[i] = static_cast<uint16_t>(k);
  }
  s.ids = std::move(ids);
  s.off.reserve(s.ids.size() + 1);
  for (int32_t id : s.ids) {
    s.off.push_back(static_cast<uint32_t>(s.text.size()));
    s.text += bytes[static_cast<size_t>(id)];
  }
  s.off.push_back(static_cast<uint32_t>(s.text.size()));
  for (size_t b = 0; b < s.lcp.size(); b += TokenIndex::Sorted::kBlock)
    s.lcp_min.push_back(*std::min_element(
        s.lcp.begin() + static_cast<std::ptrdiff_t>(b),
        s.lcp.begin() +
            static_cast<std::ptrdiff_t>(std::min(s.lcp.size(), b + TokenIndex::Sorted::kBlock))));
  return s;
}

}  // namespace

size_t TokenIndex::Sorted::subtree_end(size_t i, size_t d) const {
  const size_t n = ids.size();
  size_t j = i + 1;
  for (; j < n && j % kBlock != 0; ++j)  // to a block's start
    if (lcp[j] <= d) return j;
  while (j < n && lcp_min[j / kBlock] > d) j += kBlock;  // whole blocks inside the subtree
  for (; j < n; ++j)
    if (lcp[j] <= d) return j;
  return n;
}

TokenIndex::TokenIndex(const std::vector<std::string>& bytes, const std::vector<bool>& special,
                       std::vector<int32_t> eos_ids, int32_t n_ids)
    : bytes_(bytes), n_ids_(std::max<int32_t>(n_ids, static_cast<int32_t>(bytes.size()))) {
  usable.assign(static_cast<size_t>(n_ids_), 0);
  plain_chars_of.assign(static_cast<size_t>(n_ids_), -1);
  std::vector<int32_t> all_ids, np_ids;
  std::vector<std::pair<int32_t, int32_t>> plain;  // chars, id
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const std::string& b = bytes_[i];
    if (b.empty() || b.size() > 1024 || (i < special.size() && special[i])) continue;
    usable[i] = 1;
    const int32_t id = static_cast<int32_t>(i);
    all_ids.push_back(id);
    max_token_bytes = std::max(max_token_bytes, b.size());
    int32_t chars = 0;
    if (plain_text(b, &chars)) {
      plain.emplace_back(chars, id);
      plain_chars_of[i] = chars;
    } else {
      np_ids.push_back(id);
    }
  }
  all = sort_tokens(std::move(all_ids), bytes_);
  not_plain = sort_tokens(std::move(np_ids), bytes_);
  std::sort(plain.begin(), plain.end());
  for (const auto& [c, id] : plain) {
    plain_chars.push_back(c);
    plain_by_chars.push_back(id);
  }
  for (int32_t e : eos_ids)
    if (e >= 0 && e < n_ids_) eos.push_back(e);
}

}  // namespace vkllm::grammar
