// JSON schema -> grammar nodes (internal.h). Each schema object becomes one node (a union of
// types becomes an AnyOf of one node per type); $ref to local $defs/definitions compiles its
// target once, so recursive schemas make cyclic node graphs. Afterwards every node's shortest
// serialization is found by a fixpoint; a node without one is a schema no value satisfies.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "grammar/internal.h"

namespace vkllm::grammar {

using nlohmann::json;

namespace {

// Schema keys come from the request: control bytes are shown escaped so the error stays one line.
std::string schema_one_line(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    if (b == '\n') {
      out += "\\n";
    } else if (b < 0x20 || b == 0x7f) {
      out += fmt::format("\\x{:02x}", b);
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

SchemaError::SchemaError(std::string keyword, std::string path, const std::string& why)
    : Error(fmt::format("unsupported JSON schema: '{}' at {}: {}", schema_one_line(keyword),
                        schema_one_line(path.empty() ? "#" : "#" + path), schema_one_line(why))),
      keyword_(std::move(keyword)),
      path_(std::move(path)) {}

Grammar::Grammar(std::unique_ptr<Compiled> c) : c_(std::move(c)) {}
Grammar::~Grammar() = default;
int Grammar::min_length() const {
  return c_->nodes[static_cast<size_t>(c_->root)].min_bytes;
}

int32_t LiteralTrie::insert(const std::string& s, int32_t t) {
  int32_t at = 0;
  for (char ch : s) {
    const uint8_t b = static_cast<uint8_t>(ch);
    int32_t c = child(at, b);
    if (c < 0) {
      c = static_cast<int32_t>(n.size());
      N node;
      node.depth = n[static_cast<size_t>(at)].depth + 1;
      n.push_back(std::move(node));
      n[static_cast<size_t>(at)].next.emplace_back(b, c);
    }
    at = c;
  }
  if (n[static_cast<size_t>(at)].term < 0) n[static_cast<size_t>(at)].term = t;
  return at;
}

void LiteralTrie::finish() {
  // Children always have higher indices than their parent: one pass from the back.
  for (size_t i = n.size(); i-- > 0;) {
    N& x = n[i];
    int32_t best = x.term >= 0 ? 0 : kInf;
    for (const auto& [b, c] : x.next) {
      best = std::min(best, n[static_cast<size_t>(c)].min_rest + 1);
      x.props |= n[static_cast<size_t>(c)].props;
    }
    x.min_rest = best;
    std::sort(x.next.begin(), x.next.end());
  }
}

namespace {

void set_first(Node& n, uint8_t b) {
  n.first[b >> 6] |= uint64_t{1} << (b & 63);
}

const std::set<std::string> kAnnotations = {"title",    "description", "$schema",  "$id",
                                            "$comment", "default",     "examples", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
const std::set<std::string> kKnown = {"type",
                                      "enum",
                                      "const",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "minItems",
                                      "maxItems",
                                      "minLength",
                                      "maxLength",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref"};

class Compiler {
 public:
  Compiler(const json& root, const SchemaLimits& lim) : root_(root), lim_(lim) {}

  std::unique_ptr<Compiled> run() {
    c_ = std::make_unique<Compiled>();
    c_->root = compile(root_, "", 0);
    solve_min_bytes();
    const Node& r = c_->nodes[static_cast<size_t>(c_->root)];
    if (r.min_bytes >= kInf) throw SchemaError("schema", "", "no JSON value satisfies it");
    c_->max_frames = lim_.max_depth + 3;
    return std::move(c_);
  }

  // The generic JSON value (any type, any depth up to the frame limit).
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = new_node(Kind::AnyOf);
    const int32_t obj = new_object(), arr = new_node(Kind::Array);
    const int32_t str = new_node(Kind::String), num = new_node(Kind::Number);
    node(obj).additional = any_;
    node(arr).items = any_;
    set_first(node(obj), '{');
    set_first(node(arr), '[');
    set_first(node(str), '"');
    set_number(num, false, std::nullopt, std::nullopt, false, false, "");
    const int32_t lit = literals({json(true), json(false), json(nullptr)}, "");
    node(any_).alts = {obj, arr, str, num, lit};
    return any_;
  }

  int32_t object_of_any() {
    const int32_t o = new_object();
    const int32_t a = any();
    node(o).additional = a;
    set_first(node(o), '{');
    return o;
  }

  std::unique_ptr<Compiled> take() {
    solve_min_bytes();
    c_->max_frames = lim_.max_depth + 3;
    return std::move(c_);
  }
  void start() { c_ = std::make_unique<Compiled>(); }
  Compiled& compiled() { return *c_; }

 private:
  const json& root_;
  SchemaLimits lim_;
  std::unique_ptr<Compiled> c_;
  int32_t any_ = -1;
  std::map<std::string, int32_t> refs_;

  Node& node(int32_t i) { return c_->nodes[static_cast<size_t>(i)]; }

  int32_t new_node(Kind k) {
    if (static_cast<int>(c_->nodes.size()) >= lim_.max_nodes)
      throw SchemaError("maxNodes", "",
                        fmt::format("the schema compiles to more than {} nodes", lim_.max_nodes));
    c_->nodes.emplace_back();
    c_->nodes.back().kind = k;
    return static_cast<int32_t>(c_->nodes.size() - 1);
  }

  // An object node with an empty key trie (typed() fills its own).
  int32_t new_object() {
    const int32_t id = new_node(Kind::Object);
    c_->tries.emplace_back();
    c_->tries.back().finish();
    node(id).keys = static_cast<int32_t>(c_->tries.size() - 1);
    return id;
  }

  [[noreturn]] static void refuse(const std::string& kw, const std::string& path,
                                  const std::string& why) {
    throw SchemaError(kw, path, why);
  }

  static int64_t count_of(const json& s, const char* kw, const std::string& path) {
    const json& v = s[kw];
    if (!v.is_number_integer() || (v.is_number_integer() && v.get<int64_t>() < 0) ||
        (v.is_number_unsigned() && v.get<uint64_t>() > (1u << 30)))
      refuse(kw, path, "must be a non-negative integer");
    return std::min<int64_t>(v.get<int64_t>(), kInf);
  }

  // enum/const values as one literal node (their compact serializations).
  int32_t literals(const std::vector<json>& values, const std::string& path) {
    const int32_t id = new_node(Kind::Literal);
    c_->tries.emplace_back();
    const int32_t t = static_cast<int32_t>(c_->tries.size() - 1);
    node(id).trie = t;
    for (const json& v : values) {
      std::string text;
      try {
        text = v.dump();
      } catch (const json::exception&) {
        refuse("enum", path, "a value is not valid UTF-8");
      }
      if (text.size() > lim_.max_literal)
        refuse("enum", path, fmt::format("a value is longer than {} bytes", lim_.max_literal));
      c_->tries[static_cast<size_t>(t)].insert(text, 0);
      set_first(node(id), static_cast<uint8_t>(text[0]));
    }
    c_->tries[static_cast<size_t>(t)].finish();
    return id;
  }

  static std::optional<double> bound(const json& s, const char* kw, const std::string& path) {
    auto it = s.find(kw);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number())
      refuse(kw, path, "must be a number (the boolean form of draft 4 is not supported)");
    return it->get<double>();
  }

  void set_number(int32_t id, bool integer, std::optional<double> mn, std::optional<double> mx,
                  bool excl_min, bool excl_max, const std::string& path) {
    Node& n = node(id);
    n.integer = integer;
    n.int_digits = integer ? 15 : 12;
    n.frac_digits = integer ? 0 : 6;
    int64_t scale = 1;
    for (int i = 0; i < n.frac_digits; ++i) scale *= 10;
    int64_t top = scale;
    for (int i = 0; i < n.int_digits; ++i) top *= 10;
    top -= 1;
    n.lo = -top;
    n.hi = top;
    const auto scaled = [&](double v, bool up, bool excl) -> int64_t {
      const long double x = static_cast<long double>(v) * static_cast<long double>(scale);
      if (x > static_cast<long double>(top)) return top + 1;
      if (x < -static_cast<long double>(top)) return -top - 1;
      const long double r = std::round(x);
      if (std::fabs(x - r) <= 1e-9L * std::max<long double>(1, std::fabs(x))) {
        const int64_t i = static_cast<int64_t>(r);
        return excl ? (up ? i + 1 : i - 1) : i;
      }
      return static_cast<int64_t>(up ? std::ceil(x) : std::floor(x));
    };
    if (mn) n.lo = std::max(n.lo, scaled(*mn, true, excl_min));
    if (mx) n.hi = std::min(n.hi, scaled(*mx, false, excl_max));
    if (n.lo > n.hi)
      refuse(mn ? (excl_min ? "exclusiveMinimum" : "minimum") : "maximum", path,
             fmt::format("no {} in range (at most {} integer digits{})",
                         integer ? "integer" : "number", n.int_digits,
                         integer ? "" : " and 6 fraction digits"));
    for (int b = '0'; b <= '9'; ++b) set_first(n, static_cast<uint8_t>(b));
    set_first(n, '-');
  }

  int32_t compile(const json& s, const std::string& path, int depth) {
    if (depth > lim_.max_depth * 4)
      refuse("maxDepth", path, fmt::format("nested deeper than {}", lim_.max_depth * 4));
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      refuse("false", path, "the schema false accepts nothing");
    }
    if (!s.is_object()) refuse("schema", path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (!kKnown.count(k) && !kAnnotations.count(k))
        refuse(k, path, "this keyword is not supported (docs/serve.md lists the subset)");
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      if (s.size() > 1)
        for (const auto& [k, v] : s.items())
          if (k != "$ref" && !kAnnotations.count(k))
            refuse(k, path, "keywords beside $ref are not supported");
      return ref(*it, path, depth);
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1 || s.size() > 1)
        refuse("allOf", path, "only an allOf of one schema, alone, is supported");
      return compile((*it)[0], path + "/allOf/0", depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      auto it = s.find(kw);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) refuse(kw, path, "must be a non-empty array");
      for (const auto& [k, v] : s.items()) {
        (void)v;
        if (k != kw && !kAnnotations.count(k))
          refuse(k, path, fmt::format("keywords beside {} are not supported", kw));
      }
      std::vector<int32_t> alts;
      for (size_t i = 0; i < it->size(); ++i)
        alts.push_back(compile((*it)[i], fmt::format("{}/{}/{}", path, kw, i), depth + 1));
      const int32_t id = new_node(Kind::AnyOf);
      node(id).alts = std::move(alts);
      return id;
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      const auto add = [&](const json& t) {
        static const std::set<std::string> names = {"object",  "array",   "string", "number",
                                                    "integer", "boolean", "null"};
        if (!t.is_string() || !names.count(t.get<std::string>()))
          refuse("type", path, "must be a JSON Schema type name or an array of them");
        if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end())
          types.push_back(t.get<std::string>());
      };
      if (it->is_array()) {
        if (it->empty()) refuse("type", path, "an empty type array accepts nothing");
        for (const json& t : *it) add(t);
      } else {
        add(*it);
      }
    }
    if (s.contains("enum") || s.contains("const")) return enumeration(s, types, path);
    if (types.empty()) {  // inferred from the keywords present (stricter than the schema: valid)
      for (const char* k : {"properties", "required", "additionalProperties"})
        if (s.contains(k)) types.push_back("object");
      for (const char* k : {"items", "minItems", "maxItems"})
        if (s.contains(k)) types.push_back("array");
      for (const char* k : {"minLength", "maxLength"})
        if (s.contains(k)) types.push_back("string");
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(k)) types.push_back("number");
      types.erase(std::unique(types.begin(), types.end()), types.end());
      if (types.empty()) return any();
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) alts.push_back(typed(s, t, path, depth));
    if (alts.size() == 1) return alts[0];
    const int32_t id = new_node(Kind::AnyOf);
    node(id).alts = std::move(alts);
    return id;
  }

