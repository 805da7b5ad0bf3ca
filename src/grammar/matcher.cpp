// The matcher: a byte-level pushdown recognizer over the compiled nodes (Machine), the distance
// to completion of a state (the budget rule's measure), and the token mask: a depth-first walk of
// the vocabulary's byte trie (TokenIndex's sorted order) that steps the grammar once per edge
// and skips whole subtrees the grammar refuses. Inside a string, the plain tokens (most of the
// vocabulary) are allowed by their character count alone, without a walk; the greedy path's
// one-token checks (allows, accept_token) use the same shortcut and step other tokens in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "grammar/internal.h"

namespace vkllm::grammar {

namespace {

bool is_ws(uint8_t b) {
  return b == ' ' || b == '\n' || b == '\t';
}
bool is_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}
bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

enum class Str { Bad, Ok, Closed };

// One byte of a JSON string's body (after the opening quote). count: code points so far.
Str str_byte(Frame& f, uint8_t x, int32_t max_len) {
  if (f.esc == 1) {
    if (x == 'u') {
      f.esc = 2;
      return Str::Ok;
    }
    static const char* kEsc = "\"\\/bfnrt";
    for (const char* e = kEsc; *e; ++e)
      if (x == static_cast<uint8_t>(*e)) {
        f.esc = 0;
        return Str::Ok;
      }
    return Str::Bad;
  }
  if (f.esc >= 2) {  // \uXXXX without surrogates (D800-DFFF): one code point
    if (!is_hex(x)) return Str::Bad;
    if (f.esc == 2) {
      f.esc = (x == 'd' || x == 'D') ? 6 : 3;
    } else if (f.esc == 6) {
      if (x < '0' || x > '7') return Str::Bad;
      f.esc = 4;
    } else {
      f.esc = f.esc == 5 ? 0 : f.esc + 1;
    }
    return Str::Ok;
  }
  if (f.utf8_left > 0) {
    static const uint8_t lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
    static const uint8_t hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    if (x < lo[f.utf8_code] || x > hi[f.utf8_code]) return Str::Bad;
    --f.utf8_left;
    f.utf8_code = 0;
    return Str::Ok;
  }
  if (x == '"') return Str::Closed;
  if (x < 0x20 || f.count >= max_len) return Str::Bad;
  if (x == '\\') {
    f.esc = 1;
  } else if (x >= 0x80) {
    if (x >= 0xC2 && x <= 0xDF) {
      f.utf8_left = 1;
    } else if (x >= 0xE0 && x <= 0xEF) {
      f.utf8_left = 2;
      f.utf8_code = x == 0xE0 ? 1 : x == 0xED ? 2 : 0;
    } else if (x >= 0xF0 && x <= 0xF4) {
      f.utf8_left = 3;
      f.utf8_code = x == 0xF0 ? 3 : x == 0xF4 ? 4 : 0;
    } else {
      return Str::Bad;
    }
  }
  ++f.count;
  return Str::Ok;
}

int esc_need(const Frame& f) {
  return f.esc == 0 ? 0 : f.esc == 1 ? 1 : f.esc == 6 ? 3 : 6 - f.esc;
}

class Machine {
 public:
  explicit Machine(const Compiled& c) : c_(c) {}

  // out = the stacks of `in` after byte x.
  void step(const State& in, uint8_t x, State& out) const {
    out.clear();
    for (size_t i = 0; i < in.stacks() && out.stacks() < kMaxStacks; ++i) {
      const size_t base = out.frames.size();
      out.frames.insert(out.frames.end(), in.frames.begin() + in.begin(i),
                        in.frames.begin() + in.ends[i]);
      run(out, base, x);
    }
  }

  // step() for a state of one stack, in place (no copy of its frames).
  void step_one(State& s, uint8_t x) const {
    s.ends.clear();
    run(s, 0, x);
  }

  int64_t stack_distance(const Frame* f, size_t n) const {
    int64_t d = 0;
    for (size_t i = 0; i < n; ++i) d += frame_rem(f[i]);
    return std::min<int64_t>(d, kInf);
  }

