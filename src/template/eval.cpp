// The interpreter: statements, expressions, operators and scoping as @huggingface/jinja has them
// (a for loop has its own scope, if does not; macros see the caller's variables), with the work
// bounded by Limits.
#include <fmt/format.h>

#include <cmath>

#include "template/internal.h"

namespace vkllm::tmpl {
namespace detail {

Value* Env::find_local(std::string_view name) {
  for (auto& kv : vars)
    if (kv.first == name) return &kv.second;
  return nullptr;
}
Value Env::lookup(std::string_view name) {
  for (Env* e = this; e; e = e->parent)
    if (Value* v = e->find_local(name)) return *v;
  return Value::undefined();
}
void Env::set(const std::string& name, Value v) {
  if (Value* old = find_local(name)) {
    *old = std::move(v);
    return;
  }
  vars.emplace_back(name, std::move(v));
}

void Interp::step() {
  if (++steps > limits.max_steps)
    fail(fmt::format("template exceeded the step limit ({} statements, iterations and calls)",
                     limits.max_steps));
}
void Interp::check_string(size_t n) const {
  if (n > limits.max_output)
    fail(
        fmt::format("template built a string longer than the limit ({} bytes)", limits.max_output));
}
void Interp::check_items(size_t n) const {
  if (n > limits.max_items)
    fail(fmt::format("template built a list longer than the limit ({} items)", limits.max_items));
}

namespace {

// Assigns a loop or set target: a name, or names unpacked from a list.
void assign(const Node& target, const Value& v, Env& env, const char* what) {
  if (target.kind == NK::Ident) {
    env.set(target.str, v);
    return;
  }
  if (target.kind != NK::Tuple) fail(fmt::format("cannot assign to this expression in {}", what));
  if (v.type != T::Array || v.tuple) fail(fmt::format("cannot unpack {} in {}", a_type(v), what));
  if (v.arr->size() != target.a.size())
    fail(fmt::format("too {} values to unpack in {} (expected {}, got {})",
                     target.a.size() > v.arr->size() ? "few" : "many", what, target.a.size(),
                     v.arr->size()));
  for (size_t k = 0; k < target.a.size(); ++k) {
    if (target.a[k]->kind != NK::Ident)
      fail(fmt::format("cannot unpack to an expression in {}", what));
    env.set(target.a[k]->str, (*v.arr)[k]);
  }
}

}  // namespace

int Interp::exec(const std::vector<NodePtr>& body, Env& env, std::string& out) {
  Frame frame(*this);
  for (const auto& st : body) {
    const Node& n = *st;
    step();
    pos = n.pos;
    switch (n.kind) {
      case NK::Text:
        out += n.str;
        break;
      case NK::Comment:
        break;
      case NK::Break:
        return 1;
      case NK::Continue:
        return 2;
      case NK::If: {
        const bool yes = eval(*n.a[0], env).truthy();
        if (int flow = exec(yes ? n.body : n.alt, env, out)) return flow;
        break;
      }
      case NK::Set: {
        Value rhs;
        if (n.a[1]) {
          rhs = eval(*n.a[1], env);
        } else {
          std::string text;
          if (int flow = exec(n.body, env, text)) return flow;
          rhs = Value::string(std::move(text));
        }
        pos = n.pos;
        const Node& target = *n.a[0];
        if (target.kind == NK::Member) {
          const Value obj = eval(*target.a[0], env);
          if (obj.type != T::Namespace)
            fail("cannot set an attribute of something that is not a namespace");
          if (target.i || target.a[1]->kind != NK::Ident) fail("cannot set a computed attribute");
          obj.obj->set(target.a[1]->str, rhs);
        } else {
          assign(target, rhs, env, "set");
        }
        break;
      }
      case NK::For: {
        Env scope{&env, {}};
        Value iter = eval(*n.a[1], scope);
        if (iter.type == T::Object) {
          std::vector<Value> keys;
          for (const auto& kv : iter.obj->items) keys.push_back(Value::string(kv.first));
          iter = Value::array(std::move(keys));
        }
        if (iter.type != T::Array)
          fail(fmt::format("cannot loop over {} (a list or a dict is needed)", a_type(iter)));
        std::vector<Value> items;
        for (const Value& item : *iter.arr) {
          step();
          if (n.a[2]) {
            Env test_scope{&scope, {}};
            assign(*n.a[0], item, test_scope, "a for loop");
            if (!eval(*n.a[2], test_scope).truthy()) continue;
          }
          items.push_back(item);
        }
        bool none = true;
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t k = 0; k < len; ++k) {
          step();
          Value loop = Value::object();
          auto& li = loop.obj->items;
          li.emplace_back("index", Value::integer(k + 1));
          li.emplace_back("index0", Value::integer(k));
          li.emplace_back("revindex", Value::integer(len - k));
          li.emplace_back("revindex0", Value::integer(len - k - 1));
          li.emplace_back("first", Value::boolean(k == 0));
          li.emplace_back("last", Value::boolean(k == len - 1));
          li.emplace_back("length", Value::integer(len));
          li.emplace_back("previtem",
                          k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined());
          li.emplace_back("nextitem",
                          k < len - 1 ? items[static_cast<size_t>(k + 1)] : Value::undefined());
          scope.set("loop", std::move(loop));
          pos = n.pos;
          assign(*n.a[0], items[static_cast<size_t>(k)], scope, "a for loop");
          const int flow = exec(n.body, scope, out);
          if (flow == 1) {
            none = false;
            break;
          }
          if (flow == 2)
            continue;  // as in @huggingface/jinja, a continued iteration counts as none
          none = false;
        }
        if (none)
          if (int flow = exec(n.alt, scope, out)) return flow;
        break;
      }
      case NK::Macro: {
        const Node* m = &n;
        env.set(n.str, Value::function([m](Interp& in, Args& args, Object* kw) -> Value {
                  return in.call_macro(*m, args, kw);
                }));
        break;
      }
      default: {
        const Value v = eval(n, env);
        if (v.type != T::Undefined && v.type != T::Null) out += to_string(v);
      }
    }
    if (out.size() > limits.max_output)
      fail(fmt::format("template output longer than the limit ({} bytes)", limits.max_output));
  }
  return 0;
}

Value Interp::call_macro(const Node& m, Args& args, Object* kw) {
  if (++call_depth > limits.max_call_depth)
    fail(fmt::format("macro calls nested deeper than {}", limits.max_call_depth));
  // Macros see the variables of the place they are called from (their scope's parent is the
  // caller's scope), as in @huggingface/jinja; the interpreter passes it in call_env.
  Env scope{call_env, {}};
  std::vector<std::pair<std::string, const Node*>> defaults;
  std::vector<std::pair<std::string, Value>> kwargs = kw ? kw->items : decltype(kwargs){};
  for (size_t k = 0; k < m.a.size(); ++k) {
    const Node& p = *m.a[k];
    Value v;
    bool have = k < args.size();
    if (have) v = args[k];
    if (!have) {
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
        if (it->first == p.str) {
          v = it->second;
          kwargs.erase(it);
          have = true;
          break;
        }
    }
    if (!have && p.kind == NK::KwArg) defaults.emplace_back(p.str, p.a[0].get());
    scope.set(p.str, v);
  }
  if (!kwargs.empty())
    fail(fmt::format("macro '{}' takes no keyword argument '{}'", m.str, kwargs.front().first));
  if (args.size() > m.a.size())
    fail(fmt::format("macro '{}' takes at most {} argument(s)", m.str, m.a.size()));
  for (const auto& [name, expr] : defaults) scope.set(name, eval(*expr, scope));
  std::string out;
  exec(m.body, scope, out);
  --call_depth;
  return Value::string(std::move(out));
}

void Interp::eval_args(const Node& call, size_t first, Env& env, Args& args,
                       std::shared_ptr<Object>& kw) {
  for (size_t k = first; k < call.a.size(); ++k)
    if (call.a[k]->kind != NK::KwArg) args.push_back(eval(*call.a[k], env));
  for (size_t k = first; k < call.a.size(); ++k) {
    const Node& a = *call.a[k];
    if (a.kind != NK::KwArg) continue;
    if (!kw) kw = std::make_shared<Object>();
    if (kw->find(a.str)) fail(fmt::format("got multiple values for keyword argument '{}'", a.str));
    kw->items.emplace_back(a.str, eval(*a.a[0], env));
  }
}

Value Interp::eval(const Node& n, Env& env) {
  Frame frame(*this);
  pos = n.pos;
  switch (n.kind) {
    case NK::Int:
      return Value::integer(n.i);
    case NK::Float:
      return Value::number(n.f);
    case NK::Str:
      return Value::string(n.str);
    case NK::Ident:
      return env.lookup(n.str);
    case NK::Array:
    case NK::Tuple: {
      std::vector<Value> items;
      for (const auto& e : n.a) items.push_back(eval(*e, env));
      Value v = Value::array(std::move(items));
      v.tuple = n.kind == NK::Tuple;
      return v;
    }
    case NK::Object: {
      Value v = Value::object();
      for (size_t k = 0; k + 1 < n.a.size(); k += 2) {
        const Value key = eval(*n.a[k], env);
        if (key.type != T::Str) fail(fmt::format("dict keys must be strings, got {}", a_type(key)));
        v.obj->set(key.s, eval(*n.a[k + 1], env));
      }
      return v;
    }
    case NK::Member: {
      const Value obj = eval(*n.a[0], env);
      const Node& p = *n.a[1];
      if (p.kind == NK::Slice) {
        Value idx[3];
        for (int k = 0; k < 3; ++k) {
          if (p.a[static_cast<size_t>(k)]) idx[k] = eval(*p.a[static_cast<size_t>(k)], env);
          if (idx[k].type != T::Int && idx[k].type != T::Undefined)
            fail("slice bounds must be integers");
        }
        pos = n.pos;
        return slice(obj, idx[0], idx[1], idx[2]);
      }
      Value prop;
      if (n.i)
        prop = eval(p, env);
      else if (p.kind == NK::Int)
        prop = Value::integer(p.i);
      else
        prop = Value::string(p.str);
      pos = n.pos;
      return member(obj, prop);
    }
    case NK::Call: {
      Args args;
      std::shared_ptr<Object> kw;
      eval_args(n, 1, env, args, kw);
      const Value fn = eval(*n.a[0], env);
      pos = n.pos;
      if (fn.type != T::Function) fail(fmt::format("cannot call {}", a_type(fn)));
      step();
      Env* saved = call_env;
      call_env = &env;
      Value r = (*fn.fn)(*this, args, kw.get());
      call_env = saved;
      return r;
    }
    case NK::Unary: {
      const Value v = eval(*n.a[0], env);
      pos = n.pos;
      if (n.str == "not") return Value::boolean(!v.truthy());
      if (v.type != T::Int && v.type != T::Float && v.type != T::Bool)
        fail(fmt::format("unary {} needs a number, got {}", n.str, a_type(v)));
      const bool neg = n.str == "-";
      if (v.type == T::Float) return Value::number(neg ? -v.f : v.f);
      const int64_t x = v.type == T::Bool ? v.b : v.i;
      if (neg && x == INT64_MIN) fail("integer overflow");
      return Value::integer(neg ? -x : x);
    }
    case NK::Binary: {
      const Value l = eval(*n.a[0], env);
      if (n.str == "and") return l.truthy() ? eval(*n.a[1], env) : l;
      if (n.str == "or") return l.truthy() ? l : eval(*n.a[1], env);
      const Value r = eval(*n.a[1], env);
      pos = n.pos;
      return binary(n.str, l, r);
    }
    case NK::Filter:
      return apply_filter(eval(*n.a[0], env), *n.a[1], env);
    case NK::Test: {
      const Value v = eval(*n.a[0], env);
      pos = n.pos;
      const bool r = test(n.str, v);
      return Value::boolean(n.i ? !r : r);
    }
    case NK::Select:
      if (!eval(*n.a[1], env).truthy()) return Value::undefined();
      return eval(*n.a[0], env);
    case NK::Ternary:
      return eval(*n.a[0], env).truthy() ? eval(*n.a[1], env) : eval(*n.a[2], env);
    default:
      fail("this statement cannot be used as an expression");
  }
}

Value Interp::slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (obj.type != T::Array && obj.type != T::Str) fail(fmt::format("cannot slice {}", a_type(obj)));
  std::vector<std::string> chars;
  if (obj.type == T::Str) chars = code_points(obj.s);
  const int64_t len = obj.type == T::Array ? static_cast<int64_t>(obj.arr->size())
                                           : static_cast<int64_t>(chars.size());
  const int64_t stp = step_v.type == T::Int ? step_v.i : 1;
  if (stp == 0) fail("slice step cannot be zero");
  int64_t b, e;
  if (stp > 0) {
    b = start.type != T::Int ? 0
        : start.i < 0        ? std::max(len + start.i, int64_t{0})
                             : std::min(start.i, len);
    e = stop.type != T::Int ? len
        : stop.i < 0        ? std::max(len + stop.i, int64_t{0})
                            : std::min(stop.i, len);
  } else {
    b = start.type != T::Int ? len - 1
        : start.i < 0        ? std::max(len + start.i, int64_t{-1})
                             : std::min(start.i, len - 1);
    e = stop.type != T::Int ? -1
        : stop.i < -1       ? std::max(len + stop.i, int64_t{-1})
                            : std::min(stop.i, len - 1);
  }
  std::vector<Value> items;
  std::string text;
  const int64_t dir = stp > 0 ? 1 : -1;
  for (int64_t k = b; dir * k < dir * e;) {
    if (obj.type == T::Array)
      items.push_back((*obj.arr)[static_cast<size_t>(k)]);
    else
      text += chars[static_cast<size_t>(k)];
    if (__builtin_add_overflow(k, stp, &k)) break;  // a huge step: past the end
  }
  if (obj.type == T::Array) return Value::array(std::move(items));
  return Value::string(std::move(text));
}

