// Unit tests of the chat-template interpreter that the oracle comparison (test_oracle.cpp) does
// not cover: error messages and their positions, the limits on untrusted templates, the
// constructs refused, raise_exception, strftime_now, and the two context types.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

#include "template/template.h"

namespace vkllm {
namespace {

using tmpl::Limits;
using tmpl::Template;
using tmpl::TemplateError;

std::string render(const std::string& text,
                   const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   const Limits& limits = {}) {
  return Template::parse(text).render(ctx, limits);
}

// The error's what() for parsing and rendering `text`, or "" when it renders.
std::string error_of(const std::string& text,
                     const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                     const Limits& limits = {}) {
  try {
    render(text, ctx, limits);
  } catch (const TemplateError& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.find('\n'), std::string::npos) << "not one line: " << w;
    return w;
  }
  return "";
}

TEST(TemplateLanguage, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(
      error_of("ab\n{% if x %}\n  y"),
      "template syntax error at line 3, column 4: missing {% endif %} for the block opened at "
      "line 2, column 1");
  EXPECT_EQ(error_of("{{ 1 + }}"),
            "template syntax error at line 1, column 8: expected an expression, got '}}'");
  EXPECT_EQ(error_of("x\n  {{ a b }}"),
            "template syntax error at line 2, column 8: expected '}}', got 'b'");
  EXPECT_EQ(error_of("{% for x of y %}{% endfor %}"),
            "template syntax error at line 1, column 10: expected 'in', got 'of'");
  EXPECT_EQ(error_of("{{ 'abc }}"),
            "template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(error_of("{# never closed"),
            "template syntax error at line 1, column 1: missing end of comment tag '#}'");
  EXPECT_EQ(error_of("{% frobnicate %}"),
            "template syntax error at line 1, column 4: unknown statement 'frobnicate'");
  EXPECT_EQ(error_of("{{ x $ y }}"),
            "template syntax error at line 1, column 6: unexpected character '$'");
  EXPECT_EQ(error_of("{{ 'a\\q' }}"),
            "template syntax error at line 1, column 6: unknown escape sequence \\q");
  EXPECT_EQ(error_of("{{ 99999999999999999999 }}"),
            "template syntax error at line 1, column 4: integer literal 99999999999999999999 out "
            "of range");
  // Positions are those of the original text, before lstrip_blocks and trim_blocks remove text.
  EXPECT_EQ(error_of("{% if a %}\n    {% if b %}\n{% endif %}\n  {{ ) }}"),
            "template syntax error at line 4, column 6: expected an expression, got ')'");
}

TEST(TemplateLanguage, RenderErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("line\n{{ x + 1 }}"),
            "template error at line 2, column 6: cannot apply '+' to an undefined value");
  EXPECT_EQ(error_of("{{ 'a'|frobnicate }}"),
            "template error at line 1, column 8: unknown filter 'frobnicate' for a string");
  EXPECT_EQ(error_of("{% for x in 3 %}{% endfor %}"),
            "template error at line 1, column 13: cannot loop over an integer (a list or a dict is "
            "needed)");
  EXPECT_EQ(error_of("{{ x() }}"), "template error at line 1, column 4: cannot call undefined");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"),
            "template error at line 1, column 6: integer division by zero");
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}"),
            "template error at line 1, column 24: integer overflow");
}

TEST(TemplateLanguage, RaiseExceptionCarriesItsMessage) {
  try {
    render(
        "{% if messages|length == 0 %}\n  {{ raise_exception('No messages: ' ~ n) }}\n{% endif %}",
        {{"messages", nlohmann::ordered_json::array()}, {"n", 0}});
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised());
    EXPECT_EQ(e.message(), "No messages: 0");
    EXPECT_STREQ(e.what(), "template raised an exception at line 2, column 6: No messages: 0");
  }
  // A multi-line message stays one line in what(), intact in message().
  try {
    render("{{ raise_exception('a\\nb') }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.message(), "a\nb");
    EXPECT_STREQ(e.what(), "template raised an exception at line 1, column 4: a b");
  }
}