 private:
  const Compiled& c_;
  const Node& node(int32_t i) const { return c_.nodes[static_cast<size_t>(i)]; }
  const LiteralTrie& trie(int32_t i) const { return c_.tries[static_cast<size_t>(i)]; }

  static void commit(State& out) { out.ends.push_back(static_cast<uint32_t>(out.frames.size())); }
  static void die(State& out, size_t base) { out.frames.resize(base); }
  // A whitespace byte in a frame's current run.
  static void space(State& out, size_t base, Frame& t) {
    if (t.ws >= kMaxWhitespace) return die(out, base);
    ++t.ws;
    commit(out);
  }
  static bool required_done(const Node& n, const Frame& t) {
    return (t.used & n.required) == n.required;
  }
  bool can_add_key(const Node& n, const Frame& t) const {
    return n.additional >= 0 || (trie(n.keys).n[0].props & ~t.used) != 0;
  }

  // Byte x on the stack at [base, end) of out; commits the stacks it becomes, or drops it.
  void run(State& out, size_t base, uint8_t x) const {
    for (;;) {
      Frame& t = out.frames.back();
      switch (t.phase) {
        case kRootExpect:
          t.phase = kRootDone;
          return push_value(out, base, c_.root, x, 0);
        case kRootDone:
          return die(out, base);
        case kObjStart:
        case kObjNext:
        case kObjAfter: {
          const Node& n = node(t.node);
          if (is_ws(x)) return space(out, base, t);
          if (t.phase != kObjAfter && x == '"' && can_add_key(n, t)) {
            t.phase = kObjKey;
            t.aux = n.props.empty() ? -1 : 0;
            t.count = 0;
            t.esc = t.utf8_left = t.utf8_code = 0;
            return commit(out);
          }
          if (t.phase == kObjAfter && x == ',' && can_add_key(n, t)) {
            t.phase = kObjNext;
            t.ws = 0;
            return commit(out);
          }
          if (t.phase != kObjNext && x == '}' && required_done(n, t)) {
            out.frames.pop_back();
            return commit(out);
          }
          return die(out, base);
        }
        case kObjKey:
          return key_byte(out, base, t, x);
        case kObjColon:
          if (is_ws(x)) return space(out, base, t);
          if (x != ':') return die(out, base);
          t.phase = kObjValue;
          t.ws = 0;
          return commit(out);
        case kObjValue: {
          if (is_ws(x)) return space(out, base, t);
          const Node& n = node(t.node);
          const int32_t v = t.aux >= 0 ? n.props[static_cast<size_t>(t.aux)].node : n.additional;
          t.phase = kObjAfter;
          t.ws = 0;
          return push_value(out, base, v, x, 0);
        }
        case kArrStart:
        case kArrValue:
        case kArrAfter: {
          const Node& n = node(t.node);
          if (is_ws(x)) return space(out, base, t);
          if (t.phase != kArrValue && x == ']' && t.count >= n.min_items) {
            out.frames.pop_back();
            return commit(out);
          }
          if (t.phase == kArrAfter) {
            if (x != ',' || t.count >= n.max_items) return die(out, base);
            t.phase = kArrValue;
            t.ws = 0;
            return commit(out);
          }
          if (t.count >= n.max_items) return die(out, base);
          t.phase = kArrAfter;
          t.ws = 0;
          ++t.count;
          return push_value(out, base, n.items, x, 0);
        }
        case kStrIn: {
          const Node& n = node(t.node);
          const Str r = str_byte(t, x, n.max_len);
          if (r == Str::Bad || (r == Str::Closed && t.count < n.min_len)) return die(out, base);
          if (r == Str::Closed) out.frames.pop_back();
          return commit(out);
        }
        case kLit: {
          const LiteralTrie& tr = trie(node(t.node).trie);
          const int32_t c = tr.child(t.aux, x);
          if (c >= 0) {
            t.aux = c;
            return commit(out);
          }
          if (tr.n[static_cast<size_t>(t.aux)].term < 0) return die(out, base);
          out.frames.pop_back();
          continue;  // the byte goes to the parent
        }
        default: {  // numbers
          const Node& n = node(t.node);
          if (num_step(n, t, x)) return commit(out);
          if (!num_complete(n, t)) return die(out, base);
          out.frames.pop_back();
          continue;
        }
      }
    }
  }