bool loose_equal(const Value& a, const Value& b) {
  // JavaScript's == on the underlying values: null and undefined equal each other; numbers,
  // booleans and numeric strings compare as numbers; lists and dicts by identity.
  const bool an = a.type == T::Undefined || a.type == T::Null;
  const bool bn = b.type == T::Undefined || b.type == T::Null;
  if (an || bn) return an && bn;
  if (a.type == T::Str && b.type == T::Str) return a.s == b.s;
  auto numeric = [](const Value& v, double& out) {
    if (v.type == T::Int || v.type == T::Float || v.type == T::Bool) {
      out = v.num();
      return true;
    }
    if (v.type == T::Str) {
      const std::string t = js_trim(v.s, true, true);
      if (t.empty()) {
        out = 0;
        return true;
      }
      char* end = nullptr;
      out = std::strtod(t.c_str(), &end);
      return end == t.c_str() + t.size();
    }
    return false;
  };
  double x = 0, y = 0;
  const bool scalar_a =
      a.type != T::Array && a.type != T::Object && a.type != T::Namespace && a.type != T::Function;
  const bool scalar_b =
      b.type != T::Array && b.type != T::Object && b.type != T::Namespace && b.type != T::Function;
  if (scalar_a && scalar_b) return numeric(a, x) && numeric(b, y) && x == y;
  if (a.type != b.type) return false;
  if (a.type == T::Array) return a.arr == b.arr;
  if (a.type == T::Function) return a.fn == b.fn;
  return a.obj == b.obj;
}

