// JSON numbers under a schema's bounds, byte by byte (the matcher's number frames and the
// compiler's shortest forms): a digit is taken only where some completion of the number still lies
// in [minimum, maximum] at the schema's fraction digits.
#include <array>

#include "grammar/internal.h"

namespace vkllm::grammar {

namespace {

bool decimal_digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

// kPow10[k] = 10^k.
constexpr std::array<int64_t, 19> kPow10 = [] {
  std::array<int64_t, 19> p{};
  p[0] = 1;
  for (size_t k = 1; k < p.size(); ++k) p[k] = p[k - 1] * 10;
  return p;
}();

// Whether some completion of the number prefix f lies in [n.lo, n.hi] (values scaled by 10^F).
bool num_feasible(const Node& n, const Frame& f) {
  const int64_t S = kPow10[n.frac_digits];
  bool pos = !f.neg, neg = f.neg;
  if (f.phase == kNumStart) pos = neg = true;
  const auto hit = [&](int64_t a, int64_t b) {  // magnitudes [a, b]
    return (pos && a <= n.hi && b >= n.lo) || (neg && -b <= n.hi && -a >= n.lo);
  };
  const int64_t v = static_cast<int64_t>(f.used);
  switch (f.phase) {
    case kNumStart:
    case kNumSign:
      return hit(0, kPow10[n.int_digits] * S - 1);
    case kNumInt: {
      const int more = v == 0 ? 0 : n.int_digits - f.nint;
      for (int k = 0; k <= more; ++k)
        if (hit(v * kPow10[k] * S, (v + 1) * kPow10[k] * S - 1)) return true;
      return false;
    }
    case kNumDot:
      return hit(v * S, (v + 1) * S - 1);
    case kNumFrac: {
      const int64_t unit = kPow10[n.frac_digits - f.nfrac];
      const int64_t a = v * S + f.frac * unit;
      return hit(a, a + unit - 1);
    }
    default:
      return false;
  }
}

}  // namespace

bool num_step(const Node& n, Frame& f, uint8_t x) {
  Frame g = f;
  const int d = x - '0';
  switch (g.phase) {
    case kNumStart:
      if (x == '-') {
        g.phase = kNumSign;
        g.neg = true;
        break;
      }
      [[fallthrough]];
    case kNumSign:
      if (!decimal_digit(x)) return false;
      g.phase = kNumInt;
      g.used = static_cast<uint64_t>(d);
      g.nint = 1;
      break;
    case kNumInt:
      if (x == '.') {
        if (n.frac_digits == 0) return false;
        g.phase = kNumDot;
        break;
      }
      if (!decimal_digit(x) || g.used == 0 || g.nint >= n.int_digits) return false;
      g.used = g.used * 10 + static_cast<uint64_t>(d);
      ++g.nint;
      break;
    case kNumDot:
    case kNumFrac:
      if (!decimal_digit(x) || g.nfrac >= n.frac_digits) return false;
      g.frac = g.frac * 10 + d;
      ++g.nfrac;
      g.phase = kNumFrac;
      break;
    default:
      return false;
  }
  if (!num_feasible(n, g)) return false;
  f = g;
  return true;
}

bool num_complete(const Node& n, const Frame& f) {
  if (f.phase != kNumInt && f.phase != kNumFrac) return false;
  const int64_t S = kPow10[n.frac_digits];
  int64_t v = static_cast<int64_t>(f.used) * S;
  if (f.phase == kNumFrac) v += f.frac * kPow10[n.frac_digits - f.nfrac];
  if (f.neg) v = -v;
  return v >= n.lo && v <= n.hi;
}

int num_distance(const Node& n, const Frame& f0) {
  static const char kOrder[] = "0123456789.-";
  Frame f = f0;
  int d = 0;
  while (!num_complete(n, f)) {
    bool moved = false;
    for (const char* c = kOrder; *c && !moved; ++c)
      moved = num_step(n, f, static_cast<uint8_t>(*c));
    if (!moved || ++d > 64) return kInf;
  }
  return d;
}

}  // namespace vkllm::grammar
