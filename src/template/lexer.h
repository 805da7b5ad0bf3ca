// Tokens of chat templates (lexer.cpp), read by the parser (parse.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vkllm::tmpl::detail {

enum class Tok {
  Text,
  Num,
  Str,
  Ident,
  Equals,
  LParen,
  RParen,
  OpenStmt,
  CloseStmt,
  OpenExpr,
  CloseExpr,
  LBracket,
  RBracket,
  LBrace,
  RBrace,
  Comma,
  Dot,
  Colon,
  Pipe,
  Add,
  Mul,
  Pow,
  Cmp,
  Unary,
  Comment
};

struct Token {
  Tok type;
  std::string value;
  uint32_t pos;
};

const char* tok_name(Tok t);

// The template preprocessed as @huggingface/jinja does, then split into tokens; each token's pos
// is the offset of its first character in the original template. Throws TemplateError.
std::vector<Token> tokenize(std::string_view source);

}  // namespace vkllm::tmpl::detail