  int32_t ref(const json& r, const std::string& path, int depth) {
    if (!r.is_string()) refuse("$ref", path, "must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    std::string name;
    for (const char* pre : {"#/$defs/", "#/definitions/"})
      if (target.rfind(pre, 0) == 0) name = target.substr(std::string(pre).size());
    const std::string where = target.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    if (name.empty() || name.find('/') != std::string::npos || name.find('~') != std::string::npos)
      refuse("$ref", path, "only #/$defs/NAME and #/definitions/NAME are supported");
    if (!root_.is_object() || !root_.contains(where) || !root_[where].is_object() ||
        !root_[where].contains(name))
      refuse("$ref", path, fmt::format("'{}' is not defined", target));
    // A placeholder first: a recursive reference meets it and points at the node made here.
    const int32_t id = new_node(Kind::AnyOf);
    refs_[target] = id;
    const int32_t body = compile(root_[where][name], "/" + where + "/" + name, depth + 1);
    node(id).alts = {body};
    return id;
  }

  int32_t enumeration(const json& s, const std::vector<std::string>& types,
                      const std::string& path) {
    std::vector<json> values;
    if (auto it = s.find("const"); it != s.end()) values.push_back(*it);
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) refuse("enum", path, "must be a non-empty array");
      if (static_cast<int>(it->size()) > lim_.max_enum)
        refuse("enum", path, fmt::format("more than {} values", lim_.max_enum));
      if (s.contains("const")) {  // both: the const, if the enum has it
        if (std::find(it->begin(), it->end(), values[0]) == it->end()) values.clear();
      } else {
        values.assign(it->begin(), it->end());
      }
    }
    const auto type_of = [](const json& v) -> std::vector<std::string> {
      switch (v.type()) {
        case json::value_t::object:
          return {"object"};
        case json::value_t::array:
          return {"array"};
        case json::value_t::string:
          return {"string"};
        case json::value_t::boolean:
          return {"boolean"};
        case json::value_t::null:
          return {"null"};
        case json::value_t::number_float:
          return {"number"};
        default:
          return {"number", "integer"};
      }
    };
    if (!types.empty()) {
      std::vector<json> kept;
      for (const json& v : values)
        for (const std::string& t : type_of(v))
          if (std::find(types.begin(), types.end(), t) != types.end()) {
            kept.push_back(v);
            break;
          }
      values = std::move(kept);
    }
    for (const auto& [k, v] : s.items()) {
      (void)v;
      if (k != "enum" && k != "const" && k != "type" && !kAnnotations.count(k))
        refuse(k, path, "keywords beside enum/const (other than type) are not supported");
    }
    if (values.empty()) refuse(s.contains("enum") ? "enum" : "const", path, "no value is allowed");
    return literals(values, path);
  }

