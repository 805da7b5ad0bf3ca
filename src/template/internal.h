// Internals of the chat-template interpreter: the AST, the runtime values and the helpers shared
// by the parser (parse.cpp), the interpreter (eval.cpp) and the built-in filters (builtins.cpp).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/template.h"

namespace vkllm::tmpl {

// ---- AST --------------------------------------------------------------------------------------
namespace detail {

enum class NK {
  // statements
  Text,
  If,
  For,
  Set,
  Macro,
  Break,
  Continue,
  Comment,
  // expressions
  Int,
  Float,
  Str,
  Ident,
  Array,
  Tuple,
  Object,
  Member,
  Call,
  Unary,
  Binary,
  Filter,
  Test,
  Select,
  Ternary,
  Slice,
  KwArg
};

struct Node {
  NK kind;
  uint32_t pos = 0;  // byte offset in the original template
  std::string str;   // text, identifier, string literal, operator, test/filter name
  int64_t i = 0;     // integer literal; Member: 1 = computed ([...]); Test: 1 = negated
  double f = 0;      // float literal
  // Children by kind:
  //   If: a[0] test; body; alt            For: a[0] target, a[1] iterable, a[2] filter or null;
  //   Set: a[0] target, a[1] value or null (then body)   Macro: a = parameters; body
  //   Array/Tuple: a = items   Object: a = key, value, key, value, ...   Member: a[0] obj, a[1]
  //   prop Call: a[0] callee, a[1..] args    Unary: a[0]   Binary: a[0], a[1]   Filter: a[0]
  //   operand, a[1] filter (Ident or Call)   Test: a[0]   Select: a[0] value, a[1] test Ternary:
  //   a[0] cond, a[1] then, a[2] else   Slice: a[0..2] (null when absent)   KwArg: a[0]
  std::vector<std::unique_ptr<Node>> a;
  std::vector<std::unique_ptr<Node>> body, alt;
};

using NodePtr = std::unique_ptr<Node>;

// Line and column (1-based, columns count bytes) of a byte offset.
std::pair<int, int> line_col(std::string_view source, size_t offset);

[[noreturn]] void syntax_error(std::string_view source, size_t offset, const std::string& msg);

std::vector<NodePtr> parse_template(std::string_view source);

}  // namespace detail

struct Template::Parsed {
  std::string source;
  std::vector<detail::NodePtr> body;
};

// ---- Runtime values ---------------------------------------------------------------------------
namespace detail {

enum class T { Undefined, Null, Bool, Int, Float, Str, Array, Object, Namespace, Function };

struct Value;
struct Interp;
using Args = std::vector<Value>;
struct Object;
using Fn = std::function<Value(Interp&, Args&, Object* kwargs)>;

struct Value {
  T type = T::Undefined;
  bool b = false;
  bool tuple = false;   // Array from a tuple expression (a, b)
  bool kwargs = false;  // Object holding keyword arguments
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<std::vector<Value>> arr;  // shared: lists and dicts are references, as in JS
  std::shared_ptr<Object> obj;              // Object and Namespace
  std::shared_ptr<Fn> fn;

  static Value undefined() { return {}; }
  static Value null() {
    Value v;
    v.type = T::Null;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.type = T::Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.type = T::Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.type = T::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.type = T::Str;
    v.s = std::move(x);
    return v;
  }
  static Value array(std::vector<Value> x = {});
  static Value object(T type = T::Object);
  static Value function(Fn f);

  bool truthy() const;
  bool is_number() const { return type == T::Int || type == T::Float; }
  double num() const { return type == T::Int ? static_cast<double>(i) : type == T::Bool ? b : f; }
};

struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

const char* type_name(const Value& v);
// The type with its article, for messages: "a string", "an integer", "none", "undefined".
std::string a_type(const Value& v);

// JavaScript's Number.prototype.toString (shortest round trip, exponent outside 1e-7..1e21).
std::string js_number(double x);
// What rendering {{ v }} writes (undefined and none never reach it: they render nothing).
std::string to_string(const Value& v);
// JavaScript's value.toString() of the underlying value, as `~` and string `+` use it.
std::string raw_string(const Value& v);

struct JsonOptions {
  int indent = 0;
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_sep, key_sep;
};
// tojson; undefined_as_null false: undefined writes `undefined` (how lists render).
void to_json(std::string& out, const Value& v, const JsonOptions& o, int depth,
             bool undefined_as_null, size_t max_bytes);

Value from_json(const nlohmann::ordered_json& j, int depth = 0);

// JavaScript's whitespace (String.prototype.trim, /\s/): its UTF-8 length at s[pos], or 0.
size_t js_space_at(std::string_view s, size_t pos);
std::string js_trim(std::string_view s, bool left, bool right);
std::string js_upper(std::string_view s);
std::string js_lower(std::string_view s);
// Code points of a UTF-8 string (invalid bytes stand for themselves).
std::vector<std::string> code_points(std::string_view s);

// Errors raised while rendering; Interp adds the position of the node being evaluated.
struct RenderError {
  std::string msg;
  bool raised = false;
};
[[noreturn]] inline void fail(std::string msg) {
  throw RenderError{std::move(msg), false};
}

struct Env {
  Env* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find_local(std::string_view name);
  Value lookup(std::string_view name);
  void set(const std::string& name, Value v);
};

// Nested evaluation frames (expressions inside expressions, macro calls inside those): far above
// what real templates need, low enough for the C++ stack under the sanitizers.
constexpr int kMaxEvalDepth = 400;

struct Interp {
  const Limits& limits;
  std::string_view source;
  uint64_t steps = 0;
  int call_depth = 0;
  int depth = 0;            // eval and exec frames on the C++ stack, bounded by kMaxEvalDepth
  Env* call_env = nullptr;  // the scope of the call being made (macros run in a child of it)

  void step();
  struct Frame {
    Interp& in;
    explicit Frame(Interp& i) : in(i) {
      if (++in.depth > kMaxEvalDepth) fail("template evaluation nested too deeply");
    }
    ~Frame() { --in.depth; }
  };
  void check_string(size_t n) const;
  void check_items(size_t n) const;

  Value eval(const Node& n, Env& env);
  // Runs a statement list, appending output. Returns 1 on break, 2 on continue, else 0.
  int exec(const std::vector<NodePtr>& body, Env& env, std::string& out);
  Value call_macro(const Node& macro, Args& args, Object* kwargs);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

  Value apply_filter(Value operand, const Node& filter, Env& env);
  Value member(const Value& obj, const Value& prop);
  bool test(const std::string& name, const Value& v);
  Value binary(const std::string& op, const Value& l, const Value& r);
  void eval_args(const Node& call, size_t first, Env& env, Args& args, std::shared_ptr<Object>& kw);

  // The position of the innermost node being evaluated, for error messages.
  uint32_t pos = 0;
};

void install_globals(Env& env);
bool loose_equal(const Value& a, const Value& b);
int compare_values(const Value& a, const Value& b, bool case_sensitive);
Value dict_method(const Value& d, const std::string& name, Args& args, Object* kwargs);
bool is_dict_method(const std::string& name);
Value attribute_path(const Value& item, const std::string& path);

}  // namespace detail
}  // namespace vkllm::tmpl
