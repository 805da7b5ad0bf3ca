// Filters (value | name, value | name(args)) with @huggingface/jinja's behaviour: which filters
// each type of value takes, their arguments and their errors.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "template/internal.h"

namespace vkllm::tmpl::detail {
namespace {

Value kw_or(const Args& args, size_t k, const std::shared_ptr<Object>& kw, const char* name,
            Value def) {
  if (k < args.size()) return args[k];
  if (kw)
    if (const Value* v = kw->find(name)) return *v;
  return def;
}

// The value JavaScript's Array.prototype.join writes for an element's underlying value.
std::string join_piece(const Value& v) {
  if (v.type == T::Undefined || v.type == T::Null) return "";
  return raw_string(v);
}

std::string indent_lines(const std::string& s, int64_t width, bool first, bool blank) {
  const std::string pad(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  std::string out;
  size_t at = 0, line = 0;
  while (true) {
    const size_t nl = s.find('\n', at);
    const std::string part = s.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!((!first && line == 0) || (!blank && part.empty()))) out += pad;
    out += part;
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
    ++line;
  }
  return out;
}

// parseInt(s, 10) and parseFloat(s): the longest numeric prefix after leading whitespace.
bool js_parse_number(const std::string& s, bool integer, double& out) {
  const std::string t = js_trim(s, true, false);
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  const size_t digits_start = i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  size_t end = i;
  if (!integer) {
    if (t.compare(digits_start, 8, "Infinity") == 0) {
      out = t[0] == '-' ? -INFINITY : INFINITY;
      return true;
    }
    if (i < t.size() && t[i] == '.') {
      ++i;
      while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
      if (i > digits_start + 1) end = i;
    }
    if (end > digits_start && end < t.size() && (t[end] == 'e' || t[end] == 'E')) {
      size_t j = end + 1;
      if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
      const size_t exp_start = j;
      while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j;
      if (j > exp_start) end = j;
    }
  }
  if (end == digits_start || (end == digits_start + 1 && t[digits_start] == '.')) return false;
  out = std::strtod(t.substr(0, end).c_str(), nullptr);
  if (integer) out = std::trunc(out);
  return true;
}

Value to_int(double d) {
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) fail("integer out of range");
  return Value::integer(static_cast<int64_t>(d));
}

}  // namespace

