// src/grammar: schemas compiled or refused (naming the keyword), texts accepted and refused byte
// by byte, the token mask checked against a brute force over a real vocabulary (Qwen3's and
// Llama 3.2's tokenizers from .fixtures), the budget rule (random walks that must end complete
// within their token budget; the texts parsed by nlohmann::json), and the mask's cost per step.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "../tokenizer/fixtures.h"
#include "grammar/grammar.h"
#include "token_index_of.h"

using namespace vkllm;
using namespace vkllm::grammar;
using nlohmann::json;

namespace {

std::shared_ptr<const Grammar> compile(const char* schema) {
  return compile_json_schema(json::parse(schema));
}

// A vocabulary of single bytes (every byte one token) plus eos: enough to feed any text.
std::shared_ptr<const TokenIndex> byte_index() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("<eos>");
  std::vector<bool> special(bytes.size(), false);
  special.back() = true;
  return std::make_shared<TokenIndex>(bytes, special, std::vector<int32_t>{256}, 257);
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g, byte_index());
  return m.accept_bytes(text) && m.complete();
}

const Tokenizer* qwen() {
  return test::fixture("qwen3");
}

// (7 logits past the tokenizer's: padded heads have ids no token string has)
std::shared_ptr<const TokenIndex> index_of(const Tokenizer& t) {
  return test::token_index_of(t, t.vocab_size() + 7);
}

}  // namespace

TEST(Grammar, AcceptsAndRefusesTexts) {
  struct Case {
    const char* schema;
    std::vector<std::string> good, bad;
  };
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
          "required":["a"]})",
       {R"({"a":1})", R"({"b":"x","a":-12})", "{ \"a\" : 0 ,\n \"b\" : \"\\u00e9\\n\" }"},
       {"{}", R"({"b":"x"})", R"({"a":1,"a":2})", R"({"a":1.5})", R"({"a":01})", R"({"c":1,"a":1})",
        R"( {"a":1})", R"({"a":1} )", R"({"a":1,})", R"({"a":"1"})"}},
      {R"({"type":"array","items":{"type":"number","minimum":-1.5,"exclusiveMaximum":2},
          "minItems":1,"maxItems":3})",
       {"[-1.5]", "[0,1.999999,-0.25]", "[1]"},
       {"[]", "[2]", "[-1.6]", "[1,1,1,1]", "[1e3]", "[1.0000001]", "[.5]"}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("a\"c")", "\"\xc3\xa9\xe2\x82\xac\""},
       {R"("a")", R"("abcd")", "\"\xc3\"", "\"a\x01\"", R"("\ud800x")", "\"\xed\xa0\x80\""}},
      {R"({"enum":["red","green",3,null,{"k":[1]}]})",
       {R"("red")", "3", "null", R"({"k":[1]})"},
       {R"("blue")", "4", R"({"k": [1]})", R"("re")"}},
      {R"({"anyOf":[{"type":"integer","maximum":9},{"type":"string","maxLength":1},
          {"type":"null"}]})",
       {"9", "-3", R"("x")", "null"},
       {"10", R"("xy")", "true"}},
      {R"({"type":["boolean","null"]})", {"true", "false", "null"}, {"1", "\"true\""}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"const":1},
          "next":{"$ref":"#/$defs/node"}},"required":["v"]}},"$ref":"#/$defs/node"})",
       {R"({"v":1})", R"({"v":1,"next":{"v":1,"next":{"v":1}}})"},
       {R"({"v":2})", R"({"next":{"v":1}})"}},
      {R"({"type":"object","properties":{"x":{"type":"boolean"}},
          "additionalProperties":{"type":"integer"}})",
       {"{}", R"({"y":1,"x":true})", R"({"x":false,"z":-4})"},
       {R"({"y":true})", R"({"x":1})", R"({"x":true,"x":false})"}},
      {R"({"type":"integer","minimum":100,"maximum":250})",
       {"100", "250", "199"},
       {"99", "251", "1000", "-100"}},
  };
  for (const Case& c : cases) {
    const auto g = compile(c.schema);
    for (const std::string& t : c.good) {
      EXPECT_TRUE(accepts(g, t)) << c.schema << "\n  should accept: " << t;
      EXPECT_FALSE(json::parse(t, nullptr, false).is_discarded()) << t;  // the table itself
    }
    for (const std::string& t : c.bad)
      EXPECT_FALSE(accepts(g, t)) << c.schema << "\n  should refuse: " << t;
  }
}