  void key_byte(State& out, size_t base, Frame& t, uint8_t x) const {
    const Node& n = node(t.node);
    const LiteralTrie& tr = trie(n.keys);
    if (x == '"' && t.esc == 0 && t.utf8_left == 0) {
      const int32_t p = t.aux >= 0 ? tr.n[static_cast<size_t>(t.aux)].term : -1;
      if (p >= 0) {
        if ((t.used >> p) & 1) return die(out, base);  // a duplicate
        t.used |= uint64_t{1} << p;
      } else if (n.additional < 0) {
        return die(out, base);
      }
      t.aux = p;
      t.phase = kObjColon;
      t.ws = 0;
      return commit(out);
    }
    if (str_byte(t, x, kInf) != Str::Ok) return die(out, base);
    if (t.aux >= 0) t.aux = tr.child(t.aux, x);
    if (n.additional < 0 && (t.aux < 0 || (tr.n[static_cast<size_t>(t.aux)].props & ~t.used) == 0))
      return die(out, base);
    commit(out);
  }

  // Starts a value of node v with byte x on top of the stack at [base, end).
  void push_value(State& out, size_t base, int32_t v, uint8_t x, int nest) const {
    const Node& n = node(v);
    if (!n.starts_with(x) || nest > 64) return die(out, base);
    if (n.kind == Kind::AnyOf) {
      std::vector<Frame> stack(out.frames.begin() + static_cast<std::ptrdiff_t>(base),
                               out.frames.end());
      out.frames.resize(base);
      for (int32_t a : n.alts) {
        if (out.stacks() >= kMaxStacks) break;
        if (!node(a).starts_with(x)) continue;
        const size_t b2 = out.frames.size();
        out.frames.insert(out.frames.end(), stack.begin(), stack.end());
        push_value(out, b2, a, x, nest + 1);
      }
      return;
    }
    // Objects and arrays stop at max_frames; a scalar may always come (one more frame), so that
    // every stack stays completable the way stack_distance counts it (a value's shortest form).
    if ((n.kind == Kind::Object || n.kind == Kind::Array) &&
        out.frames.size() - base >= static_cast<size_t>(c_.max_frames))
      return die(out, base);
    Frame f;
    f.node = v;
    switch (n.kind) {
      case Kind::Object:
        f.phase = kObjStart;
        f.used = 0;
        break;
      case Kind::Array:
        f.phase = kArrStart;
        break;
      case Kind::String:
        f.phase = kStrIn;
        break;
      case Kind::Literal:
        f.phase = kLit;
        f.aux = trie(n.trie).child(0, x);
        if (f.aux < 0) return die(out, base);
        break;
      default:
        f.phase = kNumStart;
        f.used = 0;
        if (!num_step(n, f, x)) return die(out, base);
        break;
    }
    out.frames.push_back(f);
    commit(out);
  }

  // Bytes of required properties still missing (each with its comma), but property `skip`.
  int64_t missing(const Node& n, uint64_t used, int skip) const {
    int64_t m = 0;
    for (size_t i = 0; i < n.props.size(); ++i)
      if (((n.required & ~used) >> i) & 1 && static_cast<int>(i) != skip)
        m += 1 + static_cast<int64_t>(n.props[i].key.size()) + 3 + node(n.props[i].node).min_bytes;
    return m;
  }

  // Property i's bytes in missing(n, used, -1): 0 unless it is required and not yet present.
  int64_t required_share(const Node& n, uint64_t used, size_t i) const {
    if (!(((n.required & ~used) >> i) & 1)) return 0;
    return 1 + static_cast<int64_t>(n.props[i].key.size()) + 3 + node(n.props[i].node).min_bytes;
  }