TEST(TemplateLanguage, UnsupportedConstructsAreRefused) {
  EXPECT_EQ(error_of("{% include 'x.j2' %}"),
            "template syntax error at line 1, column 4: unsupported statement 'include'");
  EXPECT_EQ(error_of("{% call m() %}x{% endcall %}"),
            "template syntax error at line 1, column 4: unsupported statement 'call'");
  EXPECT_EQ(error_of("{% filter upper %}x{% endfilter %}"),
            "template syntax error at line 1, column 4: unsupported statement 'filter'");
  EXPECT_EQ(error_of("{% extends 'base' %}"),
            "template syntax error at line 1, column 4: unsupported statement 'extends'");
  EXPECT_EQ(error_of("{{ f(*xs) }}"),
            "template syntax error at line 1, column 6: unsupported argument unpacking (* or **)");
  EXPECT_EQ(error_of("{{ 'a'|map('upper')|list }}"),
            "template error at line 1, column 8: unknown filter 'map' for a string");
  EXPECT_EQ(error_of("{{ ['a']|map('upper')|list }}"),
            "template error at line 1, column 10: map() without attribute= is not supported");
  EXPECT_EQ(error_of("{{ 'x'|escape }}"),
            "template error at line 1, column 8: unknown filter 'escape' for a string");
}

TEST(TemplateLanguage, LimitsBoundUntrustedTemplates) {
  Limits small;
  small.max_steps = 1000;
  EXPECT_EQ(
      error_of("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {},
               small),
      "template error at line 1, column 38: template exceeded the step limit (1000 statements, "
      "iterations and calls)");
  Limits out;
  out.max_output = 1000;
  EXPECT_NE(error_of("{% for i in range(2000) %}x{% endfor %}", {}, out)
                .find("template output longer than the limit (1000 bytes)"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ "
                     "ns.s %}{% endfor %}",
                     {}, out)
                .find("template built a string longer than the limit (1000 bytes)"),
            std::string::npos);
  EXPECT_NE(
      error_of("{{ range(100000000)|length }}").find("template built a list longer than the limit"),
      std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + "
                     "ns.l %}{% endfor %}")
                .find("template built a list longer than the limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                .find("macro calls nested deeper than 32"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nested deeper than 200 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '-') + "1 }}").find("nested deeper than 200 levels"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(Template::max_source + 1, 'x')).find("template too long"),
            std::string::npos);
  // A macro recursing through deeply nested expressions stops at the evaluation depth bound.
  EXPECT_NE(error_of("{% macro f(n) %}{{ " + std::string(60, '[') + "f(n)" + std::string(60, ']') +
                     " }}{% endmacro %}{{ f(0) }}")
                .find("template evaluation nested too deeply"),
            std::string::npos);
  // Within the limits the same templates render.
  EXPECT_EQ(render("{% for i in range(3) %}x{% endfor %}", {}, out), "xxx");
}

TEST(TemplateLanguage, StrftimeNowUsesTheGivenClock) {
  const char* old = std::getenv("TZ");
  const std::string saved = old ? old : "";
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  Limits l;
  l.now = 1721952000 + 13 * 3600 + 5 * 60;  // 2024-07-26 13:05 UTC
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %m %H:%M %% %j') }}", {}, l),
            "26 Jul 2024|July 07 13:05 % %j");
  if (old)
    ::setenv("TZ", saved.c_str(), 1);
  else
    ::unsetenv("TZ");
  ::tzset();
}

TEST(TemplateLanguage, ParsedOnceRenderedManyTimes) {
  const Template t =
      Template::parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ x }}");
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "a"}}}}, {"x", 1}};
  EXPECT_EQ(t.render(ctx), "<user>a1");
  ctx["x"] = "two";
  EXPECT_EQ(t.render(ctx), "<user>atwo");
}

TEST(TemplateLanguage, ContextKeyOrder) {
  // ordered_json keeps the caller's order; nlohmann::json (sorted keys) renders sorted.
  nlohmann::ordered_json o;
  o["d"]["b"] = 1;
  o["d"]["a"] = 2;
  EXPECT_EQ(render("{{ d|tojson }}", o), "{\"b\": 1, \"a\": 2}");
  nlohmann::json j;
  j["d"]["b"] = 1;
  j["d"]["a"] = 2;
  EXPECT_EQ(Template::parse("{{ d|tojson }}").render(j), "{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(error_of("{{ 1 }}", {{"true", 1}}),
            "template error at line 1, column 1: the context redefines the global 'true'");
}

}  // namespace
}  // namespace vkllm