Value Interp::apply_filter(Value v, const Node& f, Env& env) {
  const bool called = f.kind == NK::Call;
  const std::string& name = called ? f.a[0]->str : f.str;
  pos = f.pos;
  if (called && f.a[0]->kind != NK::Ident) fail("a filter must be a name");
  Args args;
  std::shared_ptr<Object> kw;
  if (called) eval_args(f, 1, env, args, kw);
  pos = f.pos;
  auto no_filter = [&]() -> Value {
    fail(fmt::format("unknown filter '{}' for {}", name, a_type(v)));
  };

  if (name == "safe" && !called) return v;
  if (name == "tojson") {
    JsonOptions o;
    if (called) {
      const Value indent = kw_or({}, 0, kw, "indent", Value::null());
      if (indent.type != T::Int && indent.type != T::Null)
        fail("tojson(): indent must be an integer");
      if (indent.type == T::Int) {
        if (indent.i < 0 || indent.i > 64) fail("tojson(): indent out of range");
        o.indent = static_cast<int>(indent.i);
      }
      const Value ascii = kw_or({}, 0, kw, "ensure_ascii", Value::boolean(false));
      const Value sort = kw_or({}, 0, kw, "sort_keys", Value::boolean(false));
      if (ascii.type != T::Bool || sort.type != T::Bool)
        fail("tojson(): ensure_ascii and sort_keys must be booleans");
      o.ensure_ascii = ascii.b;
      o.sort_keys = sort.b;
      const Value seps = kw_or({}, 0, kw, "separators", Value::null());
      if (seps.type == T::Array) {
        if (seps.arr->size() != 2 || (*seps.arr)[0].type != T::Str || (*seps.arr)[1].type != T::Str)
          fail("tojson(): separators must be a tuple of two strings");
        o.custom_separators = true;
        o.item_sep = (*seps.arr)[0].s;
        o.key_sep = (*seps.arr)[1].s;
      } else if (seps.type != T::Null) {
        fail("tojson(): separators must be a tuple of two strings");
      }
    }
    std::string out;
    to_json(out, v, o, 0, true, limits.max_output);
    check_string(out.size());
    return Value::string(std::move(out));
  }
  if (called && name == "join") {
    std::vector<std::string> pieces;
    if (v.type == T::Str)
      pieces = code_points(v.s);
    else if (v.type == T::Array)
      for (const Value& e : *v.arr) pieces.push_back(join_piece(e));
    else
      fail(fmt::format("cannot apply filter 'join' to {}", a_type(v)));
    const Value sep = kw_or(args, 0, kw, "separator", Value::string(""));
    if (sep.type != T::Str) fail("join(): the separator must be a string");
    std::string out;
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (k) out += sep.s;
      out += pieces[k];
      check_string(out.size());
    }
    return Value::string(std::move(out));
  }
  if (called && (name == "int" || name == "float")) {
    const bool is_int = name == "int";
    const Value def = kw_or(args, 0, kw, "default", is_int ? Value::integer(0) : Value::number(0));
    if (v.type == T::Str) {
      double d = 0;
      if (!js_parse_number(v.s, is_int, d)) return def;
      return is_int ? to_int(d) : Value::number(d);
    }
    if (v.is_number()) return v;
    if (v.type == T::Bool) return is_int ? Value::integer(v.b) : Value::number(v.b);
    fail(fmt::format("cannot apply filter '{}' to {}", name, a_type(v)));
  }
  if (called && name == "default") {
    const Value def = args.size() > 0 ? args[0] : Value::string("");
    const Value boolean = kw_or(args, 1, kw, "boolean", Value::boolean(false));
    if (boolean.type != T::Bool) fail("default(): the boolean flag must be a boolean");
    if (v.type == T::Undefined || (boolean.b && !v.truthy())) return def;
    return v;
  }

  if (v.type == T::Array) {
    const auto& items = *v.arr;
    if (!called) {
      if (name == "list") return v;
      if (name == "first") return items.empty() ? Value::undefined() : items.front();
      if (name == "last") return items.empty() ? Value::undefined() : items.back();
      if (name == "length") return Value::integer(static_cast<int64_t>(items.size()));
      if (name == "reverse") return Value::array(std::vector<Value>(items.rbegin(), items.rend()));
      if (name == "sort") {
        std::vector<Value> sorted = items;
        std::stable_sort(sorted.begin(), sorted.end(), [](const Value& a, const Value& b) {
          return compare_values(a, b, false) < 0;
        });
        return Value::array(std::move(sorted));
      }
      if (name == "join") {
        std::string out;
        for (const Value& e : items) {
          out += join_piece(e);
          check_string(out.size());
        }
        return Value::string(std::move(out));
      }
      if (name == "string") {
        std::string out;
        to_json(out, v, {}, 0, false, limits.max_output);
        return Value::string(std::move(out));
      }
      if (name == "unique") {
        std::vector<Value> out;
        for (const Value& e : items) {
          bool seen = false;
          for (const Value& o : out)
            if (o.type == e.type && loose_equal(o, e)) seen = true;
          if (!seen) out.push_back(e);
        }
        return Value::array(std::move(out));
      }
      return no_filter();
    }
    if (name == "sort") {
      const Value rev = kw_or(args, 0, kw, "reverse", Value::boolean(false));
      const Value cs = kw_or(args, 1, kw, "case_sensitive", Value::boolean(false));
      if (rev.type != T::Bool || cs.type != T::Bool)
        fail("sort(): reverse and case_sensitive must be booleans");
      const Value attr = kw_or(args, 2, kw, "attribute", Value::null());
      if (attr.type != T::Str && attr.type != T::Int && attr.type != T::Null)
        fail("sort(): attribute must be a string, an integer or none");
      auto key = [&](const Value& item) {
        if (attr.type == T::Null) return item;
        return attribute_path(item, attr.type == T::Int ? std::to_string(attr.i) : attr.s);
      };
      std::vector<Value> sorted = items;
      std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
        const int c = compare_values(key(a), key(b), cs.b);
        return rev.b ? c > 0 : c < 0;
      });
      return Value::array(std::move(sorted));
    }
    if (name == "selectattr" || name == "rejectattr") {
      const bool select = name == "selectattr";
      for (const Value& e : items)
        if (e.type != T::Object && e.type != T::Namespace)
          fail(fmt::format("{} applies to a list of dicts only", name));
      for (size_t k = 1; k < f.a.size(); ++k)
        if (f.a[k]->kind != NK::Str) fail(fmt::format("the arguments of {} must be strings", name));
      if (args.empty()) fail(fmt::format("{} needs an attribute name", name));
      std::vector<Value> out;
      for (const Value& e : items) {
        const Value* a = e.obj->find(args[0].s);
        bool r = false;
        if (a) {
          if (args.size() < 2) {
            r = a->truthy();
          } else if (args[1].s == "equalto" || args[1].s == "eq") {
            // === on the underlying values
            const Value b = args.size() > 2 ? args[2] : Value::undefined();
            r = (a->type == b.type || (a->is_number() && b.is_number())) && loose_equal(*a, b);
          } else {
            r = test(args[1].s, *a);
          }
        }
        if (r == select) out.push_back(e);
      }
      return Value::array(std::move(out));
    }
    if (name == "map") {
      const Value attr =
          kw ? kw_or({}, 0, kw, "attribute", Value::undefined()) : Value::undefined();
      if (attr.type == T::Undefined) fail("map() without attribute= is not supported");
      if (attr.type != T::Str) fail("map(): attribute must be a string");
      const Value def = kw_or({}, 0, kw, "default", Value::undefined());
      std::vector<Value> out;
      for (const Value& e : items) {
        if (e.type != T::Object && e.type != T::Namespace) fail("map(): the items must be dicts");
        Value a = attribute_path(e, attr.s);
        out.push_back(a.type == T::Undefined ? def : a);
      }
      return Value::array(std::move(out));
    }
    return no_filter();
  }

  if (v.type == T::Str) {
    if (!called) {
      if (name == "length" || name == "upper" || name == "lower" || name == "title" ||
          name == "capitalize") {
        Value m = member(v, Value::string(name));
        if (m.type == T::Int) return m;
        Args none;
        return (*m.fn)(*this, none, nullptr);
      }
      if (name == "trim") return Value::string(js_trim(v.s, true, true));
      if (name == "indent") return Value::string(indent_lines(v.s, 4, false, false));
      if (name == "join" || name == "string") return v;
      if (name == "int" || name == "float") {
        double d = 0;
        if (!js_parse_number(v.s, name == "int", d)) d = 0;
        return name == "int" ? to_int(d) : Value::number(d);
      }
      return no_filter();
    }
    if (name == "indent") {
      const Value width = kw_or(args, 0, kw, "width", Value::integer(4));
      if (width.type != T::Int) fail("indent(): width must be an integer");
      if (width.i > 1024) fail("indent(): width out of range");
      const Value first = kw_or(args, 1, kw, "first", Value::boolean(false));
      const Value blank = kw_or(args, 2, kw, "blank", Value::boolean(false));
      std::string out = indent_lines(v.s, width.i, first.truthy(), blank.truthy());
      check_string(out.size());
      return Value::string(std::move(out));
    }
    if (name == "replace") {
      Value m = member(v, Value::string("replace"));
      return (*m.fn)(*this, args, kw.get());
    }
    return no_filter();
  }

  if (v.is_number()) {
    if (called) fail(fmt::format("cannot apply filter '{}' to {}", name, a_type(v)));
    if (name == "abs") {
      if (v.type == T::Float) return Value::number(std::fabs(v.f));
      if (v.i == INT64_MIN) fail("integer overflow");
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (name == "int") return v.type == T::Int ? v : to_int(std::floor(v.f));
    if (name == "float") return Value::number(v.num());
    if (name == "string") return Value::string(to_string(v));
    return no_filter();
  }

  if (v.type == T::Object) {
    if (!called && name == "length")
      return Value::integer(static_cast<int64_t>(v.obj->items.size()));
    if (is_dict_method(name)) return dict_method(v, name, args, kw.get());
    return no_filter();
  }

  if (v.type == T::Bool && !called) {
    if (name == "bool") return v;
    if (name == "int") return Value::integer(v.b);
    if (name == "float") return Value::number(v.b);
    if (name == "string") return Value::string(v.b ? "true" : "false");
    return no_filter();
  }
  fail(fmt::format("cannot apply filter '{}' to {}", name, a_type(v)));
}

}  // namespace vkllm::tmpl::detail
