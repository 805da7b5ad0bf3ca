// Parsing chat templates: a recursive-descent parser with @huggingface/jinja's grammar and
// operator precedence over the tokens of lexer.cpp, nesting bounded.
#include <fmt/format.h>

#include <charconv>

#include "template/internal.h"
#include "template/lexer.h"

namespace vkllm::tmpl::detail {
namespace {

constexpr int kMaxNesting = 200;

// ---- Parser -----------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view original, std::vector<Token> toks)
      : src_(original), t_(std::move(toks)) {}

  std::vector<NodePtr> run() {
    std::vector<NodePtr> body;
    while (cur_ < t_.size()) body.push_back(any());
    return body;
  }

 private:
  std::string_view src_;
  std::vector<Token> t_;
  size_t cur_ = 0;
  int depth_ = 0;

  struct Nest {
    Parser& p;
    explicit Nest(Parser& q) : p(q) {
      if (++p.depth_ > kMaxNesting)
        p.fail(fmt::format("template nested deeper than {} levels", kMaxNesting));
    }
    ~Nest() { --p.depth_; }
  };

  uint32_t here() const {
    return cur_ < t_.size() ? t_[cur_].pos : static_cast<uint32_t>(src_.size());
  }
  [[noreturn]] void fail(const std::string& msg) const { syntax_error(src_, here(), msg); }
  std::string describe() const {
    if (cur_ >= t_.size()) return "the end of the template";
    const Token& k = t_[cur_];
    if (k.type == Tok::Ident || k.type == Tok::Num || k.type == Tok::Cmp || k.type == Tok::Add ||
        k.type == Tok::Mul || k.type == Tok::Unary)
      return fmt::format("'{}'", k.value);
    return tok_name(k.type);
  }
  bool is(Tok type, size_t ahead = 0) const {
    return cur_ + ahead < t_.size() && t_[cur_ + ahead].type == type;
  }
  bool is_ident(std::string_view name, size_t ahead = 0) const {
    return is(Tok::Ident, ahead) && t_[cur_ + ahead].value == name;
  }
  bool is_stmt(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStmt) || !is(Tok::Ident, 1)) return false;
    for (auto nm : names)
      if (t_[cur_ + 1].value == nm) return true;
    return false;
  }
  void expect(Tok type, const char* what) {
    if (!is(type)) fail(fmt::format("expected {}, got {}", what, describe()));
    ++cur_;
  }
  void expect_ident(const char* name) {
    if (!is_ident(name)) fail(fmt::format("expected '{}', got {}", name, describe()));
    ++cur_;
  }
  NodePtr node(NK kind, uint32_t pos) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->pos = pos;
    return n;
  }
  // Statements until one of `ends` (an {% name %} tag); the block's opening tag is at `open`.
  std::vector<NodePtr> block(std::initializer_list<std::string_view> ends, uint32_t open,
                             const char* closing) {
    std::vector<NodePtr> body;
    while (!is_stmt(ends)) {
      if (cur_ >= t_.size()) {
        auto [l, c] = line_col(src_, open);
        fail(fmt::format("missing {} for the block opened at line {}, column {}", closing, l, c));
      }
      body.push_back(any());
    }
    return body;
  }

  NodePtr any() {
    Nest nest(*this);
    const Token& k = t_[cur_];
    switch (k.type) {
      case Tok::Comment: {
        ++cur_;
        return node(NK::Comment, k.pos);
      }
      case Tok::Text: {
        auto n = node(NK::Text, k.pos);
        n->str = k.value;
        ++cur_;
        return n;
      }
      case Tok::OpenStmt:
        return statement();
      case Tok::OpenExpr: {
        ++cur_;
        auto e = expression();
        expect(Tok::CloseExpr, "'}}'");
        return e;
      }
      default:
        fail(fmt::format("unexpected {} outside a tag", describe()));
    }
  }

  NodePtr statement() {
    const uint32_t open = here();
    ++cur_;  // {%
    if (!is(Tok::Ident)) fail(fmt::format("expected a statement name, got {}", describe()));
    const std::string name = t_[cur_].value;
    ++cur_;
    if (name == "set") return set_statement(open);
    if (name == "if") {
      auto n = if_statement(open);
      expect(Tok::OpenStmt, "'{%'");
      expect_ident("endif");
      expect(Tok::CloseStmt, "'%}'");
      return n;
    }
    if (name == "for") return for_statement(open);
    if (name == "macro") return macro_statement(open);
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStmt, "'%}'");
      return node(name == "break" ? NK::Break : NK::Continue, open);
    }
    cur_ -= 1;
    if (name == "call" || name == "filter" || name == "include" || name == "import" ||
        name == "extends" || name == "block" || name == "raw" || name == "with" || name == "from")
      fail(fmt::format("unsupported statement '{}'", name));
    fail(fmt::format("unknown statement '{}'", name));
  }

  NodePtr set_statement(uint32_t open) {
    auto n = node(NK::Set, open);
    n->a.push_back(sequence(false));
    if (is(Tok::Equals)) {
      ++cur_;
      n->a.push_back(sequence(false));
    } else {
      n->a.push_back(nullptr);
      expect(Tok::CloseStmt, "'=' or '%}'");
      n->body = block({"endset"}, open, "{% endset %}");
      expect(Tok::OpenStmt, "'{%'");
      expect_ident("endset");
    }
    expect(Tok::CloseStmt, "'%}'");
    return n;
  }

  NodePtr if_statement(uint32_t open) {
    auto n = node(NK::If, open);
    n->a.push_back(expression());
    expect(Tok::CloseStmt, "'%}'");
    n->body = block({"elif", "else", "endif"}, open, "{% endif %}");
    if (is_stmt({"elif"})) {
      const uint32_t at = here();
      cur_ += 2;
      n->alt.push_back(if_statement(at));
    } else if (is_stmt({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      n->alt = block({"endif"}, open, "{% endif %}");
    }
    return n;
  }

  NodePtr for_statement(uint32_t open) {
    auto n = node(NK::For, open);
    auto target = sequence(true);
    if (target->kind != NK::Ident && target->kind != NK::Tuple)
      fail("expected a name or names for the loop variable");
    n->a.push_back(std::move(target));
    expect_ident("in");
    auto iter = expression();
    NodePtr cond;
    if (iter->kind == NK::Select) {  // `for x in xs if cond`
      cond = std::move(iter->a[1]);
      iter = std::move(iter->a[0]);
    }
    n->a.push_back(std::move(iter));
    n->a.push_back(std::move(cond));
    expect(Tok::CloseStmt, "'%}'");
    n->body = block({"endfor", "else"}, open, "{% endfor %}");
    if (is_stmt({"else"})) {
      cur_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      n->alt = block({"endfor"}, open, "{% endfor %}");
    }
    expect(Tok::OpenStmt, "'{%'");
    expect_ident("endfor");
    expect(Tok::CloseStmt, "'%}'");
    return n;
  }

  NodePtr macro_statement(uint32_t open) {
    auto n = node(NK::Macro, open);
    if (!is(Tok::Ident)) fail(fmt::format("expected the macro's name, got {}", describe()));
    n->str = t_[cur_++].value;
    expect(Tok::LParen, "'('");
    std::vector<std::string> names;
    bool defaults = false;
    while (!is(Tok::RParen)) {
      if (!is(Tok::Ident)) fail(fmt::format("expected a parameter name, got {}", describe()));
      auto p = node(NK::Ident, here());
      p->str = t_[cur_++].value;
      for (const auto& nm : names)
        if (nm == p->str) fail(fmt::format("duplicate parameter '{}'", p->str));
      names.push_back(p->str);
      if (is(Tok::Equals)) {
        ++cur_;
        auto kw = node(NK::KwArg, p->pos);
        kw->str = p->str;
        kw->a.push_back(expression());
        p = std::move(kw);
        defaults = true;
      } else if (defaults) {
        fail("a parameter without a default follows one with a default");
      }
      n->a.push_back(std::move(p));
      if (is(Tok::Comma))
        ++cur_;
      else if (!is(Tok::RParen))
        fail(fmt::format("expected ',' or ')', got {}", describe()));
    }
    ++cur_;
    expect(Tok::CloseStmt, "'%}'");
    n->body = block({"endmacro"}, open, "{% endmacro %}");
    expect(Tok::OpenStmt, "'{%'");
    expect_ident("endmacro");
    expect(Tok::CloseStmt, "'%}'");
    return n;
  }

  // a, b, c (a tuple) or a single expression; primary: names only (loop targets).
  NodePtr sequence(bool primary) {
    const uint32_t at = here();
    auto first = primary ? primary_expr() : expression();
    if (!is(Tok::Comma)) return first;
    auto t = node(NK::Tuple, at);
    t->a.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++cur_;
      t->a.push_back(primary ? primary_expr() : expression());
    }
    return t;
  }

  NodePtr expression() {
    Nest nest(*this);
    auto a = or_expr();
    if (is_ident("if")) {
      const uint32_t at = here();
      ++cur_;
      auto cond = or_expr();
      if (is_ident("else")) {
        ++cur_;
        auto n = node(NK::Ternary, at);
        n->a.push_back(std::move(cond));
        n->a.push_back(std::move(a));
        n->a.push_back(expression());
        return n;
      }
      auto n = node(NK::Select, at);
      n->a.push_back(std::move(a));
      n->a.push_back(std::move(cond));
      return n;
    }
    return a;
  }

  NodePtr binary(NodePtr l, const std::string& op, uint32_t at, NodePtr r) {
    auto n = node(NK::Binary, at);
    n->str = op;
    n->a.push_back(std::move(l));
    n->a.push_back(std::move(r));
    return n;
  }

  NodePtr or_expr() {
    auto l = and_expr();
    while (is_ident("or")) {
      const uint32_t at = t_[cur_++].pos;
      l = binary(std::move(l), "or", at, and_expr());
    }
    return l;
  }
  NodePtr and_expr() {
    auto l = not_expr();
    while (is_ident("and")) {
      const uint32_t at = t_[cur_++].pos;
      l = binary(std::move(l), "and", at, not_expr());
    }
    return l;
  }
  NodePtr not_expr() {
    if (is_ident("not")) {
      Nest nest(*this);
      auto n = node(NK::Unary, here());
      n->str = "not";
      ++cur_;
      n->a.push_back(not_expr());
      return n;
    }
    return comparison();
  }
  NodePtr comparison() {
    auto l = additive();
    while (true) {
      std::string op;
      const uint32_t at = here();
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_ident("in") || is(Tok::Cmp)) {
        op = t_[cur_++].value;
      } else {
        return l;
      }
      l = binary(std::move(l), op, at, additive());
    }
  }
  NodePtr additive() {
    auto l = multiplicative();
    while (is(Tok::Add)) {
      const Token& k = t_[cur_++];
      l = binary(std::move(l), k.value, k.pos, multiplicative());
    }
    return l;
  }
  NodePtr multiplicative() {
    auto l = power();
    while (is(Tok::Mul)) {
      const Token& k = t_[cur_++];
      l = binary(std::move(l), k.value, k.pos, power());
    }
    return l;
  }
  NodePtr power() {
    auto l = test_expr();
    while (is(Tok::Pow)) {
      const Token& k = t_[cur_++];
      l = binary(std::move(l), k.value, k.pos, test_expr());
    }
    return l;
  }
  NodePtr test_expr() {
    auto operand = filter_expr();
    while (is_ident("is")) {
      const uint32_t at = t_[cur_++].pos;
      auto n = node(NK::Test, at);
      if (is_ident("not")) {
        n->i = 1;
        ++cur_;
      }
      if (!is(Tok::Ident)) fail(fmt::format("expected a test name after 'is', got {}", describe()));
      n->str = t_[cur_++].value;
      n->a.push_back(std::move(operand));
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr filter_expr() {
    auto operand = unary_sign();
    while (is(Tok::Pipe)) {
      const uint32_t at = t_[cur_++].pos;
      if (!is(Tok::Ident))
        fail(fmt::format("expected a filter name after '|', got {}", describe()));
      auto f = node(NK::Ident, here());
      f->str = t_[cur_++].value;
      if (is(Tok::LParen)) f = call_expr(std::move(f));
      auto n = node(NK::Filter, at);
      n->a.push_back(std::move(operand));
      n->a.push_back(std::move(f));
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr unary_sign() {
    if ((is(Tok::Unary) || is(Tok::Add)) && (t_[cur_].value == "-" || t_[cur_].value == "+")) {
      Nest nest(*this);
      auto n = node(NK::Unary, here());
      n->str = t_[cur_++].value;
      n->a.push_back(unary_sign());
      return n;
    }
    auto m = member_expr(primary_expr());
    if (is(Tok::LParen)) return call_expr(std::move(m));
    return m;
  }
  NodePtr call_expr(NodePtr callee) {
    Nest nest(*this);
    auto n = node(NK::Call, callee->pos);
    n->a.push_back(std::move(callee));
    expect(Tok::LParen, "'('");
    bool keyword = false;
    while (!is(Tok::RParen)) {
      if (is(Tok::Pow) || (is(Tok::Mul) && t_[cur_].value == "*"))
        fail("unsupported argument unpacking (* or **)");
      auto arg = expression();
      if (is(Tok::Equals)) {
        if (arg->kind != NK::Ident) fail("expected a name before '=' in a keyword argument");
        ++cur_;
        auto kw = node(NK::KwArg, arg->pos);
        kw->str = arg->str;
        kw->a.push_back(expression());
        arg = std::move(kw);
        keyword = true;
      } else if (keyword) {
        fail("a positional argument follows a keyword argument");
      }
      n->a.push_back(std::move(arg));
      if (is(Tok::Comma))
        ++cur_;
      else if (!is(Tok::RParen))
        fail(fmt::format("expected ',' or ')', got {}", describe()));
    }
    ++cur_;
    auto m = member_expr(std::move(n));
    if (is(Tok::LParen)) return call_expr(std::move(m));
    return m;
  }
  NodePtr member_expr(NodePtr obj) {
    while (is(Tok::Dot) || is(Tok::LBracket)) {
      Nest nest(*this);
      const Token& k = t_[cur_++];
      auto n = node(NK::Member, k.pos);
      n->a.push_back(std::move(obj));
      if (k.type == Tok::LBracket) {
        n->i = 1;
        n->a.push_back(subscript());
        expect(Tok::RBracket, "']'");
      } else {
        if (!is(Tok::Ident) && !(is(Tok::Num) && t_[cur_].value.find('.') == std::string::npos))
          fail(fmt::format("expected a name after '.', got {}", describe()));
        n->a.push_back(primary_expr());
      }
      obj = std::move(n);
    }
    return obj;
  }
  NodePtr subscript() {
    const uint32_t at = here();
    std::vector<NodePtr> parts;
    bool slice = false;
    while (!is(Tok::RBracket)) {
      if (cur_ >= t_.size()) fail("expected ']', got the end of the template");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++cur_;
        slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::Colon)) {
          ++cur_;
          slice = true;
        } else if (!is(Tok::RBracket)) {
          fail(fmt::format("expected ':' or ']', got {}", describe()));
        }
      }
    }
    if (parts.empty()) fail("expected an index or a slice inside '[]'");
    if (!slice) return std::move(parts[0]);
    if (parts.size() > 3) fail("a slice takes at most 3 parts");
    auto n = node(NK::Slice, at);
    parts.resize(3);
    n->a = std::move(parts);
    return n;
  }

  NodePtr primary_expr() {
    Nest nest(*this);
    if (cur_ >= t_.size()) fail("expected an expression, got the end of the template");
    const Token& k = t_[cur_++];
    switch (k.type) {
      case Tok::Num: {
        if (k.value.find('.') != std::string::npos) {
          auto n = node(NK::Float, k.pos);
          n->f = std::strtod(k.value.c_str(), nullptr);
          return n;
        }
        auto n = node(NK::Int, k.pos);
        const char* b = k.value.data() + (k.value[0] == '+' ? 1 : 0);
        auto [p, ec] = std::from_chars(b, k.value.data() + k.value.size(), n->i);
        if (ec != std::errc() || p != k.value.data() + k.value.size()) {
          --cur_;
          fail(fmt::format("integer literal {} out of range", k.value));
        }
        return n;
      }
      case Tok::Str: {
        auto n = node(NK::Str, k.pos);
        n->str = k.value;
        while (is(Tok::Str)) n->str += t_[cur_++].value;  // 'a' 'b' is 'ab'
        return n;
      }
      case Tok::Ident: {
        auto n = node(NK::Ident, k.pos);
        n->str = k.value;
        return n;
      }
      case Tok::LParen: {
        auto e = sequence(false);
        expect(Tok::RParen, "')'");
        return e;
      }
      case Tok::LBracket: {
        auto n = node(NK::Array, k.pos);
        while (!is(Tok::RBracket)) {
          if (cur_ >= t_.size()) fail("expected ']', got the end of the template");
          n->a.push_back(expression());
          if (is(Tok::Comma))
            ++cur_;
          else if (!is(Tok::RBracket))
            fail(fmt::format("expected ',' or ']', got {}", describe()));
        }
        ++cur_;
        return n;
      }
      case Tok::LBrace: {
        auto n = node(NK::Object, k.pos);
        while (!is(Tok::RBrace)) {
          if (cur_ >= t_.size()) fail("expected '}', got the end of the template");
          n->a.push_back(expression());
          expect(Tok::Colon, "':'");
          n->a.push_back(expression());
          if (is(Tok::Comma))
            ++cur_;
          else if (!is(Tok::RBrace))
            fail(fmt::format("expected ',' or '}}', got {}", describe()));
        }
        ++cur_;
        return n;
      }
      default:
        --cur_;
        fail(fmt::format("expected an expression, got {}", describe()));
    }
  }
};

}  // namespace

std::vector<NodePtr> parse_template(std::string_view source) {
  if (source.size() > Template::max_source)
    throw TemplateError(fmt::format("template too long: {} bytes (at most {})", source.size(),
                                    Template::max_source),
                        "template too long", false);
  return Parser(source, tokenize(source)).run();
}

}  // namespace vkllm::tmpl::detail
