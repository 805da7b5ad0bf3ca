// Runtime values of the chat-template interpreter: conversions from JSON, rendering to text,
// tojson, and the JavaScript string semantics @huggingface/jinja inherits (whitespace set, number
// formatting, case mapping).
#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "template/internal.h"

namespace vkllm::tmpl::detail {

Value Value::array(std::vector<Value> x) {
  Value v;
  v.type = T::Array;
  v.arr = std::make_shared<std::vector<Value>>(std::move(x));
  return v;
}
Value Value::object(T type) {
  Value v;
  v.type = type;
  v.obj = std::make_shared<Object>();
  return v;
}
Value Value::function(Fn f) {
  Value v;
  v.type = T::Function;
  v.fn = std::make_shared<Fn>(std::move(f));
  return v;
}

bool Value::truthy() const {
  switch (type) {
    case T::Undefined:
    case T::Null:
      return false;
    case T::Bool:
      return b;
    case T::Int:
      return i != 0;
    case T::Float:
      return f != 0 && !std::isnan(f);
    case T::Str:
      return !s.empty();
    case T::Array:
      return !arr->empty();
    case T::Object:
      return !obj->items.empty();
    case T::Namespace:
    case T::Function:
      return true;
  }
  return false;
}

const Value* Object::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void Object::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

const char* type_name(const Value& v) {
  switch (v.type) {
    case T::Undefined:
      return "undefined";
    case T::Null:
      return "none";
    case T::Bool:
      return "boolean";
    case T::Int:
      return "integer";
    case T::Float:
      return "float";
    case T::Str:
      return "string";
    case T::Array:
      return v.tuple ? "tuple" : "list";
    case T::Object:
      return "dict";
    case T::Namespace:
      return "namespace";
    case T::Function:
      return "function";
  }
  return "value";
}

std::string a_type(const Value& v) {
  const std::string t = type_name(v);
  if (v.type == T::Undefined || v.type == T::Null) return t;
  return (v.type == T::Int ? "an " : "a ") + t;
}

std::string js_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x == 0) return "0";
  // Shortest round-trip digits and exponent, then ECMAScript's Number::toString layout.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int n = std::stoi(sci.substr(e + 1)) + 1;  // decimal point position
  const int k = static_cast<int>(digits.size());
  std::string out = x < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    const int exp = n - 1;
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += exp >= 0 ? fmt::format("e+{}", exp) : fmt::format("e-{}", -exp);
  }
  return out;
}

std::string to_string(const Value& v) {
  switch (v.type) {
    case T::Undefined:
      return "undefined";
    case T::Null:
      return "null";
    case T::Bool:
      return v.b ? "true" : "false";
    case T::Int:
      return std::to_string(v.i);
    case T::Float:
      if (v.f == 0 && std::signbit(v.f)) return "-0.0";
      if (std::isfinite(v.f) && v.f == std::floor(v.f) && std::fabs(v.f) < 1e21)
        return js_number(v.f) + ".0";
      return js_number(v.f);
    case T::Str:
      return v.s;
    case T::Array:
    case T::Object:
    case T::Namespace: {
      std::string out;
      to_json(out, v, {}, 0, false, std::string::npos);
      return out;
    }
    case T::Function:
      return "[function]";
  }
  return "";
}

std::string raw_string(const Value& v) {
  switch (v.type) {
    case T::Float:
      return js_number(v.f);
    case T::Array: {
      std::string out;
      for (size_t k = 0; k < v.arr->size(); ++k) {
        if (k) out += ',';
        out += to_string((*v.arr)[k]);  // each element's own toString: none is "null"
      }
      return out;
    }
    case T::Object:
    case T::Namespace:
      return "[object Map]";
    default:
      return to_string(v);
  }
}

