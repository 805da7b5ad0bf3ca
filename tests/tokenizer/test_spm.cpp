// SentencePiece-style BPE: vocabulary facts of the real Gemma 3 and Llama 2 files, byte fallback,
// and hand-made tokenizers for the parts the fixtures do not exercise (unknown token, Metaspace,
// Split merge behaviours) and the refusals. Expected ids follow the Hugging Face tokenizers rules
// (stated next to each case), worked out by hand.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixtures.h"

namespace vkllm::spm_test {
namespace {

using nlohmann::json;

using test::error_of;

int32_t id_of(const Tokenizer& t, const std::string& s) {
  auto id = t.token_id(s);
  EXPECT_TRUE(id.has_value()) << s;
  return id.value_or(-1);
}

TEST(Spm, VocabularyFactsOfGemma3AndLlama2) {
  const Tokenizer* g = test::fixture("gemma3");
  const Tokenizer* l = test::fixture("llama2");
  ASSERT_TRUE(g && l);
  EXPECT_EQ(g->vocab_size(), 262145);  // 262144 vocab entries + <image_soft_token>
  EXPECT_EQ(g->bos_id(), 2);
  EXPECT_EQ(g->eos_id(), 106);  // <end_of_turn>
  EXPECT_EQ(l->vocab_size(), 32000);
  EXPECT_EQ(l->bos_id(), 1);
  EXPECT_EQ(l->eos_id(), 2);
  EXPECT_EQ(g->encode("Hi", true).front(), 2);
  EXPECT_EQ(l->encode("Hi", true).front(), 1);
  // Decoding: the metaspace becomes a space; Llama 2's Strip decoder drops the first one.
  EXPECT_EQ(g->decode(g->encode("Hello world")), "Hello world");
  EXPECT_EQ(l->encode("Hello").front(), id_of(*l, "▁Hello"));
  EXPECT_EQ(l->decode(l->encode("Hello world")), "Hello world");
  EXPECT_EQ(l->token_bytes(id_of(*l, "▁Hello")), " Hello");
}

TEST(Spm, ByteFallbackForCharactersOutsideTheVocab) {
  const Tokenizer* l = test::fixture("llama2");
  ASSERT_NE(l, nullptr);
  // U+1F9A9 is not a Llama 2 token: its four UTF-8 bytes become <0xF0> <0x9F> <0xA6> <0xA9>.
  ASSERT_FALSE(l->token_id("🦩").has_value());
  std::vector<int32_t> want = {id_of(*l, "▁"), id_of(*l, "<0xF0>"), id_of(*l, "<0x9F>"),
                               id_of(*l, "<0xA6>"), id_of(*l, "<0xA9>")};
  EXPECT_EQ(l->encode("🦩"), want);
  EXPECT_EQ(l->decode(want), "🦩");
  EXPECT_EQ(l->token_bytes(id_of(*l, "<0x0A>")), "\n");
  // A lone lead byte decodes to U+FFFD; streaming holds it back until the sequence completes.
  EXPECT_EQ(l->decode(std::vector<int32_t>{id_of(*l, "<0xF0>")}), "\xEF\xBF\xBD");
  StreamDecoder sd(*l);
  std::string got;
  for (size_t i = 0; i < want.size(); ++i) {
    std::string piece = sd.push(want[i]);
    if (i > 0 && i < 4) {
      EXPECT_EQ(piece, "");
    }
    got += piece;
  }
  EXPECT_EQ(got + sd.flush(), "🦩");
}

// A small SentencePiece-style tokenizer.json (character BPE, byte fallback for é).
json tiny_spm() {
  json vocab = {{"<unk>", 0}, {"▁", 1},  {"a", 2},  {"b", 3},  {"▁a", 4},      {"ab", 5},
                {"-", 6},     {"a▁", 7}, {"a-", 8}, {"--", 9}, {"<0xC3>", 10}, {"<0xA9>", 11}};
  return {{"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({json::array({"▁", "a"}), "a b"})},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true}}},
          {"added_tokens", json::array({{{"id", 12}, {"content", "<eos>"}, {"special", true}}})},
          {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}}};
}

using Ids = std::vector<int32_t>;

TEST(Spm, UnknownTokenByteFallbackAndStrip) {
  json j = tiny_spm();
  Tokenizer t = Tokenizer::from_text(j.dump(), "", "tiny");
  // " ab": "▁ab"; merge "▁ a" (rank 0) first, then no "▁a b" merge exists.
  EXPECT_EQ(t.encode(" ab"), (Ids{4, 3}));
  // "b" alone has no merge; "x" and "y" are neither tokens nor byte tokens: one fused <unk>.
  EXPECT_EQ(t.encode("bxyb"), (Ids{3, 0, 3}));
  // é = C3 A9: both byte tokens exist.
  EXPECT_EQ(t.encode("é"), (Ids{10, 11}));
  EXPECT_EQ(t.decode(Ids{1, 10, 11}), "é");  // " é" with the first space stripped
  EXPECT_EQ(t.decode(Ids{1, 1, 2}), " a");   // Strip start=1 removes one space only
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(Tokenizer::from_text(j.dump(), "", "tiny").encode("bxyb"), (Ids{3, 0, 0, 3}));
  j["model"].erase("unk_token");
  EXPECT_EQ(Tokenizer::from_text(j.dump(), "", "tiny").encode("bxyb"), (Ids{3, 3}));  // dropped
}

TEST(Spm, MetaspacePreTokenizer) {
  json j = tiny_spm();
  j.erase("normalizer");
  // "a ▁" outranks "▁ a": on one word "▁a▁a" it merges the middle pair first.
  j["model"]["merges"] = json::array({"a ▁", "▁ a"});
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  Tokenizer split = Tokenizer::from_text(j.dump(), "", "tiny");
  EXPECT_EQ(split.encode("a a"), (Ids{4, 4}));  // words "▁a" "▁a"
  j["pre_tokenizer"]["split"] = false;
  Tokenizer whole = Tokenizer::from_text(j.dump(), "", "tiny");
  EXPECT_EQ(whole.encode("a a"), (Ids{1, 7, 2}));  // one word: ▁ a▁ a
  // always: every segment gets the prefix; first: only a segment at the start of the input.
  EXPECT_EQ(whole.encode("a<eos>a"), (Ids{4, 12, 4}));
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  Tokenizer first = Tokenizer::from_text(j.dump(), "", "tiny");
  EXPECT_EQ(first.encode("a<eos>a"), (Ids{4, 12, 2}));
  EXPECT_EQ(first.encode("<eos>a"), (Ids{12, 2}));
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(Tokenizer::from_text(j.dump(), "", "tiny").encode("a"), (Ids{2}));
}

TEST(Spm, SplitDelimiterMergesOnlyWithANonDelimiter) {
  json j = tiny_spm();
  j.erase("normalizer");
  j["model"]["merges"] = json::array({"- -", "a -"});
  // Hugging Face tokenizers: "a--b" merged with previous is "a-" "-" "b" (a delimiter never joins
  // another delimiter); as one word "- -" (rank 0) would win instead.
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"String", "-"}}},
                        {"behavior", "MergedWithPrevious"},
                        {"invert", false}};
  EXPECT_EQ(Tokenizer::from_text(j.dump(), "", "tiny").encode("a--b"), (Ids{8, 6, 3}));
  // Merged with next: "a" "-" "-b": no "- b" merge, so "-" "b".
  j["pre_tokenizer"]["behavior"] = "MergedWithNext";
  EXPECT_EQ(Tokenizer::from_text(j.dump(), "", "tiny").encode("a--b"), (Ids{2, 6, 6, 3}));
}