  // The fewest bytes that finish frame f once the frame above it (if any) is finished.
  int64_t frame_rem(const Frame& f) const {
    if (f.node < 0) return f.phase == kRootDone ? 0 : node(c_.root).min_bytes;
    const Node& n = node(f.node);
    switch (f.phase) {
      case kObjStart: {
        const int64_t m = missing(n, f.used, -1);
        return m == 0 ? 1 : m;
      }
      case kObjNext: {
        const int64_t m = missing(n, f.used, -1);
        if (m > 0) return m;
        int64_t best = n.additional >= 0 ? 3 + int64_t{node(n.additional).min_bytes} : kInf;
        for (size_t i = 0; i < n.props.size(); ++i)
          if (!((f.used >> i) & 1))
            best = std::min<int64_t>(best, static_cast<int64_t>(n.props[i].key.size()) + 3 +
                                               node(n.props[i].node).min_bytes);
        return best + 1;
      }
      case kObjKey: {
        int64_t best = kInf;
        if (f.aux >= 0) {
          const LiteralTrie& tr = trie(n.keys);
          const LiteralTrie::N& at = tr.n[static_cast<size_t>(f.aux)];
          const int64_t all = missing(n, f.used, -1);  // less property i's share where it is one
          for (size_t i = 0; i < n.props.size(); ++i)
            if (((at.props & ~f.used) >> i) & 1)
              best = std::min<int64_t>(best, tr.n[static_cast<size_t>(n.props[i].end)].depth -
                                                 at.depth + 2 + node(n.props[i].node).min_bytes +
                                                 all - required_share(n, f.used, i) + 1);
        }
        if (n.additional >= 0)
          best =
              std::min<int64_t>(best, esc_need(f) + f.utf8_left + 2 + node(n.additional).min_bytes +
                                          missing(n, f.used, -1) + 1);
        return best;
      }
      case kObjColon:
      case kObjValue: {
        const int32_t v = f.aux >= 0 ? n.props[static_cast<size_t>(f.aux)].node : n.additional;
        return (f.phase == kObjColon ? 1 : 0) + int64_t{node(v).min_bytes} +
               missing(n, f.used, -1) + 1;
      }
      case kObjAfter:
        return missing(n, f.used, -1) + 1;
      case kArrStart:
      case kArrValue:
      case kArrAfter: {
        const int64_t mi = node(n.items).min_bytes;
        int64_t need = std::max<int64_t>(0, int64_t{n.min_items} - f.count);
        if (f.phase == kArrAfter) return need * (1 + mi) + 1;
        if (f.phase == kArrValue) need = std::max<int64_t>(need, 1);
        return need == 0 ? 1 : need * mi + (need - 1) + 1;
      }
      case kStrIn:
        return esc_need(f) + f.utf8_left + std::max(0, n.min_len - f.count) + 1;
      case kLit:
        return trie(n.trie).n[static_cast<size_t>(f.aux)].min_rest;
      default:
        return num_distance(n, f);
    }
  }
};

bool stack_complete(const Compiled& c, const Frame* f, size_t n) {
  if (n == 1) return f[0].phase == kRootDone;
  if (n != 2 || f[0].phase != kRootDone) return false;
  const Node& nd = c.nodes[static_cast<size_t>(f[1].node)];
  if (f[1].phase == kLit)
    return c.tries[static_cast<size_t>(nd.trie)].n[static_cast<size_t>(f[1].aux)].term >= 0;
  return f[1].phase >= kNumStart && f[1].phase <= kNumFrac && num_complete(nd, f[1]);
}

}  // namespace

bool plain_text(const std::string& bytes, int32_t* chars) {
  Frame f;
  for (char ch : bytes) {
    const uint8_t x = static_cast<uint8_t>(ch);
    if (x == '\\' || str_byte(f, x, kInf) != Str::Ok) return false;
  }
  *chars = f.count;
  return f.utf8_left == 0 && !bytes.empty();
}

// ---- Matcher ----

