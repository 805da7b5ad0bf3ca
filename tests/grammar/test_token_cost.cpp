// The greedy path's per-token checks (what generate() does for each token of a constrained greedy
// step: Matcher::allows on the candidate, then accept_token, complete and finished), their verdicts
// against the mask's and their cost per token (printed for docs/serve.md), over Llama 3.2's
// vocabulary and two kinds of token sequences: a JSON document as the tokenizer encodes it (a
// trained model's reply) and a random-argmax walk (each step's candidate an id drawn uniformly,
// taken where allowed, else one drawn from the mask: the synthetic twins' replies); and the
// one-token paths against the definition over random vocabularies.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

// One step of a greedy reply: the backend's argmax (`candidate`), the token taken (`id`: the
// candidate where the grammar allows it) and the tokens left, this one included.
struct Step {
  int32_t candidate, id;
  int left;
};

const char* kDocument = R"({
  "name": "Ada Lovelace",
  "born": 1815,
  "height_m": 1.65,
  "languages": ["English", "French", "Italian"],
  "address": {"city": "London", "street": "12 St James's Square", "zip": null},
  "notes": "Wrote the first published algorithm \u2014 for Babbage's Analytical Engine (1843).",
  "active": false,
  "scores": [98.5, 87, -3.25, 0],
  "works": [
    {"title": "Sketch of the Analytical Engine", "year": 1843, "pages": 65},
    {"title": "Letters", "year": 1851, "pages": 210}
  ],
  "tags": ["mathematics", "computing", "poetical science"]
})";

const char* kDocumentSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "maxLength": 60},
  "born": {"type": "integer", "minimum": 0, "maximum": 3000},
  "height_m": {"type": "number", "minimum": 0, "maximum": 3},
  "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
  "address": {"type": "object", "properties": {"city": {"type": "string"},
    "street": {"type": "string"}, "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    "required": ["city", "zip"], "additionalProperties": false},
  "notes": {"type": "string"},
  "active": {"type": "boolean"},
  "scores": {"type": "array", "items": {"type": "number"}},
  "works": {"type": "array", "items": {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"}, "pages": {"type": "integer",
    "minimum": 1}}, "required": ["title", "year"]}},
  "tags": {"type": "array", "items": {"enum": ["mathematics", "computing", "poetical science",
    "music"]}}},
  "required": ["name", "born", "address", "works"], "additionalProperties": false})";

// The document's tokens as greedy steps whose argmax is always allowed (max_tokens 4096: the
// budget rule never binds).
std::vector<Step> document_steps(const Tokenizer& t) {
  std::vector<Step> s;
  const std::vector<int32_t> ids = t.encode(kDocument);
  for (size_t i = 0; i < ids.size(); ++i) s.push_back({ids[i], ids[i], 4096 - static_cast<int>(i)});
  return s;
}

// A random-argmax walk of `budget` tokens (fewer where the grammar finishes first). Checks each
// refused candidate and each pick against the mask, and that the walk ends complete where the
// grammar's shortest text fits the budget.
std::vector<Step> walk_steps(const std::shared_ptr<const Grammar>& g,
                             const std::shared_ptr<const TokenIndex>& ix, int budget,
                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> any(0, ix->size() - 1);
  Matcher m(g, ix);
  std::vector<uint8_t> mask;
  std::vector<Step> s;
  for (int left = budget; left >= 1 && !m.finished(); --left) {
    const int32_t cand = any(rng);
    int32_t id = cand;
    if (!m.allows(cand, left)) {
      m.fill_mask(mask, left);
      EXPECT_FALSE(mask[static_cast<size_t>(cand)]) << "allows refused token " << cand;
      std::vector<int32_t> ok;
      for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) ok.push_back(static_cast<int32_t>(i));
      if (ok.empty()) {
        ADD_FAILURE() << "nothing allowed with " << left << " tokens left";
        break;
      }
      id = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
    }
    s.push_back({cand, id, left});
    if (m.is_eos(id)) break;
    EXPECT_TRUE(m.accept_token(id)) << id;
  }
  if (g->min_length() <= budget) {
    EXPECT_TRUE(m.complete()) << "walk " << seed << " ends incomplete after " << s.size();
  }
  return s;
}

// The checks of each step (allows on the candidate, and on the pick where the candidate is
// refused; accept_token, complete, finished), `reps` times over; the fastest run's microseconds a
// token. Every verdict must be the recorded one, and the reply complete at the end where the
// recording is.
double replay_us(const std::shared_ptr<const Grammar>& g,
                 const std::shared_ptr<const TokenIndex>& ix, const std::vector<Step>& steps,
                 int reps, int* refused) {
  const bool complete_at_end = g->min_length() <= static_cast<int>(steps.size());
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Matcher m(g, ix);
    int bad = 0, nref = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const Step& st : steps) {
      if (!m.allows(st.candidate, st.left)) {
        ++nref;
        bad += !m.allows(st.id, st.left);
      } else {
        bad += st.candidate != st.id;
      }
      if (m.is_eos(st.id) && m.complete()) break;
      bad += !m.accept_token(st.id);
      if (m.finished()) break;
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(bad, 0) << "a step's verdict differs from the recorded one";
    EXPECT_EQ(m.complete(), complete_at_end);
    best = std::min(best, us / static_cast<double>(steps.size()));
    *refused = nref;
  }
  return best;
}

}  // namespace

