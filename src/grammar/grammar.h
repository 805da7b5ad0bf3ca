// Grammar-constrained decoding for structured output (docs/serve.md, "Structured output"): a JSON
// schema compiled into a byte-level grammar (Grammar), the vocabulary's token bytes arranged for
// fast masking (TokenIndex, one per tokenizer), and the per-generation state that says which
// tokens may come next and advances with the chosen one (Matcher).
//
// The grammar accepts JSON text without leading or trailing whitespace; between structural tokens
// at most kMaxWhitespace bytes of whitespace (space, \n, \t). Numbers have no exponent, at most
// 15 integer digits (12 for "number") and 6 fraction digits. Every state of a matcher can still be
// completed; Matcher::fill_mask also keeps it completable within the tokens left (the budget rule).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "vkllm/vkllm.h"

namespace vkllm::grammar {

constexpr int kMaxWhitespace = 16;  // whitespace bytes allowed in one run between JSON tokens

// A schema the compiler refuses: `keyword` names the JSON Schema keyword at fault (or the limit
// exceeded, e.g. "maxDepth"), `path` where it sits (a JSON pointer into the schema); what() says
// both in one line.
class SchemaError : public Error {
 public:
  SchemaError(std::string keyword, std::string path, const std::string& why);
  const std::string& keyword() const { return keyword_; }
  const std::string& path() const { return path_; }

 private:
  std::string keyword_, path_;
};

// Bounds on untrusted schemas.
struct SchemaLimits {
  int max_nodes = 2000;       // schema objects compiled (each subschema, $ref expansions included)
  int max_depth = 24;         // nesting of objects and arrays (the matcher's stack)
  int max_properties = 64;    // properties of one object
  int max_enum = 256;         // values of one enum
  size_t max_literal = 4096;  // bytes of one enum/const value, serialized
};

struct Compiled;  // the internal representation (internal.h)

// A compiled grammar: immutable, shared by any number of matchers and threads.
class Grammar {
 public:
  explicit Grammar(std::unique_ptr<Compiled> c);
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;
  // The shortest JSON text the grammar accepts, in bytes.
  int min_length() const;
  const Compiled& compiled() const { return *c_; }

 private:
  std::unique_ptr<Compiled> c_;
};

// Compiles a JSON schema (the supported subset: docs/serve.md). Throws SchemaError naming the
// keyword for anything outside it, for a schema no value satisfies, and past the limits.
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::json& schema,
                                                   const SchemaLimits& limits = {});
// Any JSON object (response_format json_object): {"type": "object"} with any properties.
std::shared_ptr<const Grammar> any_json_object();

// The vocabulary as the matcher sees it: each id's bytes, in a trie for the mask walk. Special
// tokens and ids past the tokenizer's vocabulary are never allowed; eos ids only where the grammar
// is complete.
class TokenIndex {
 public:
  // bytes[i]: token i's bytes; special[i]: a special (added) token. n_ids: the model's logits
  // width (>= bytes.size(); the rows past it are never allowed).
  TokenIndex(const std::vector<std::string>& bytes, const std::vector<bool>& special,
             std::vector<int32_t> eos_ids, int32_t n_ids);
  int32_t size() const { return n_ids_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Token ids sorted by their bytes, with lcp[i] the bytes sorted[i] shares with sorted[i - 1]:
  // the mask walks this order as a depth-first walk of the trie of token bytes, stepping the
  // grammar once per trie edge and skipping every token below an edge the grammar refuses.
  // The walk reads each token's bytes from `text` in this order (off: n + 1 offsets), and skips a
  // refused edge's subtree a block of kBlock positions at a time where lcp_min (each block's
  // smallest lcp) says no position of the block leaves it.
  struct Sorted {
    static constexpr size_t kBlock = 64;
    std::vector<int32_t> ids;
    std::vector<uint16_t> lcp;
    std::string text;
    std::vector<uint32_t> off;
    std::vector<uint16_t> lcp_min;
    // The first position after i whose lcp is at most d (size() where none): where the subtree
    // below sorted[i]'s first d + 1 bytes ends.
    size_t subtree_end(size_t i, size_t d) const;
    size_t size() const { return ids.size(); }
  };
  Sorted all;        // every token that may ever be allowed (no special, empty or overlong ones)
  Sorted not_plain;  // those of `all` that are not plain (below)
  // Plain tokens (complete UTF-8 with no '"', '\\' or control byte: allowed inside any string
  // whose length permits), sorted by their character count; plain_chars[i] is plain_by_chars[i]'s.
  std::vector<int32_t> plain_by_chars;
  std::vector<int32_t> plain_chars;
  std::vector<int32_t> plain_chars_of;  // per id: its character count where plain, -1 otherwise
  std::vector<int32_t> eos;
  std::vector<uint8_t> usable;  // per id: may ever be allowed (in `all`)
  size_t max_token_bytes = 0;

 private:
  std::vector<std::string> bytes_;
  int32_t n_ids_;
};

struct State;

// One generation's position in the grammar. Not thread-safe; cheap to create.
class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  Matcher(const Matcher& o);  // the same position (e.g. to try bytes without moving this one)

