// The grammar's internal representation: compiled schema nodes (compile.cpp) and the matcher's
// byte-level pushdown state (matcher.cpp). A state is a set of stacks (one per anyOf alternative
// still alive); each stack is a run of frames, the bottom one the root, the top one the value being
// written.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace vkllm::grammar {

constexpr int kInf = std::numeric_limits<int>::max() / 4;
constexpr int kMaxStacks = 32;  // anyOf alternatives alive at once; more are dropped

enum class Kind : uint8_t { Object, Array, String, Number, Literal, AnyOf };

// A trie of byte strings: enum/const values (serialized JSON) or an object's property names
// (their JSON-escaped text between the quotes).
struct LiteralTrie {
  struct N {
    std::vector<std::pair<uint8_t, int32_t>> next;
    int32_t term = -1;     // the string ending here (property index), -1: none
    int32_t min_rest = 0;  // bytes to the nearest end below
    int32_t depth = 0;
    uint64_t props = 0;  // property tries: the properties ending at or below
  };
  std::vector<N> n;
  LiteralTrie() : n(1) {}
  int32_t child(int32_t at, uint8_t b) const {
    for (const auto& [c, to] : n[static_cast<size_t>(at)].next)
      if (c == b) return to;
    return -1;
  }
  int32_t insert(const std::string& s, int32_t term);  // returns the end node
  void finish();                                       // computes min_rest
};

struct Prop {
  std::string name;
  std::string key;  // JSON-escaped, without quotes
  int32_t node = -1;
  bool required = false;
  int32_t end = -1;  // its end node in the key trie
};

struct Node {
  Kind kind = Kind::AnyOf;
  // Object
  std::vector<Prop> props;
  int32_t additional = -1;  // node of additional properties; -1: none allowed
  int32_t keys = -1;        // key trie
  uint64_t required = 0;
  // Array
  int32_t items = -1;
  int32_t min_items = 0, max_items = kInf;
  // String (lengths in code points)
  int32_t min_len = 0, max_len = kInf;
  // Number: bounds scaled by 10^frac_digits
  bool integer = false;
  int int_digits = 15, frac_digits = 0;
  int64_t lo = 0, hi = 0;
  // Literal
  int32_t trie = -1;
  // AnyOf
  std::vector<int32_t> alts;
  // All: the shortest serialization, and the bytes a value may start with
  int32_t min_bytes = kInf;
  uint64_t first[4] = {0, 0, 0, 0};
  bool starts_with(uint8_t b) const { return (first[b >> 6] >> (b & 63)) & 1; }
};

struct Compiled {
  std::vector<Node> nodes;
  std::vector<LiteralTrie> tries;
  int32_t root = 0;
  int max_frames = 0;
};

// Frame phases.
enum : uint8_t {
  kRootExpect,
  kRootDone,
  kObjStart,  // after '{'
  kObjKey,    // inside a key
  kObjColon,  // after a key
  kObjValue,  // after ':'
  kObjAfter,  // after a value
  kObjNext,   // after ','
  kArrStart,  // after '['
  kArrValue,  // after ','
  kArrAfter,  // after a value
  kStrIn,     // inside a string
  kNumStart,  // nothing yet (only in distance computations)
  kNumSign,   // after '-'
  kNumInt,    // integer digits
  kNumDot,    // after '.'
  kNumFrac,   // fraction digits
  kLit,       // inside a literal
};

struct Frame {
  int32_t node = -1;  // -1: the root
  uint8_t phase = kRootExpect;
  uint8_t ws = 0;         // whitespace bytes in the current run
  uint8_t utf8_left = 0;  // string: continuation bytes to come
  uint8_t utf8_code = 0;  // string: range of the next continuation byte (0: 80-BF)
  uint8_t esc = 0;        // string: 0 none, 1 after '\', 2-5 after "\u" + 0-3 hex digits, 6 "\uD"
  uint8_t nint = 0, nfrac = 0;
  bool neg = false;
  int32_t count = 0;  // string: code points; array: items; number: unused
  int32_t aux = -1;   // object key: trie node (-1 off the trie); after it: property (-1 extra)
                      // literal: trie node
  uint64_t used = 0;  // object: properties present; number: integer part
  int64_t frac = 0;   // number: fraction digits as an integer
};

struct State {
  std::vector<Frame> frames;
  std::vector<uint32_t> ends;  // stack i: frames [ends[i-1], ends[i])
  void clear() {
    frames.clear();
    ends.clear();
  }
  size_t stacks() const { return ends.size(); }
  uint32_t begin(size_t i) const { return i == 0 ? 0 : ends[i - 1]; }
};

// Number helpers shared by the compiler (min_bytes) and the matcher.
bool num_step(const Node& n, Frame& f, uint8_t b);  // false: not a continuation in range
bool num_complete(const Node& n, const Frame& f);
int num_distance(const Node& n, const Frame& f);  // bytes of the first completion in byte order
// A token usable anywhere inside a string: complete UTF-8, no '"', '\\' or control byte. Sets
// *chars to its code points.
bool plain_text(const std::string& bytes, int32_t* chars);

}  // namespace vkllm::grammar
