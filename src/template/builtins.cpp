// Built-ins of the chat-template interpreter, with @huggingface/jinja's behaviour: the global
// functions (namespace, range, raise_exception, strftime_now), the tests (is defined, ...), the
// filters (| trim, | tojson, ...) and the methods of strings and dicts (.strip(), .items(), ...).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "template/internal.h"

namespace vkllm::tmpl::detail {
namespace {

Value kw_get(Object* kw, const char* name) {
  if (kw)
    if (const Value* v = kw->find(name)) return *v;
  return Value::undefined();
}
// Positional argument k, else keyword `name`, else `def`.
Value arg_or(const Args& args, size_t k, Object* kw, const char* name, Value def) {
  if (k < args.size()) return args[k];
  Value v = kw_get(kw, name);
  return v.type == T::Undefined ? def : v;
}
Value need_bool(const Value& v, const char* what) {
  if (v.type != T::Bool) fail(fmt::format("{} must be a boolean", what));
  return v;
}

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (const auto& cp : code_points(s)) n += cp.size() == 4 ? 2 : 1;
  return n;
}

std::string title_case(std::string_view s) {
  // /\b\w/g upper-cased: an ASCII word character after a non-word character (or the start).
  std::string out(s);
  bool prev_word = false;
  for (char& c : out) {
    const bool word =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    prev_word = word;
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count, size_t max_bytes) {
  if (count == 0) return s;
  int64_t left = count < 0 ? INT64_MAX : count;
  std::string out;
  if (from.empty()) {  // JavaScript's /(?=)/gu: before every code point and at the end
    for (const auto& cp : code_points(s)) {
      if (left > 0) {
        out += to;
        --left;
      }
      out += cp;
      if (out.size() > max_bytes) break;
    }
    if (left > 0) out += to;
  } else {
    size_t at = 0;
    while (true) {
      const size_t hit = left > 0 ? s.find(from, at) : std::string::npos;
      if (hit == std::string::npos) break;
      out.append(s, at, hit - at);
      out += to;
      --left;
      at = hit + from.size();
      if (out.size() > max_bytes) break;
    }
    out.append(s, at, std::string::npos);
  }
  if (out.size() > max_bytes)
    fail(fmt::format("template built a string longer than the limit ({} bytes)", max_bytes));
  return out;
}

Value split(const std::string& s, const Args& args) {
  const Value sep = args.size() > 0 ? args[0] : Value::null();
  if (sep.type != T::Str && sep.type != T::Null)
    fail("split(): the separator must be a string or none");
  const Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxsplit.type != T::Int) fail("split(): maxsplit must be an integer");
  std::vector<Value> parts;
  if (sep.type == T::Null) {
    const std::string t = js_trim(s, true, false);
    size_t i = 0;
    while (i < t.size()) {
      const size_t start = i;
      while (i < t.size() && !js_space_at(t, i)) ++i;
      if (maxsplit.i >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit.i) {
        parts.push_back(Value::string(t.substr(start)));
        break;
      }
      parts.push_back(Value::string(t.substr(start, i - start)));
      while (size_t w = js_space_at(t, i)) i += w;
    }
  } else {
    if (sep.s.empty()) fail("split(): empty separator");
    std::vector<std::string> pieces;
    size_t at = 0;
    while (true) {
      const size_t hit = s.find(sep.s, at);
      if (hit == std::string::npos) break;
      pieces.push_back(s.substr(at, hit - at));
      at = hit + sep.s.size();
    }
    pieces.push_back(s.substr(at));
    if (maxsplit.i >= 0 && static_cast<int64_t>(pieces.size()) > maxsplit.i) {
      std::string rest;
      for (size_t k = static_cast<size_t>(maxsplit.i); k < pieces.size(); ++k)
        rest += (k > static_cast<size_t>(maxsplit.i) ? sep.s : "") + pieces[k];
      pieces.resize(static_cast<size_t>(maxsplit.i));
      pieces.push_back(rest);
    }
    for (auto& p : pieces) parts.push_back(Value::string(std::move(p)));
  }
  return Value::array(std::move(parts));
}

Value affix(const std::string& s, const Args& args, bool starts, const char* name) {
  if (args.empty()) fail(fmt::format("{}() needs an argument", name));
  auto has = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return starts ? s.compare(0, p.size(), p) == 0
                  : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (args[0].type == T::Str) return Value::boolean(has(args[0].s));
  if (args[0].type == T::Array) {
    for (const Value& p : *args[0].arr) {
      if (p.type != T::Str) fail(fmt::format("{}(): the tuple's elements must be strings", name));
      if (has(p.s)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  fail(fmt::format("{}() takes a string or a tuple of strings", name));
}

Value string_method(Interp& in, const std::string& s, const std::string& name, Args& args,
                    Object* kw) {
  if (name == "upper") return Value::string(js_upper(s));
  if (name == "lower") return Value::string(js_lower(s));
  // As in @huggingface/jinja, strip/lstrip/rstrip remove whitespace and ignore an argument.
  if (name == "strip") return Value::string(js_trim(s, true, true));
  if (name == "lstrip") return Value::string(js_trim(s, true, false));
  if (name == "rstrip") return Value::string(js_trim(s, false, true));
  if (name == "title") return Value::string(title_case(s));
  if (name == "capitalize") {
    auto cps = code_points(s);
    if (cps.empty()) return Value::string("");
    std::string out = js_upper(cps[0]);
    for (size_t k = 1; k < cps.size(); ++k) out += cps[k];
    return Value::string(out);
  }
  if (name == "startswith") return affix(s, args, true, "startswith");
  if (name == "endswith") return affix(s, args, false, "endswith");
  if (name == "split") return split(s, args);
  if (name == "replace") {
    if (args.size() < 2) fail("replace() needs two arguments");
    if (args[0].type != T::Str || args[1].type != T::Str)
      fail("replace(): the arguments must be strings");
    Value count = args.size() > 2 ? args[2] : kw_get(kw, "count");
    if (count.type == T::Undefined) count = Value::null();
    if (count.type != T::Int && count.type != T::Null)
      fail("replace(): count must be an integer or none");
    return Value::string(replace_all(s, args[0].s, args[1].s, count.type == T::Int ? count.i : -1,
                                     in.limits.max_output));
  }
  fail(fmt::format("unknown string method '{}'", name));
}

bool is_string_method(const std::string& n) {
  static const char* names[] = {"upper",      "lower",      "strip",    "lstrip", "rstrip", "title",
                                "capitalize", "startswith", "endswith", "split",  "replace"};
  for (const char* m : names)
    if (n == m) return true;
  return false;
}

Value items_of(const Object& o) {
  std::vector<Value> items;
  for (const auto& [k, v] : o.items) items.push_back(Value::array({Value::string(k), v}));
  return Value::array(std::move(items));
}

}  // namespace

Value dict_method(const Value& d, const std::string& name, Args& args, Object* kw) {
  const Object& o = *d.obj;
  if (name == "get") {
    const Value key = args.empty() ? Value::undefined() : args[0];
    if (key.type != T::Str)
      fail(fmt::format("get(): the key must be a string, got {}", a_type(key)));
    if (const Value* v = o.find(key.s)) return *v;
    return args.size() > 1 ? args[1] : Value::null();
  }
  if (name == "items") return items_of(o);
  if (name == "keys") {
    std::vector<Value> keys;
    for (const auto& kv : o.items) keys.push_back(Value::string(kv.first));
    return Value::array(std::move(keys));
  }
  if (name == "values") {
    std::vector<Value> values;
    for (const auto& kv : o.items) values.push_back(kv.second);
    return Value::array(std::move(values));
  }
  if (name == "dictsort") {
    const bool cs =
        need_bool(arg_or(args, 0, kw, "case_sensitive", Value::boolean(false)), "case_sensitive").b;
    const Value by = arg_or(args, 1, kw, "by", Value::string("key"));
    if (by.type != T::Str || (by.s != "key" && by.s != "value"))
      fail("dictsort(): by must be 'key' or 'value'");
    const bool rev = need_bool(arg_or(args, 2, kw, "reverse", Value::boolean(false)), "reverse").b;
    std::vector<std::pair<std::string, Value>> items = o.items;
    const bool by_key = by.s == "key";
    std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
      const int c = by_key ? compare_values(Value::string(a.first), Value::string(b.first), cs)
                           : compare_values(a.second, b.second, cs);
      return rev ? c > 0 : c < 0;
    });
    std::vector<Value> out;
    for (auto& [k, v] : items) out.push_back(Value::array({Value::string(k), v}));
    return Value::array(std::move(out));
  }
  fail(fmt::format("unknown dict method '{}'", name));
}

bool is_dict_method(const std::string& n) {
  return n == "get" || n == "items" || n == "keys" || n == "values" || n == "dictsort";
}

namespace {

const char* const kMonths[] = {"January",   "February", "March",    "April",
                               "May",       "June",     "July",     "August",
                               "September", "October",  "November", "December"};

std::string strftime_js(std::time_t now, const std::string& f) {
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      out += f[i];
      continue;
    }
    const char c = f[++i];
    switch (c) {
      case 'Y':
        out += std::to_string(tm.tm_year + 1900);
        break;
      case 'm':
        out += fmt::format("{:02}", tm.tm_mon + 1);
        break;
      case 'd':
        out += fmt::format("{:02}", tm.tm_mday);
        break;
      case 'b':
        out += std::string(kMonths[tm.tm_mon]).substr(0, 3);
        break;
      case 'B':
        out += kMonths[tm.tm_mon];
        break;
      case 'H':
        out += fmt::format("{:02}", tm.tm_hour);
        break;
      case 'M':
        out += fmt::format("{:02}", tm.tm_min);
        break;
      case '%':
        out += '%';
        break;
      default:
        out += '%';
        out += c;
    }
  }
  return out;
}

}  // namespace

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  if (a.type == T::Null && b.type == T::Null) return 0;
  if (a.type == T::Null || b.type == T::Null)
    fail(fmt::format("cannot compare {} with {}", a_type(a), a_type(b)));
  if (a.type == T::Undefined && b.type == T::Undefined) return 0;
  if (a.type == T::Undefined || b.type == T::Undefined)
    fail(fmt::format("cannot compare {} with {}", a_type(a), a_type(b)));
  const bool an = a.is_number() || a.type == T::Bool, bn = b.is_number() || b.type == T::Bool;
  if (an && bn) return a.num() < b.num() ? -1 : a.num() > b.num() ? 1 : 0;
  if (a.type != b.type || a.type != T::Str)
    fail(fmt::format("cannot compare {} with {}", a_type(a), a_type(b)));
  const std::string x = case_sensitive ? a.s : js_lower(a.s),
                    y = case_sensitive ? b.s : js_lower(b.s);
  return x < y ? -1 : x > y ? 1 : 0;
}

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t at = 0;
  while (true) {
    const size_t dot = path.find('.', at);
    const std::string part =
        path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (v.type == T::Object || v.type == T::Namespace) {
      const Value* f = v.obj->find(part);
      v = f ? *f : Value::undefined();
    } else if (v.type == T::Array) {
      char* end = nullptr;
      const long long k = std::strtoll(part.c_str(), &end, 10);
      if (end == part.c_str() || k < 0 || static_cast<size_t>(k) >= v.arr->size())
        return Value::undefined();
      v = (*v.arr)[static_cast<size_t>(k)];
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    at = dot + 1;
  }
}