namespace {

void json_string(std::string& out, std::string_view s, bool ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else if (ascii && c >= 0x7F) {
      // ensure_ascii escapes UTF-16 code units (astral characters become a surrogate pair).
      utf8proc_int32_t cp = 0;
      const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                      static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
      if (n <= 0) {
        cp = 0xFFFD;
      } else {
        i += static_cast<size_t>(n) - 1;
      }
      if (cp >= 0x10000) {
        const uint32_t u = static_cast<uint32_t>(cp) - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// String.prototype.localeCompare of sort_keys, approximated: case-insensitive, lower case first.
bool locale_less(const std::string& a, const std::string& b) {
  const std::string la = js_lower(a), lb = js_lower(b);
  if (la != lb) return la < lb;
  return a > b;
}

}  // namespace

void to_json(std::string& out, const Value& v, const JsonOptions& o, int depth,
             bool undefined_as_null, size_t max_bytes) {
  if (out.size() > max_bytes) fail(fmt::format("tojson output longer than {} bytes", max_bytes));
  if (depth > 512) fail("tojson: value nested too deeply");
  std::string item_sep = o.custom_separators ? o.item_sep : o.indent ? "," : ", ";
  std::string key_sep = o.custom_separators ? o.key_sep : ": ";
  switch (v.type) {
    case T::Null:
      out += "null";
      return;
    case T::Undefined:
      out += undefined_as_null ? "null" : "undefined";
      return;
    case T::Int:
      out += std::to_string(v.i);
      return;
    case T::Float:
      out += std::isfinite(v.f) ? js_number(v.f) : "null";
      return;
    case T::Bool:
      out += v.b ? "true" : "false";
      return;
    case T::Str:
      json_string(out, v.s, o.ensure_ascii);
      return;
    case T::Array:
    case T::Object:
    case T::Namespace: {
      if (v.kwargs) fail("cannot convert keyword arguments to JSON");
      if (v.tuple) fail("cannot convert a tuple to JSON");  // as @huggingface/jinja
      const std::string ind(static_cast<size_t>(o.indent), ' ');
      std::string base = "\n";
      for (int k = 0; k < depth; ++k) base += ind;
      const std::string child = base + ind;
      if (v.type == T::Array) {
        out += '[';
        for (size_t k = 0; k < v.arr->size(); ++k) {
          if (k) out += item_sep;
          if (o.indent) out += child;
          to_json(out, (*v.arr)[k], o, depth + 1, undefined_as_null, max_bytes);
        }
        if (o.indent && !v.arr->empty()) out += base;
        out += ']';
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.obj->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return locale_less(a->first, b->first); });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (o.indent) out += child;
        json_string(out, items[k]->first, o.ensure_ascii);
        out += key_sep;
        to_json(out, items[k]->second, o, depth + 1, undefined_as_null, max_bytes);
      }
      if (o.indent && !items.empty()) out += base;
      out += '}';
      return;
    }
    case T::Function:
      fail("cannot convert a function to JSON");
  }
}

namespace {
// JavaScript orders an object's integer-like keys (canonical numbers below 2^32 - 1) first,
// ascending, then the other keys in insertion order; the oracle sees objects that way.
bool array_index_key(const std::string& k, uint64_t& n) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  n = 0;
  for (char c : k) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n < 4294967295ull;
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 512) fail("context nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::null();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      // A JSON number is an integer for JavaScript when it has no fraction (1.0 is 1).
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15)
        return Value::integer(static_cast<int64_t>(d));
      return Value::number(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::object();
      std::vector<std::pair<uint64_t, const std::string*>> indexed;
      uint64_t n = 0;
      for (auto it = j.begin(); it != j.end(); ++it)
        if (array_index_key(it.key(), n)) indexed.emplace_back(n, &it.key());
      std::sort(indexed.begin(), indexed.end());
      for (const auto& [num, key] : indexed)
        v.obj->items.emplace_back(*key, from_json(j.at(*key), depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it)
        if (!array_index_key(it.key(), n))
          v.obj->items.emplace_back(it.key(), from_json(it.value(), depth + 1));
      return v;
    }
    default:
      return Value::undefined();  // binary and discarded values: none in parsed JSON
  }
}

size_t js_space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c == ' ' || (c >= 9 && c <= 13)) return 1;
  if (c < 0x80) return 0;
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                                  static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0) return 0;
  const bool ws = cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                  cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
  return ws ? static_cast<size_t>(n) : 0;
}

std::string js_trim(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (size_t n = js_space_at(s, b)) b += n;
  if (right) {
    while (e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      if (js_space_at(s, k) != e - k) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

namespace {
std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(upper ? (c >= 'a' && c <= 'z' ? c - 32 : c)
                                     : (c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const utf8proc_int32_t m = upper ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
    utf8proc_uint8_t buf[4];
    const auto w = utf8proc_encode_char(m, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(w));
    i += static_cast<size_t>(n);
  }
  return out;
}
}  // namespace

std::string js_upper(std::string_view s) {
  return map_case(s, true);
}
std::string js_lower(std::string_view s) {
  return map_case(s, false);
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace vkllm::tmpl::detail