TEST(Grammar, WhitespaceIsBounded) {
  const auto g = any_json_object();
  const std::string ok = "{" + std::string(kMaxWhitespace, ' ') + "}";
  const std::string too_much = "{" + std::string(kMaxWhitespace + 1, ' ') + "}";
  EXPECT_TRUE(accepts(g, ok));
  EXPECT_FALSE(accepts(g, too_much));
  EXPECT_TRUE(accepts(g, R"({"a":[1,{"b":null}],"c":"d","e":-0.5})"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, "1"));
}

TEST(Grammar, RefusesNamingTheKeyword) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type":"string","pattern":"^a"})", "pattern"},
      {R"({"type":"string","format":"date"})", "format"},
      {R"({"not":{"type":"null"}})", "not"},
      {R"({"type":"object","properties":{"a":{"type":"string","foo":1}}})", "foo"},
      {R"({"type":"array","items":[{"type":"string"}]})", "items"},
      {R"({"type":"integer","multipleOf":3})", "multipleOf"},
      {R"({"type":"thing"})", "type"},
      {R"({"enum":[]})", "enum"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "minLength"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "minimum"},
      {R"({"$ref":"#/$defs/missing"})", "$ref"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "required"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "allOf"},
      {R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "schema"},
      {"false", "false"},
  };
  for (const auto& [schema, kw] : cases) {
    try {
      compile(schema);
      ADD_FAILURE() << "compiled: " << schema;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), kw) << schema << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + kw + "'"), std::string::npos)
          << e.what();
    }
  }
  json deep = json::object();
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_THROW(compile_json_schema(deep), SchemaError);
}

// The mask against the definition: a token is allowed iff its bytes are accepted after the state
// (and, under a budget, the text stays completable within it), checked on every token id.
TEST(Grammar, MaskMatchesBruteForceOverARealVocabulary) {
  const Tokenizer* t = qwen();
  ASSERT_TRUE(t);
  const auto ix = index_of(*t);
  struct Case {
    const char* schema;
    std::string prefix;
    int left;  // 0: no budget
  };
  const char* person =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
          "age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array",
          "items":{"enum":["a","bc"]},"maxItems":2}},"required":["name","age"]})";
  const std::vector<Case> cases = {
      {person, "", 0},
      {person, "{", 0},
      {person, "{\"na", 0},
      {person, "{\"name\": \"Jo", 0},
      {person, "{\"name\": \"Jo", 12},
      {person, "{\"name\":\"Jo\",\"age\":1", 0},
      {person, "{\"name\":\"Jo\",\"age\":1", 4},
      {person, "{\"age\":3,\"tags\":[\"", 0},
      {"{\"type\":\"object\"}", "{\"k\":[1,\"\xc3", 0},
      {"{\"type\":\"object\"}", "{\"k\":{\"", 9},
  };
  std::vector<uint8_t> mask;
  for (const Case& c : cases) {
    const auto g = compile(c.schema);
    Matcher m(g, ix);
    ASSERT_TRUE(m.accept_bytes(c.prefix)) << c.prefix;
    m.fill_mask(mask, c.left);
    ASSERT_EQ(mask.size(), static_cast<size_t>(ix->size()));
    const int bound = c.left > 0 ? std::max(c.left - 1, m.distance() - 1) : 1 << 29;
    int allowed = 0, mismatches = 0;
    for (int32_t id = 0; id < ix->size(); ++id) {
      bool want = false;
      if (id < t->vocab_size() && !t->is_special(id) && !t->token_bytes(id).empty()) {
        Matcher b(m);  // a copy at the prefix (the prefix itself checked above)
        want = b.accept_bytes(t->token_bytes(id)) && b.distance() <= bound;
      } else if (t->eos_id() && id == *t->eos_id()) {
        want = m.complete();
      }
      allowed += want;
      // One token's verdict (the greedy step's first check) is the mask's.
      if (m.allows(id, c.left) != want && ++mismatches <= 5)
        ADD_FAILURE() << c.schema << " after '" << c.prefix << "' (left " << c.left << "): allows("
                      << id << ") differs from brute force " << want;
      if (want != static_cast<bool>(mask[static_cast<size_t>(id)]) && ++mismatches <= 5)
        ADD_FAILURE() << c.schema << " after '" << c.prefix << "' (left " << c.left << "): token "
                      << id << " '" << t->token_bytes(id) << "' brute force " << want;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GT(allowed, 0) << c.prefix;
  }
}