Value Interp::binary(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::boolean(loose_equal(l, r));
  if (op == "!=") return Value::boolean(!loose_equal(l, r));
  if (l.type == T::Undefined || r.type == T::Undefined) {
    if (r.type == T::Undefined && (op == "in" || op == "not in"))
      return Value::boolean(op == "not in");
    fail(fmt::format("cannot apply '{}' to an undefined value", op));
  }
  if (l.type == T::Null || r.type == T::Null) fail(fmt::format("cannot apply '{}' to none", op));
  if (op == "~") {
    std::string s = raw_string(l) + raw_string(r);
    check_string(s.size());
    return Value::string(std::move(s));
  }
  const bool ln = l.is_number() || l.type == T::Bool, rn = r.is_number() || r.type == T::Bool;
  if (op == "**" && ln && rn) {
    const double a = l.num(), b = r.num();
    if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
    const double res = std::pow(a, b);
    if (!std::isfinite(res)) fail("exponentiation result is not a finite number");
    if (l.type == T::Float || r.type == T::Float || b < 0) return Value::number(res);
    if (std::fabs(res) >= 9.2e18) fail("integer overflow");
    return Value::integer(static_cast<int64_t>(res));
  }
  if (l.is_number() && r.is_number()) {
    const bool flt = l.type == T::Float || r.type == T::Float;
    if (op == "<") return Value::boolean(l.num() < r.num());
    if (op == ">") return Value::boolean(l.num() > r.num());
    if (op == "<=") return Value::boolean(l.num() <= r.num());
    if (op == ">=") return Value::boolean(l.num() >= r.num());
    if (op == "/") {
      if (!flt && r.i == 0) return Value::number(l.i == 0 ? NAN : l.i > 0 ? INFINITY : -INFINITY);
      return Value::number(l.num() / r.num());
    }
    if (flt) {
      const double a = l.num(), b = r.num();
      if (op == "+") return Value::number(a + b);
      if (op == "-") return Value::number(a - b);
      if (op == "*") return Value::number(a * b);
      if (op == "//") return Value::number(std::floor(a / b));
      if (op == "%") return Value::number(std::fmod(a, b));
    } else {
      int64_t res = 0;
      const int64_t a = l.i, b = r.i;
      bool over = false;
      if (op == "+")
        over = __builtin_add_overflow(a, b, &res);
      else if (op == "-")
        over = __builtin_sub_overflow(a, b, &res);
      else if (op == "*")
        over = __builtin_mul_overflow(a, b, &res);
      else if (op == "//" || op == "%") {
        if (b == 0) fail(op == "//" ? "integer division by zero" : "integer modulo by zero");
        if (a == INT64_MIN && b == -1) fail("integer overflow");
        if (op == "//") {
          res = a / b;
          if ((a % b != 0) && ((a < 0) != (b < 0))) --res;  // floor, as Math.floor(a / b)
        } else {
          res = a % b;  // JavaScript's %: the sign of the dividend
        }
      }
      if (over) fail("integer overflow");
      return Value::integer(res);
    }
  }
  if (l.type == T::Array && r.type == T::Array) {
    if (op == "+") {
      check_items(l.arr->size() + r.arr->size());
      std::vector<Value> items = *l.arr;
      items.insert(items.end(), r.arr->begin(), r.arr->end());
      return Value::array(std::move(items));
    }
  } else if (r.type == T::Array && (op == "in" || op == "not in")) {
    bool found = false;
    for (const Value& e : *r.arr) {
      // Array.prototype.find with ===: primitives by value (1 and 1.0 are the same number).
      if (e.type == l.type || (e.is_number() && l.is_number())) {
        if (e.type == T::Str        ? e.s == l.s
            : e.is_number()         ? e.num() == l.num()
            : e.type == T::Bool     ? e.b == l.b
            : e.type == T::Array    ? e.arr == l.arr
            : e.type == T::Function ? e.fn == l.fn
                                    : e.obj == l.obj) {
          found = true;
          break;
        }
      }
    }
    return Value::boolean(op == "in" ? found : !found);
  }
  if ((l.type == T::Str || r.type == T::Str) && op == "+") {
    std::string s = raw_string(l) + raw_string(r);
    check_string(s.size());
    return Value::string(std::move(s));
  }
  if (l.type == T::Str && r.type == T::Str && (op == "in" || op == "not in")) {
    const bool found = r.s.find(l.s) != std::string::npos;
    return Value::boolean(op == "in" ? found : !found);
  }
  if (l.type == T::Str && r.type == T::Object && (op == "in" || op == "not in")) {
    const bool found = r.obj->find(l.s) != nullptr;
    return Value::boolean(op == "in" ? found : !found);
  }
  fail(fmt::format("unsupported operator '{}' between {} and {}", op, a_type(l), a_type(r)));
}

}  // namespace detail

