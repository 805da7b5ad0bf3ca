// The compiled form of a tokenizer.json (Tokenizer::compile, Tokenizer::from_compiled): the JSON
// without its model's vocab entries and merges, then those as binary lists, so that a load lexes
// a few kilobytes of JSON instead of megabytes and looks no merge up by its spellings. Layout,
// little-endian:
//   "VKTOK001"                                     magic and version
//   u64 key                                        the caller's key of the tokenizer.json
//   u64 n, n bytes                                 the rest of tokenizer.json (JSON text)
//   u32 v, v x (i32 id, u32 n, n bytes)            the vocab entries by spelling
//   u32 m, m x (i32 a, i32 b, i32 ab)              the merges by rank, as token ids
// Every count and length is checked against the bytes left; the lists are then checked as a
// parsed tokenizer.json's are (tokenizer/load.cpp).
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace vkllm {

namespace {

constexpr std::string_view kMagic = "VKTOK001";

void put_u32(std::string& out, uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), 4);
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& where) : b_(bytes), where_(where) {}
  std::string_view take(uint64_t n, const char* what) {
    if (n > b_.size() - pos_)
      fail("{}: the compiled tokenizer ends inside {} ({} bytes wanted, {} left)", where_, what, n,
           b_.size() - pos_);
    std::string_view s = b_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  uint32_t u32(const char* what) {
    uint32_t v;
    std::memcpy(&v, take(4, what).data(), 4);
    return v;
  }
  uint64_t u64(const char* what) {
    uint64_t v;
    std::memcpy(&v, take(8, what).data(), 8);
    return v;
  }
  // A count of records of at least `min_bytes` each: no more than the bytes left could hold.
  uint32_t count(size_t min_bytes, const char* what) {
    const uint32_t n = u32("a count");
    if (n > (b_.size() - pos_) / min_bytes)
      fail("{}: the compiled tokenizer's {} count {} exceeds its size", where_, what, n);
    return n;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
  const std::string& where_;
};

}  // namespace

std::optional<uint64_t> Tokenizer::compiled_source_key(std::string_view compiled) {
  if (compiled.size() < kMagic.size() + 8 || compiled.substr(0, kMagic.size()) != kMagic)
    return std::nullopt;
  uint64_t key;
  std::memcpy(&key, compiled.data() + kMagic.size(), 8);
  return key;
}

std::string Tokenizer::compile(const std::string& tokenizer_json, const std::string& where,
                               uint64_t source_key) {
  TokenizerImpl t;
  t.where = where;
  std::string rest;
  ModelLists lists;
  load_tokenizer_json(t, tokenizer_json, &rest, &lists);
  std::string out(kMagic);
  out.append(reinterpret_cast<const char*>(&source_key), 8);
  const uint64_t n = rest.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += rest;
  put_u32(out, static_cast<uint32_t>(lists.vocab.size()));
  for (const auto& [spelling, id] : lists.vocab) {
    put_u32(out, static_cast<uint32_t>(id));
    put_u32(out, static_cast<uint32_t>(spelling.size()));
    out += spelling;
  }
  put_u32(out, static_cast<uint32_t>(lists.merges.size()));
  for (const auto& m : lists.merges)
    for (int32_t id : m) put_u32(out, static_cast<uint32_t>(id));
  return out;
}

Tokenizer Tokenizer::from_compiled(std::string_view compiled,
                                   const std::string& tokenizer_config_json,
                                   const std::string& where) {
  Reader r(compiled, where);
  if (r.take(std::min(compiled.size(), kMagic.size()), "its magic") != kMagic)
    fail("{}: not a compiled tokenizer (no {} magic)", where, kMagic);
  r.u64("its key");
  const uint64_t rest_bytes = r.u64("the JSON's length");
  const std::string rest(r.take(rest_bytes, "the JSON"));
  ModelLists lists;
  const uint32_t v = r.count(8, "vocab");
  lists.vocab.reserve(v);
  for (uint32_t i = 0; i < v; ++i) {
    const auto id = static_cast<int32_t>(r.u32("a vocab entry"));
    const uint32_t n = r.u32("a vocab entry");
    lists.vocab.emplace_back(std::string(r.take(n, "a vocab entry")), id);
  }
  const uint32_t m = r.count(12, "merge");
  lists.merges.resize(m);
  for (auto& merge : lists.merges)
    for (int32_t& id : merge) id = static_cast<int32_t>(r.u32("a merge"));
  if (!r.done()) fail("{}: the compiled tokenizer has bytes after its merges", where);
  auto impl = std::make_unique<TokenizerImpl>();
  impl->where = where;
  load_tokenizer_parts(*impl, rest, std::move(lists));
  if (!tokenizer_config_json.empty()) load_tokenizer_config(*impl, tokenizer_config_json);
  return Tokenizer(std::move(impl));
}

}  // namespace vkllm