void install_globals(Env& env) {
  env.set("false", Value::boolean(false));
  env.set("true", Value::boolean(true));
  env.set("none", Value::null());
  env.set("False", Value::boolean(false));
  env.set("True", Value::boolean(true));
  env.set("None", Value::null());
  env.set(
      "namespace", Value::function([](Interp&, Args& args, Object* kw) {
        Value ns = Value::object(T::Namespace);
        if (args.size() > 1)
          fail(fmt::format("namespace() takes at most 1 positional argument, got {}", args.size()));
        if (args.size() == 1) {
          const Value& src = args[0];
          if (src.type == T::Object) {
            for (const auto& [k, v] : src.obj->items) ns.obj->set(k, v);
          } else if (src.type == T::Array) {
            for (const Value& pair : *src.arr) {
              if (pair.type != T::Array || pair.arr->size() != 2 || (*pair.arr)[0].type != T::Str)
                fail("namespace() expects a dict or a list of [key, value] pairs");
              ns.obj->set((*pair.arr)[0].s, (*pair.arr)[1]);
            }
          } else {
            fail(fmt::format("namespace() cannot take {}", a_type(src)));
          }
        }
        if (kw)
          for (const auto& [k, v] : kw->items) ns.obj->set(k, v);
        return ns;
      }));
  env.set("raise_exception", Value::function([](Interp&, Args& args, Object*) -> Value {
            std::string msg;
            for (size_t k = 0; k < args.size(); ++k) {
              if (k) msg += ',';
              msg += to_string(args[k]);
            }
            throw RenderError{msg, true};
          }));
  env.set("range", Value::function([](Interp& in, Args& args, Object*) {
            if (args.empty() || args.size() > 3) fail("range() takes 1 to 3 arguments");
            for (const Value& a : args)
              if (a.type != T::Int) fail("range() takes integers");
            int64_t start = 0, stop = args[0].i, step = 1;
            if (args.size() >= 2) start = args[0].i, stop = args[1].i;
            if (args.size() == 3) step = args[2].i;
            if (step == 0) fail("range() step must not be zero");
            const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                       static_cast<double>(step));
            const size_t count = n > 0 ? static_cast<size_t>(std::min(n, 1e18)) : 0;
            in.check_items(count);
            std::vector<Value> items;
            // start + k * step lies between start and stop: no overflow near the int64 ends.
            for (size_t k = 0; k < count; ++k)
              items.push_back(Value::integer(start + static_cast<int64_t>(k) * step));
            return Value::array(std::move(items));
          }));
  env.set("strftime_now", Value::function([](Interp& in, Args& args, Object*) {
            if (args.empty() || args[0].type != T::Str)
              fail("strftime_now() takes a format string");
            return Value::string(
                strftime_js(in.limits.now ? *in.limits.now : std::time(nullptr), args[0].s));
          }));
}