  int32_t typed(const json& s, const std::string& t, const std::string& path, int depth) {
    if (t == "null") return literals({json(nullptr)}, path);
    if (t == "boolean") return literals({json(true), json(false)}, path);
    if (t == "string") {
      const int32_t id = new_node(Kind::String);
      if (s.contains("minLength"))
        node(id).min_len = static_cast<int32_t>(count_of(s, "minLength", path));
      if (s.contains("maxLength"))
        node(id).max_len = static_cast<int32_t>(count_of(s, "maxLength", path));
      if (node(id).min_len > node(id).max_len) refuse("minLength", path, "exceeds maxLength");
      set_first(node(id), '"');
      return id;
    }
    if (t == "number" || t == "integer") {
      const int32_t id = new_node(Kind::Number);
      auto mn = bound(s, "minimum", path), mx = bound(s, "maximum", path);
      auto emn = bound(s, "exclusiveMinimum", path), emx = bound(s, "exclusiveMaximum", path);
      bool xmin = false, xmax = false;
      if (emn && (!mn || *emn >= *mn)) mn = emn, xmin = true;
      if (emx && (!mx || *emx <= *mx)) mx = emx, xmax = true;
      set_number(id, t == "integer", mn, mx, xmin, xmax, path);
      return id;
    }
    if (t == "array") {
      const int32_t id = new_node(Kind::Array);
      if (depth > lim_.max_depth)
        refuse("maxDepth", path,
               fmt::format("objects and arrays nest deeper than {}", lim_.max_depth));
      if (s.contains("minItems"))
        node(id).min_items = static_cast<int32_t>(count_of(s, "minItems", path));
      if (s.contains("maxItems"))
        node(id).max_items = static_cast<int32_t>(count_of(s, "maxItems", path));
      if (node(id).min_items > node(id).max_items) refuse("minItems", path, "exceeds maxItems");
      int32_t items = -1;
      if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array()) refuse("items", path, "the array (tuple) form is not supported");
        items = compile(*it, path + "/items", depth + 1);
      } else {
        items = any();
      }
      node(id).items = items;
      set_first(node(id), '[');
      return id;
    }
    // object
    const int32_t id = new_node(Kind::Object);
    if (depth > lim_.max_depth)
      refuse("maxDepth", path,
             fmt::format("objects and arrays nest deeper than {}", lim_.max_depth));
    set_first(node(id), '{');
    std::vector<Prop> props;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) refuse("properties", path, "must be an object");
      if (static_cast<int>(it->size()) > lim_.max_properties)
        refuse("properties", path, fmt::format("more than {} properties", lim_.max_properties));
      for (const auto& [k, v] : it->items()) {
        Prop p;
        p.name = k;
        try {
          const std::string q = json(k).dump();
          p.key = q.substr(1, q.size() - 2);
        } catch (const json::exception&) {
          refuse("properties", path, "a property name is not valid UTF-8");
        }
        p.node = compile(v, path + "/properties/" + k, depth + 1);
        props.push_back(std::move(p));
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) refuse("required", path, "must be an array of property names");
      for (const json& r : *it) {
        if (!r.is_string()) refuse("required", path, "must be an array of property names");
        auto p = std::find_if(props.begin(), props.end(),
                              [&](const Prop& x) { return x.name == r.get<std::string>(); });
        if (p == props.end())
          refuse("required", path,
                 fmt::format("'{}' is required but not in properties (give its schema there)",
                             r.get<std::string>()));
        p->required = true;
      }
    }
    // additionalProperties: absent means none when properties are given (stricter than JSON
    // Schema, still valid), any otherwise.
    int32_t extra = s.contains("properties") ? -1 : any();
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean())
        extra = it->get<bool>() ? any() : -1;
      else
        extra = compile(*it, path + "/additionalProperties", depth + 1);
    }
    Node& n = node(id);
    n.additional = extra;
    c_->tries.emplace_back();
    n.keys = static_cast<int32_t>(c_->tries.size() - 1);
    LiteralTrie& trie = c_->tries.back();
    for (size_t i = 0; i < props.size(); ++i) {
      props[i].end = trie.insert(props[i].key, static_cast<int32_t>(i));
      trie.n[static_cast<size_t>(props[i].end)].props |= uint64_t{1} << i;
      if (props[i].required) n.required |= uint64_t{1} << i;
    }
    trie.finish();
    n.props = std::move(props);
    return id;
  }

 public:
  // Shortest serializations by fixpoint (cycles through anyOf/$ref/any converge from above).
  void solve_min_bytes() {
    bool changed = true;
    for (int iter = 0; changed && iter < 10000; ++iter) {
      changed = false;
      for (size_t i = 0; i < c_->nodes.size(); ++i) {
        Node& n = c_->nodes[i];
        const auto mb = [&](int32_t j) { return c_->nodes[static_cast<size_t>(j)].min_bytes; };
        int64_t v = kInf;
        switch (n.kind) {
          case Kind::Literal:
            v = c_->tries[static_cast<size_t>(n.trie)].n[0].min_rest;
            break;
          case Kind::String:
            v = 2 + int64_t{n.min_len};
            break;
          case Kind::Number: {
            Frame f;
            f.phase = kNumStart;
            v = num_distance(n, f);
            break;
          }
          case Kind::Array:
            v = n.min_items == 0 ? 2 : 2 + int64_t{n.min_items} * mb(n.items) + (n.min_items - 1);
            break;
          case Kind::Object: {
            v = 1;
            int req = 0;
            for (const Prop& p : n.props)
              if (p.required) {
                v += 1 + static_cast<int64_t>(p.key.size()) + 3 + mb(p.node);
                ++req;
              }
            if (req == 0) v = 2;
            break;
          }
          case Kind::AnyOf:
            for (int32_t a : n.alts) v = std::min<int64_t>(v, mb(a));
            break;
        }
        const int32_t nv = static_cast<int32_t>(std::min<int64_t>(v, kInf));
        if (nv < n.min_bytes) {
          n.min_bytes = nv;
          changed = true;
        }
      }
    }
    // First bytes of anyOf nodes (over their alternatives, cycles included).
    changed = true;
    for (int iter = 0; changed && iter < 10000; ++iter) {
      changed = false;
      for (Node& n : c_->nodes) {
        if (n.kind != Kind::AnyOf) continue;
        for (int32_t a : n.alts)
          for (int w = 0; w < 4; ++w) {
            const uint64_t f = c_->nodes[static_cast<size_t>(a)].first[w];
            if ((n.first[w] | f) != n.first[w]) {
              n.first[w] |= f;
              changed = true;
            }
          }
      }
    }
  }
};

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const json& schema, const SchemaLimits& limits) {
  Compiler c(schema, limits);
  return std::make_shared<const Grammar>(c.run());
}

std::shared_ptr<const Grammar> any_json_object() {
  static const std::shared_ptr<const Grammar> g = [] {
    const json none;
    Compiler c(none, SchemaLimits{});
    c.start();
    c.compiled().root = c.object_of_any();
    return std::make_shared<const Grammar>(c.take());
  }();
  return g;
}

}  // namespace vkllm::grammar