// Any JSON nested as deep as the matcher's stack goes: where no object or array may open any more
// a scalar still may, so the budget rule's promise holds (a key at the deepest level gets a value).
TEST(Grammar, DeepestLevelStillTakesAScalar) {
  const auto g = compile("{}");
  Matcher m(g, byte_index());
  const std::string deep =
      std::string(11, '[') + "{\"a\": " + std::string(11, '[') + "{\"b\": [{\"";
  ASSERT_TRUE(m.accept_bytes(deep));
  std::vector<uint8_t> mask;
  for (int left = m.distance() + 4; left >= 1 && !m.complete(); --left) {
    m.fill_mask(mask, left);
    const auto it = std::find(mask.begin(), mask.end(), 1);
    ASSERT_NE(it, mask.end()) << "nothing allowed with " << left << " tokens left";
    ASSERT_TRUE(m.accept_token(static_cast<int32_t>(it - mask.begin())));
  }
  EXPECT_TRUE(m.complete());
}

// Random walks over the real vocabulary, each token drawn uniformly from the mask with the budget
// counting down: every walk ends complete within its budget, and the text is JSON.
TEST(Grammar, BudgetRuleCompletesEveryWalk) {
  const Tokenizer* t = qwen();
  ASSERT_TRUE(t);
  const auto ix = index_of(*t);
  const std::vector<const char*> schemas = {
      R"({"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"},
          "l":{"type":"array","items":{"type":"string"}}},"required":["s","n","l"]})",
      R"({"type":"array","items":{"type":"object"},"minItems":2})",
      R"({"type":"string","minLength":5})",
      R"({"type":"object"})",
  };
  std::mt19937 rng(7);
  std::vector<uint8_t> mask;
  for (const char* s : schemas) {
    const auto g = compile(s);
    for (int budget : {g->min_length() + 1, g->min_length() + 8, 40}) {
      Matcher m(g, ix);
      std::string text;
      for (int left = budget; left >= 1 && !m.finished(); --left) {
        m.fill_mask(mask, left);
        std::vector<int32_t> ok;
        for (size_t i = 0; i < mask.size(); ++i)
          if (mask[i]) ok.push_back(static_cast<int32_t>(i));
        ASSERT_FALSE(ok.empty()) << s << " after " << text;
        const int32_t id = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
        ASSERT_TRUE(m.accept_token(id));
        if (m.is_eos(id)) break;
        text += t->token_bytes(id);
      }
      EXPECT_TRUE(m.complete()) << s << " budget " << budget << ": " << text;
      EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << text;
    }
  }
}

// The cost of one mask (printed for docs/serve.md): structural positions, inside a string, a
// number; Qwen3 and Llama 3.2 vocabularies.
TEST(Grammar, MaskCostPerStep) {
  const auto g = compile(
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},
          "required":["name","n"]})");
  for (const char* name : {"qwen3", "llama3.2"}) {
    const Tokenizer* t = test::fixture(name);
    ASSERT_TRUE(t);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ix = index_of(*t);
    const double build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %d tokens, index built in %.1f ms\n", name, ix->size(), build_ms);
    std::vector<uint8_t> mask;
    const std::vector<std::pair<std::shared_ptr<const Grammar>, const char*>> states = {
        {g, "{"},
        {g, "{\"name\": \""},
        {g, "{\"name\": \"abc\", \"n\": 1"},
        {any_json_object(), "{\"a\": "},
        {any_json_object(), "{\"a\": [1, {\""}};
    for (const auto& [gr, prefix] : states) {
      Matcher m(gr, ix);
      ASSERT_TRUE(m.accept_bytes(prefix));
      const int reps = 5;
      const auto a = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) m.fill_mask(mask, 100);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count() /
          reps;
      size_t n = 0;
      for (uint8_t x : mask) n += x;
      std::printf("  after '%s': %.2f ms a mask, %zu tokens allowed\n", prefix, ms, n);
      EXPECT_GT(n, 0u);
    }
  }
}