Value Interp::member(const Value& obj, const Value& prop) {
  if (obj.type == T::Object || obj.type == T::Namespace) {
    if (prop.type != T::Str)
      fail(fmt::format("cannot index {} with {}", a_type(obj), a_type(prop)));
    if (const Value* v = obj.obj->find(prop.s)) return *v;
    if (obj.type == T::Object && is_dict_method(prop.s)) {
      const std::string name = prop.s;
      return Value::function([obj, name](Interp&, Args& args, Object* kw) {
        return dict_method(obj, name, args, kw);
      });
    }
    return Value::undefined();
  }
  if (obj.type == T::Array || obj.type == T::Str) {
    if (prop.type == T::Int) {
      if (obj.type == T::Array) {
        const int64_t n = static_cast<int64_t>(obj.arr->size());
        const int64_t k = prop.i < 0 ? n + prop.i : prop.i;
        return k >= 0 && k < n ? (*obj.arr)[static_cast<size_t>(k)] : Value::undefined();
      }
      const auto cps = code_points(obj.s);
      const int64_t n = static_cast<int64_t>(cps.size());
      const int64_t k = prop.i < 0 ? n + prop.i : prop.i;
      return k >= 0 && k < n ? Value::string(cps[static_cast<size_t>(k)]) : Value::undefined();
    }
    if (prop.type != T::Str)
      fail(fmt::format("cannot index {} with {}", a_type(obj), a_type(prop)));
    if (prop.s == "length")
      return Value::integer(
          static_cast<int64_t>(obj.type == T::Array ? obj.arr->size() : utf16_length(obj.s)));
    if (obj.type == T::Str && is_string_method(prop.s)) {
      const std::string s = obj.s, name = prop.s;
      return Value::function([s, name](Interp& in, Args& args, Object* kw) {
        return string_method(in, s, name, args, kw);
      });
    }
    return Value::undefined();
  }
  if (prop.type != T::Str) fail(fmt::format("cannot index {} with {}", a_type(obj), a_type(prop)));
  return Value::undefined();
}