  // allowed[id] = 1 for the tokens that may come next, 0 otherwise (size: index size). With
  // `tokens_left` >= 1 (counting this one), a token is allowed only if the text can still be
  // completed, one byte a token, within the tokens left after it (or, where it cannot, the token
  // brings completion closer): the reply stays valid JSON at max_tokens.
  void fill_mask(std::vector<uint8_t>& allowed, int tokens_left);
  // Sets logits of the tokens fill_mask disallows to -infinity (logits: `vocab` >= size() floats;
  // ids past size() are set to -infinity too).
  void apply_mask(float* logits, int64_t vocab, int tokens_left);
  // The argmax of the logits apply_mask would leave (the first of the highest, as std::max_element
  // finds it), without writing them: a greedy step's masked pick. vocab >= 1.
  int32_t masked_argmax(const float* logits, int64_t vocab, int tokens_left);
  // fill_mask's verdict on one token, without the whole vocabulary's walk (a greedy step checks
  // the unconstrained argmax first: where it is allowed it is the masked argmax too). Inside a
  // string a plain token's verdict is its character count's (as the mask's); any other token's
  // bytes are stepped over a copy of the state, kept for accept_token of the same id.
  bool allows(int32_t id, int tokens_left);
  // Advances with a token; false (state unchanged) if the grammar does not allow it. An eos id is
  // accepted where complete() (and ends the match). Allocates nothing once warm: a plain token
  // inside a string adds its characters, the token allows() last stepped takes that state, any
  // other steps its bytes in scratch states.
  bool accept_token(int32_t id);
  // Advances with bytes; false (state unchanged) if they are not a prefix of an accepted text.
  bool accept_bytes(std::string_view bytes);
  // The text so far is a complete accepted text (eos may come).
  bool complete() const;
  // Complete, and no byte may follow (only eos): generation is over.
  bool finished() const;
  // The fewest bytes that complete the text from here (0 when complete).
  int distance() const;
  bool is_eos(int32_t id) const;

 private:
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenIndex> index_;
  std::unique_ptr<State> state_;
  std::vector<State> scratch_;    // one state per trie depth for the mask walk
  std::vector<uint8_t> allowed_;  // apply_mask's mask
  std::unique_ptr<State> after_;  // the state after the bytes of token after_id_ (allows)
  int32_t after_id_ = -1;         // -1: after_ holds nothing
  int after_distance_ = 0;        // after_'s distance
  int distance_ = -1;             // distance() of state_, -1: not yet computed
  bool ended_ = false;            // eos accepted

  int cur_distance();
  bool step_token(const std::string& bytes);  // over a copy of state_ into scratch_[0]
  bool accept_plain(int32_t chars);           // a plain token inside a string, one stack
  void moved();                               // state_ changed: drop what was derived from it
};

}  // namespace vkllm::grammar