Template Template::parse(std::string_view source) {
  auto p = std::make_shared<Parsed>();
  p->source = std::string(source);
  p->body = detail::parse_template(p->source);
  Template t;
  t.parsed_ = std::move(p);
  return t;
}

std::string Template::render(const nlohmann::json& context, const Limits& limits) const {
  return render(nlohmann::ordered_json::parse(context.dump()), limits);
}

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  using namespace detail;
  Interp in{limits, parsed_->source};
  auto position_error = [&](const std::string& msg, bool raised) {
    auto [l, c] = line_col(parsed_->source, in.pos);
    std::string one_line = msg;
    for (char& ch : one_line)
      if (ch == '\n' || ch == '\r') ch = ' ';
    const std::string what =
        raised
            ? fmt::format("template raised an exception at line {}, column {}: {}", l, c, one_line)
            : fmt::format("template error at line {}, column {}: {}", l, c, one_line);
    return TemplateError(what, msg, raised);
  };
  try {
    Env globals;
    install_globals(globals);
    if (!context.is_object() && !context.is_null()) fail("the context must be a JSON object");
    if (context.is_object()) {
      const Value ctx = from_json(context);
      for (const auto& [key, v] : ctx.obj->items) {
        if (globals.find_local(key))
          fail(fmt::format("the context redefines the global '{}'", key));
        globals.vars.emplace_back(key, v);
      }
    }
    std::string out;
    in.exec(parsed_->body, globals, out);
    return out;
  } catch (const RenderError& e) {
    throw position_error(e.msg, e.raised);
  } catch (const std::bad_alloc&) {
    throw position_error("out of memory", false);
  }
}

}  // namespace vkllm::tmpl