TEST(Spm, RefusalsNameTheComponent) {
  auto refused = [](json j) {
    std::string msg = error_of([&] { Tokenizer::from_text(j.dump(), "", "x.json"); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("x.json"), std::string::npos) << msg;
    return msg;
  };
  json j = tiny_spm();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(refused(j).find("Unigram"), std::string::npos);
  j = tiny_spm();
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(refused(j).find("Lowercase"), std::string::npos);
  j = tiny_spm();
  j["normalizer"]["pattern"] = {{"Regex", "\\s"}};
  EXPECT_NE(refused(j).find("Regex"), std::string::npos);
  j = tiny_spm();
  j["decoder"]["decoders"].erase(2);  // Fuse
  EXPECT_NE(refused(j).find("Strip before Fuse"), std::string::npos);
  j = tiny_spm();
  j["decoder"]["decoders"][3]["stop"] = 1;
  EXPECT_NE(refused(j).find("stop"), std::string::npos);
  j = tiny_spm();
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  EXPECT_NE(refused(j).find("Metaspace"), std::string::npos);
  j = tiny_spm();
  j["decoder"] = nullptr;
  EXPECT_NE(refused(j).find("decoder"), std::string::npos);
  j = tiny_spm();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_NE(refused(j).find("<nope>"), std::string::npos);
  j = tiny_spm();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  EXPECT_NE(refused(j).find("one character"), std::string::npos);
  j = tiny_spm();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "odd"}};
  EXPECT_NE(refused(j).find("odd"), std::string::npos);
  j = tiny_spm();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  EXPECT_NE(refused(j).find("byte_fallback"), std::string::npos);
  j = tiny_spm();
  j["model"]["byte_fallback"] = false;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  EXPECT_NE(refused(j).find("byte-level token"), std::string::npos);
  j = tiny_spm();
  j["decoder"]["decoders"][0]["content"] = 5;
  EXPECT_NE(refused(j).find("content"), std::string::npos);
}

}  // namespace
}  // namespace vkllm::spm_test