bool Interp::test(const std::string& name, const Value& v) {
  if (name == "boolean") return v.type == T::Bool;
  if (name == "callable") return v.type == T::Function;
  if (name == "odd" || name == "even") {
    if (v.type != T::Int) fail(fmt::format("cannot test whether {} is {}", a_type(v), name));
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "false") return v.type == T::Bool && !v.b;
  if (name == "true") return v.type == T::Bool && v.b;
  if (name == "none") return v.type == T::Null;
  if (name == "string") return v.type == T::Str;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.type == T::Int;
  if (name == "iterable") return (v.type == T::Array && !v.tuple) || v.type == T::Str;
  if (name == "mapping") return v.type == T::Object;
  if (name == "sequence") return v.type == T::Array || v.type == T::Object || v.type == T::Str;
  if (name == "lower") return v.type == T::Str && js_lower(v.s) == v.s;
  if (name == "upper") return v.type == T::Str && js_upper(v.s) == v.s;
  if (name == "defined") return v.type != T::Undefined;
  if (name == "undefined") return v.type == T::Undefined;
  if (name == "equalto" || name == "eq")
    return v.type == T::Undefined;  // no operand: === undefined
  fail(fmt::format("unknown test '{}'", name));
}

}  // namespace vkllm::tmpl::detail