namespace {

int state_distance(const Machine& m, const State& s) {
  int64_t best = kInf;
  for (size_t i = 0; i < s.stacks(); ++i)
    best = std::min(best, m.stack_distance(s.frames.data() + s.begin(i), s.ends[i] - s.begin(i)));
  return static_cast<int>(best);
}

// Every stack's top frame inside a string at a character boundary (a value, or a key that is no
// property's prefix where any key may come): there a plain token is allowed by its character count
// alone, and stepping its bytes adds that count to the frame.
bool in_string(const Compiled& c, const State& s) {
  if (s.stacks() == 0) return false;
  for (size_t i = 0; i < s.stacks(); ++i) {
    const Frame& t = s.frames[s.ends[i] - 1];
    const bool free_key =
        t.phase == kObjKey && t.aux < 0 && c.nodes[static_cast<size_t>(t.node)].additional >= 0;
    if (!((t.phase == kStrIn || free_key) && t.esc == 0 && t.utf8_left == 0)) return false;
  }
  return true;
}

// The character counts [lo, hi] of the plain tokens stack i of an in_string state takes under the
// budget rule's bound (ds: the stack's distance); false where it takes none.
bool plain_range(const Compiled& c, const State& s, size_t i, int64_t ds, int64_t bound,
                 int64_t* lo, int64_t* hi) {
  const Frame& t = s.frames[s.ends[i] - 1];
  const Node& n = c.nodes[static_cast<size_t>(t.node)];
  const bool key = t.phase == kObjKey;
  const int64_t below_min = key ? 0 : std::max(0, n.min_len - t.count);
  *lo = 1;
  if (ds - bound > 0) {  // only tokens that bring completion closer
    if (below_min < ds - bound) return false;
    *lo = ds - bound;
  }
  *hi = key ? int64_t{kInf} : int64_t{n.max_len} - t.count;
  return *hi >= *lo;
}

int64_t stack_distance(const Machine& m, const State& s, size_t i) {
  return m.stack_distance(s.frames.data() + s.begin(i), s.ends[i] - s.begin(i));
}

int64_t budget_bound(int tokens_left, int distance) {
  const int64_t left = tokens_left >= 1 ? tokens_left : int64_t{kInf} * 4;
  return std::max(left - 1, int64_t{distance} - 1);
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> index)
    : g_(std::move(g)),
      index_(std::move(index)),
      state_(std::make_unique<State>()),
      after_(std::make_unique<State>()) {
  state_->frames.push_back(Frame{});
  state_->ends.push_back(1);
}
Matcher::Matcher(const Matcher& o)
    : g_(o.g_),
      index_(o.index_),
      state_(std::make_unique<State>(*o.state_)),
      after_(std::make_unique<State>()),
      ended_(o.ended_) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

bool Matcher::is_eos(int32_t id) const {
  return std::find(index_->eos.begin(), index_->eos.end(), id) != index_->eos.end();
}

void Matcher::moved() {
  after_id_ = -1;
  distance_ = -1;
}

int Matcher::cur_distance() {
  if (distance_ < 0) distance_ = state_distance(Machine(g_->compiled()), *state_);
  return distance_;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  const Machine m(g_->compiled());
  State cur = *state_, next;
  for (char ch : bytes) {
    m.step(cur, static_cast<uint8_t>(ch), next);
    if (next.stacks() == 0) return false;
    std::swap(cur, next);
  }
  *state_ = std::move(cur);
  moved();
  return true;
}

bool Matcher::step_token(const std::string& bytes) {
  const Machine m(g_->compiled());
  if (scratch_.size() < 2) scratch_.resize(2);
  scratch_[0] = *state_;
  for (char ch : bytes) {
    if (scratch_[0].stacks() == 1) {
      m.step_one(scratch_[0], static_cast<uint8_t>(ch));
      if (scratch_[0].stacks() == 0) return false;
      continue;
    }
    m.step(scratch_[0], static_cast<uint8_t>(ch), scratch_[1]);
    if (scratch_[1].stacks() == 0) return false;
    std::swap(scratch_[0], scratch_[1]);
  }
  return true;
}

bool Matcher::accept_plain(int32_t chars) {
  Frame& t = state_->frames.back();
  const int known = distance_;
  if (t.phase == kObjKey) {  // a free key: its remainder does not depend on its length
    t.count += chars;
    moved();
    distance_ = known;
    return true;
  }
  const Node& n = g_->compiled().nodes[static_cast<size_t>(t.node)];
  if (int64_t{t.count} + chars > n.max_len) return false;
  // Of the distance only the string's own remainder changes: the characters below minLength.
  const int before = std::max(0, n.min_len - t.count);
  t.count += chars;
  moved();
  if (known >= 0 && known < kInf) distance_ = known - before + std::max(0, n.min_len - t.count);
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (ended_ || id < 0 || id >= index_->size()) return false;
  if (is_eos(id)) {
    if (!complete()) return false;
    ended_ = true;
    return true;
  }
  const TokenIndex& ix = *index_;
  if (!ix.usable[static_cast<size_t>(id)]) return false;
  if (id == after_id_) {
    std::swap(*state_, *after_);
    moved();
    distance_ = after_distance_;
    return true;
  }
  const int32_t chars = ix.plain_chars_of[static_cast<size_t>(id)];
  if (chars > 0 && state_->stacks() == 1 && in_string(g_->compiled(), *state_))
    return accept_plain(chars);
  if (!step_token(ix.bytes(id))) return false;
  std::swap(*state_, scratch_[0]);
  moved();
  return true;
}

bool Matcher::complete() const {
  if (ended_) return true;
  for (size_t i = 0; i < state_->stacks(); ++i)
    if (stack_complete(g_->compiled(), state_->frames.data() + state_->begin(i),
                       state_->ends[i] - state_->begin(i)))
      return true;
  return false;
}

bool Matcher::finished() const {
  if (ended_) return true;
  const Compiled& c = g_->compiled();
  for (size_t i = 0; i < state_->stacks(); ++i) {
    const Frame* f = state_->frames.data() + state_->begin(i);
    const size_t n = state_->ends[i] - state_->begin(i);
    if (n == 1 && f[0].phase == kRootDone) continue;
    if (n == 2 && f[0].phase == kRootDone && f[1].phase == kLit) {  // a literal with no longer one
      const LiteralTrie::N& at =
          c.tries[static_cast<size_t>(c.nodes[static_cast<size_t>(f[1].node)].trie)]
              .n[static_cast<size_t>(f[1].aux)];
      if (at.term >= 0 && at.next.empty()) continue;
    }
    return false;
  }
  return true;
}

int Matcher::distance() const {
  return ended_ ? 0 : state_distance(Machine(g_->compiled()), *state_);
}

void Matcher::fill_mask(std::vector<uint8_t>& allowed, int tokens_left) {
  const TokenIndex& ix = *index_;
  allowed.assign(static_cast<size_t>(ix.size()), 0);
  if (ended_) return;
  const Machine m(g_->compiled());
  const Compiled& c = g_->compiled();
  const State& cur = *state_;
  const int64_t bound = budget_bound(tokens_left, cur_distance());
  if (complete())
    for (int32_t e : ix.eos) allowed[static_cast<size_t>(e)] = 1;

  // Inside a string at a character boundary: plain tokens by length alone.
  const bool strings = in_string(c, cur);
  if (strings) {
    for (size_t i = 0; i < cur.stacks(); ++i) {
      int64_t lo = 0, hi = 0;
      if (!plain_range(c, cur, i, stack_distance(m, cur, i), bound, &lo, &hi)) continue;
      const auto b = std::lower_bound(ix.plain_chars.begin(), ix.plain_chars.end(), lo);
      const auto e = std::upper_bound(b, ix.plain_chars.end(), hi);
      if ((e - b) * 8 > ix.size()) {  // most of the vocabulary: one pass in id order
        const uint64_t span = static_cast<uint64_t>(hi - lo);
        for (size_t id = 0; id < allowed.size(); ++id)
          allowed[id] |= static_cast<uint64_t>(ix.plain_chars_of[id] - lo) <= span;
        continue;
      }
      for (auto it = b; it != e; ++it)
        allowed[static_cast<size_t>(
            ix.plain_by_chars[static_cast<size_t>(it - ix.plain_chars.begin())])] = 1;
    }
  }
  const TokenIndex::Sorted& walk = strings ? ix.not_plain : ix.all;

  // Depth-first over the trie: scratch_[d] is the state after the first d bytes of the token.
  if (scratch_.size() < ix.max_token_bytes + 1) scratch_.resize(ix.max_token_bytes + 1);
  scratch_[0] = cur;
  size_t valid = 0;  // scratch_[0..valid] hold the current token's prefixes
  const size_t n = walk.size();
  for (size_t i = 0; i < n; ++i) {
    const char* tok = walk.text.data() + walk.off[i];
    const size_t len = walk.off[i + 1] - walk.off[i];
    size_t d = std::min<size_t>(walk.lcp[i], valid);
    bool alive = true;
    while (d < len) {
      m.step(scratch_[d], static_cast<uint8_t>(tok[d]), scratch_[d + 1]);
      if (scratch_[d + 1].stacks() == 0) {
        alive = false;
        break;
      }
      ++d;
    }
    valid = d;
    if (!alive) {  // every later token through this edge dies too
      i = walk.subtree_end(i, d) - 1;
      continue;
    }
    if (state_distance(m, scratch_[d]) <= bound) allowed[static_cast<size_t>(walk.ids[i])] = 1;
  }
}

bool Matcher::allows(int32_t id, int tokens_left) {
  const TokenIndex& ix = *index_;
  if (ended_ || id < 0 || id >= ix.size()) return false;
  if (is_eos(id) && complete()) return true;
  if (static_cast<size_t>(id) >= ix.usable.size() || !ix.usable[static_cast<size_t>(id)])
    return false;
  const Machine m(g_->compiled());
  const Compiled& c = g_->compiled();
  const int64_t bound = budget_bound(tokens_left, cur_distance());
  const int32_t chars = ix.plain_chars_of[static_cast<size_t>(id)];
  if (chars > 0 && in_string(c, *state_)) {  // the mask's verdict by character count
    const size_t n = state_->stacks();
    for (size_t i = 0; i < n; ++i) {
      const int64_t ds = n == 1 ? cur_distance() : stack_distance(m, *state_, i);
      int64_t lo = 0, hi = 0;
      if (plain_range(c, *state_, i, ds, bound, &lo, &hi) && chars >= lo && chars <= hi)
        return true;
    }
    return false;
  }
  if (id != after_id_) {
    after_id_ = -1;
    if (!step_token(ix.bytes(id))) return false;
    std::swap(*after_, scratch_[0]);
    after_id_ = id;
    after_distance_ = state_distance(m, *after_);
  }
  return after_distance_ <= bound;
}

void Matcher::apply_mask(float* logits, int64_t vocab, int tokens_left) {
  fill_mask(allowed_, tokens_left);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    if (i >= index_->size() || !allowed_[static_cast<size_t>(i)]) logits[i] = ninf;
}

int32_t Matcher::masked_argmax(const float* logits, int64_t vocab, int tokens_left) {
  fill_mask(allowed_, tokens_left);
  const size_t n = static_cast<size_t>(std::min<int64_t>(vocab, index_->size()));
  const float ninf = -std::numeric_limits<float>::infinity();
  // std::max_element's comparison (v < x) over the masked logits: a disallowed one (-infinity)
  // never replaces the best so far, so only allowed ids are visited, eight mask bytes at a time.
  size_t best = 0;
  float v = n > 0 && allowed_[0] ? logits[0] : ninf;
  const uint8_t* a = allowed_.data();
  for (size_t i = 1; i < n;) {
    if (i % 8 == 0 && i + 8 <= n) {
      uint64_t word = 0;
      std::memcpy(&word, a + i, 8);
      if (word == 0) {
        i += 8;
        continue;
      }
    }
    if (a[i] && v < logits[i]) best = i, v = logits[i];
    ++i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace vkllm::grammar