TEST(GrammarCost, GreedyChecksPerToken) {
  const Tokenizer* t = test::fixture("llama3.2");
  ASSERT_TRUE(t);
  const auto ix = test::token_index_of(*t, t->vocab_size());
  const auto schema = compile_json_schema(json::parse(kDocumentSchema));
  const auto long_string = compile_json_schema(json::parse(
      R"({"type": "object", "properties": {"text": {"type": "string", "minLength": 2000}},
          "required": ["text"]})"));
  const std::vector<Step> doc = document_steps(*t);
  struct Run {
    const char* what;
    std::shared_ptr<const Grammar> g;
    std::vector<Step> steps;
  };
  const std::vector<Run> runs = {
      {"document, json_object", any_json_object(), doc},
      {"document, json_schema", schema, doc},
      {"random walk, json_object", any_json_object(), walk_steps(any_json_object(), ix, 256, 1)},
      {"random walk, json_object", any_json_object(), walk_steps(any_json_object(), ix, 256, 2)},
      {"random walk, json_schema (document's)", schema, walk_steps(schema, ix, 256, 3)},
      {"random walk, json_schema (one long string)", long_string,
       walk_steps(long_string, ix, 256, 4)},
  };
  for (const Run& r : runs) {
    int refused = 0;
    const double us = replay_us(r.g, ix, r.steps, 20, &refused);
    std::printf("%-44s %3zu tokens, %3d refused: %4.0f ns a token\n", r.what, r.steps.size(),
                refused, us * 1000);
  }
}

// The one-token paths against the definition over random vocabularies of JSON-ish byte strings
// (and every single byte), along random walks with and without a budget: allows() and the mask
// against a copy advanced with accept_bytes and its distance under the budget; accept_token (after
// allows of the same id or not) against accept_bytes; masked_argmax against apply_mask and
// std::max_element over quarter-unit logits (ties).
TEST(GrammarCost, OneTokenPathsMatchTheDefinition) {
  std::mt19937 rng(5);
  const std::string alpha = "{}[]\":, \n0123456789.-abcnultrfse\\\xc3\xa9\xe2\x82\xac";
  const std::vector<std::shared_ptr<const Grammar>> grammars = {
      any_json_object(),
      compile_json_schema(json::parse(
          R"({"type":"object","properties":{"name":{"type":"string","minLength":2,"maxLength":5},
              "n":{"type":"integer","minimum":-5,"maximum":300},"l":{"type":"array","items":
              {"anyOf":[{"type":"string","maxLength":3},{"type":"number"},{"type":"null"}]},
              "maxItems":3}},"required":["name","n"]})")),
      compile_json_schema(json::parse(
          R"({"type":"object","additionalProperties":{"type":"string","minLength":3}})")),
      compile_json_schema(json::parse(
          R"({"anyOf":[{"type":"string","maxLength":4},{"type":"string","minLength":6}]})")),
  };
  int checks = 0, bad = 0;
  for (int v = 0; v < 3; ++v) {
    std::vector<std::string> bytes;
    for (int i = 0; i < 3000; ++i) {
      std::string t;
      for (int k = 0, len = 1 + static_cast<int>(rng() % 6); k < len; ++k)
        t += alpha[rng() % alpha.size()];
      bytes.push_back(t);
    }
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    bytes.push_back("<eos>");
    std::vector<bool> special(bytes.size(), false);
    special.back() = true;
    const auto eos = static_cast<int32_t>(bytes.size() - 1);
    const auto ix = std::make_shared<TokenIndex>(bytes, special, std::vector<int32_t>{eos},
                                                 static_cast<int32_t>(bytes.size() + 3));
    for (const auto& g : grammars) {
      for (int walk = 0; walk < 4; ++walk) {
        Matcher m(g, ix);
        std::vector<uint8_t> mask;
        for (int left = 10 + static_cast<int>(rng() % 40); left >= 1 && !m.finished(); --left) {
          const int budget = walk % 2 ? left : 0;
          m.fill_mask(mask, budget);
          const int bound = budget > 0 ? std::max(budget - 1, m.distance() - 1) : 1 << 29;
          for (int k = 0; k < 60; ++k) {
            const auto id = static_cast<int32_t>(rng() % static_cast<uint32_t>(ix->size()));
            bool want = false;
            if (id < eos) {
              Matcher b(m);
              want = b.accept_bytes(bytes[static_cast<size_t>(id)]) && b.distance() <= bound;
              Matcher a(m);
              if (k % 2) a.allows(id, budget);
              const bool ra = a.accept_token(id), rb = Matcher(m).accept_bytes(bytes[id]);
              bad += ra != rb ||
                     (ra && (a.distance() != b.distance() || a.complete() != b.complete()));
            } else if (id == eos) {
              want = m.complete();
            }
            ++checks;
            bad += m.allows(id, budget) != want;
            bad += static_cast<bool>(mask[static_cast<size_t>(id)]) != want;
          }
          std::vector<float> l(static_cast<size_t>(ix->size()) + 2);
          for (float& x : l) x = std::round(std::normal_distribution<float>(0, 2)(rng) * 4) / 4;
          std::vector<float> masked = l;
          Matcher(m).apply_mask(masked.data(), static_cast<int64_t>(masked.size()), budget);
          const auto want = std::max_element(masked.begin(), masked.end()) - masked.begin();
          bad += m.masked_argmax(l.data(), static_cast<int64_t>(l.size()), budget) != want;
          std::vector<int32_t> ok;
          for (size_t i = 0; i < mask.size(); ++i)
            if (mask[i]) ok.push_back(static_cast<int32_t>(i));
          ASSERT_FALSE(ok.empty());
          const int32_t pick = ok[rng() % ok.size()];
          if (m.is_eos(pick)) break;
          m.allows(pick, budget);
          ASSERT_TRUE(m.accept_token(pick));
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checks << " checks";
  EXPECT_GT(checks, 20000);
}
