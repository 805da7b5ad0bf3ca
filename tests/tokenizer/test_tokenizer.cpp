// Unit tests of the tokenizer: the chat prompts of docs/design.md section 1, vocabulary facts,
// errors on bad files, long inputs, UTF-8 handling. Conformance against the reference is in
// test_conformance.cpp.
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "fixtures.h"
#include "tokenizer/utf8.h"

namespace vkllm {
namespace {

// Quadratic behaviour would take minutes; sanitizer builds run ~6x slower than -O2. (GCC
// defines __SANITIZE_ADDRESS__, clang -- the asan preset -- answers __has_feature.)
#if defined(__SANITIZE_ADDRESS__)
#define VKLLM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VKLLM_TEST_ASAN 1
#endif
#endif
#ifdef VKLLM_TEST_ASAN
constexpr double kLongWordCpuLimit = 12.0;
#else
constexpr double kLongWordCpuLimit = 2.0;
#endif

const std::vector<ChatMessage> kQuestion = {{"user", "What is the capital of France?"}};

TEST(ChatTemplate, SingleUserTurnMatchesDesign) {
  EXPECT_EQ(apply_chat_template(ChatFamily::Qwen3, kQuestion, true),
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::Qwen3, kQuestion, true, true),
            "<|im_start|>user\nWhat is the capital of "
            "France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::Llama3, kQuestion, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of "
            "France?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::Phi4Mini, kQuestion, true),
            "<|user|>What is the capital of France?<|end|><|assistant|>");
}

TEST(ChatTemplate, FamilyOfArch) {
  EXPECT_EQ(chat_family_for(Arch::Qwen3), ChatFamily::Qwen3);
  EXPECT_EQ(chat_family_for(Arch::Llama), ChatFamily::Llama3);
  EXPECT_EQ(chat_family_for(Arch::Phi3), ChatFamily::Phi4Mini);
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  EXPECT_THROW(apply_chat_template(ChatFamily::Phi4Mini, {{"robot", "x"}}, true), Error);
}

TEST(ChatTemplate, DesignPromptsEncodeWithSpecialTokens) {
  const Tokenizer* q = test::fixture("qwen3");
  const Tokenizer* l = test::fixture("llama3.2");
  const Tokenizer* p = test::fixture("phi4mini");
  ASSERT_TRUE(q && l && p);
  auto qi = q->encode(apply_chat_template(ChatFamily::Qwen3, kQuestion, true));
  EXPECT_EQ(qi.front(), 151644);  // <|im_start|>
  EXPECT_EQ(std::count(qi.begin(), qi.end(), 151645), 1);
  auto li = l->encode(apply_chat_template(ChatFamily::Llama3, kQuestion, true));
  EXPECT_EQ(li.front(), 128000);
  EXPECT_EQ(std::count(li.begin(), li.end(), 128006), 2);  // <|start_header_id|>
  EXPECT_EQ(std::count(li.begin(), li.end(), 128009), 1);  // <|eot_id|>
  auto pi = p->encode(apply_chat_template(ChatFamily::Phi4Mini, kQuestion, true));
  EXPECT_EQ(pi.front(), 200021);  // <|user|>
  EXPECT_EQ(pi.back(), 200019);   // <|assistant|>
}

TEST(Vocabulary, FactsOfDesignSection3) {
  const Tokenizer* q = test::fixture("qwen3");
  const Tokenizer* l = test::fixture("llama3.2");
  const Tokenizer* p = test::fixture("phi4mini");
  ASSERT_TRUE(q && l && p);
  EXPECT_EQ(q->vocab_size(), 151669);
  EXPECT_EQ(q->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(q->eos_id(), 151645);
  EXPECT_TRUE(q->is_special(151643));
  EXPECT_FALSE(q->is_special(151667));  // <think> is an added, non-special token
  EXPECT_EQ(l->vocab_size(), 128256);
  EXPECT_EQ(l->token_id("<|finetune_right_pad_id|>"), 128004);
  EXPECT_EQ(l->token_id("<|eom_id|>"), 128008);
  EXPECT_EQ(l->token_id("<|python_tag|>"), 128010);
  EXPECT_EQ(l->token_id("<|reserved_special_token_247|>"), 128255);
  EXPECT_EQ(l->bos_id(), 128000);
  EXPECT_EQ(l->eos_id(), 128009);
  EXPECT_EQ(l->encode("hi", true).front(), 128000);
  EXPECT_EQ(p->vocab_size(), 200029);
  EXPECT_EQ(p->token_id("<|end|>"), 200020);
  EXPECT_EQ(p->token_id("<|tag|>"), 200028);
  EXPECT_EQ(p->token_id("<|endoftext|>"), 199999);
  EXPECT_EQ(p->encode("hi", true), p->encode("hi"));  // no post-processor
  EXPECT_EQ(q->token(9707), "Hello");
  EXPECT_THROW(q->token(-1), Error);
  // Embedding rows past the tokenizer (Qwen3: 151669..151935) decode to nothing, as in HF.
  EXPECT_EQ(q->decode(std::vector<int32_t>{9707, 151669, 151935, 9707}), "HelloHello");
  EXPECT_THROW(q->decode(std::vector<int32_t>{-1}), Error);
}

TEST(Encode, MegabyteWordIsNotQuadratic) {
  const Tokenizer* q = test::fixture("qwen3");
  const Tokenizer* l = test::fixture("llama3.2");
  ASSERT_TRUE(q && l);
  std::string word;
  for (size_t i = 0; i < (1u << 20); ++i)
    word.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
  // Process CPU time: the CI machine is shared, wall time is not a measure of this code.
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  for (const std::string& text : {word, std::string(1u << 20, ' ')}) {
    for (const Tokenizer* t : {q, l}) {
      double t0 = cpu();
      auto ids = t->encode(text);
      double s = cpu() - t0;
      std::printf("1 MiB single pre-token: %zu tokens in %.3f s CPU\n", ids.size(), s);
      EXPECT_EQ(t->decode(ids), text);
      EXPECT_LT(s, kLongWordCpuLimit) << "encoding a 1 MiB word must stay far from quadratic";
    }
  }
}

TEST(Utf8, LossyFollowsMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(utf8::lossy("\xE4\xB8"), "\xEF\xBF\xBD");  // truncated: one U+FFFD
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
  std::string out;
  EXPECT_EQ(utf8::append_lossy("ab\xE4\xB8", out, false), 2u);
  EXPECT_EQ(out, "ab");
}

TEST(StreamDecoder, HoldsBackPartialSequences) {
  const Tokenizer* q = test::fixture("qwen3");
  ASSERT_NE(q, nullptr);
  auto ids = q->encode("😀😀 日本語");
  StreamDecoder sd(*q);
  std::string all;
  for (int32_t id : ids) all += sd.push(id);
  all += sd.flush();
  EXPECT_EQ(all, "😀😀 日本語");
}

// ---- errors ------------------------------------------------------------------------------------

std::string tmp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("vkllm_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

using test::error_of;

// A minimal valid byte-level BPE tokenizer.json: 256 byte tokens, one merge "a b" -> "ab".
std::string tiny_tokenizer_json(const std::string& extra_merge = "") {
  nlohmann::json vocab = nlohmann::json::object();
  const auto& b2c = utf8::byte_to_char();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, b2c[static_cast<size_t>(b)]);
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  nlohmann::json merges = nlohmann::json::array({"a b"});
  if (!extra_merge.empty()) merges.push_back(extra_merge);
  nlohmann::json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
      {"added_tokens", nlohmann::json::array({{{"id", 257},
                                               {"content", "<eos>"},
                                               {"special", true},
                                               {"lstrip", true},
                                               {"rstrip", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  return j.dump();
}

TEST(Errors, MissingFileNamesThePath) {
  std::string msg = error_of([] { Tokenizer::from_files("/nonexistent/tokenizer.json", ""); });
  EXPECT_NE(msg.find("/nonexistent/tokenizer.json"), std::string::npos) << msg;
  msg = error_of([] { Tokenizer::from_dir("/nonexistent-dir"); });
  EXPECT_NE(msg.find("/nonexistent-dir/tokenizer.json"), std::string::npos) << msg;
}

TEST(Errors, MalformedJson) {
  std::string d = tmp_dir();
  std::ofstream(d + "/bad.json") << "{\"model\": {\"vocab\": ";
  std::string msg = error_of([&] { Tokenizer::from_files(d + "/bad.json", ""); });
  EXPECT_NE(msg.find(d + "/bad.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_NE(error_of([] { Tokenizer::from_text("[]", "", "x.json"); }).find("x.json"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_text("{}", "", "x.json"); }).find("\"model\""),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_text(
            R"({"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})",
            "", "x.json");
      }).find("byte"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_text(tiny_tokenizer_json("a zz"), "", "x.json");
            }).find("merge"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_text(tiny_tokenizer_json(), "{\"eos_token\": \"<nope>\"}", "x.json");
            }).find("<nope>"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_text(tiny_tokenizer_json(), "{", "x.json");
            }).find("tokenizer_config"),
            std::string::npos);
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  j["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_NE(error_of([&] { Tokenizer::from_text(j.dump(), "", "x.json"); }).find("Precompiled"),
            std::string::npos);
  j = nlohmann::json::parse(tiny_tokenizer_json());
  j["model"]["vocab"]["ab"] = "text";
  EXPECT_NE(error_of([&] { Tokenizer::from_text(j.dump(), "", "x.json"); }).find("x.json"),
            std::string::npos);
}

// Merges are looked up on several threads where there are many: the error still names the first
// bad merge in rank order, whichever thread met it, and a repeated merge keeps its first rank.
TEST(Errors, FirstBadMergeOfManyIsNamed) {
  auto with_merges = [](const std::vector<std::pair<size_t, nlohmann::json>>& bad) {
    auto j = nlohmann::json::parse(tiny_tokenizer_json());
    nlohmann::json merges = nlohmann::json::array();
    for (size_t i = 0; i < 70000; ++i) merges.push_back("a b");
    for (const auto& [at, m] : bad) merges[at] = m;
    j["model"]["merges"] = merges;
    return j.dump();
  };
  auto error = [&](const std::vector<std::pair<size_t, nlohmann::json>>& bad) {
    return error_of([&] { Tokenizer::from_text(with_merges(bad), "", "x.json"); });
  };
  const nlohmann::json pair_of_ids = nlohmann::json::array({1, 2});
  std::string msg = error({{50000, "a zz"}, {60000, pair_of_ids}});
  EXPECT_NE(msg.find("merge \"a zz\" uses a token missing"), std::string::npos) << msg;
  msg = error({{40000, pair_of_ids}, {60000, "a zz"}});
  EXPECT_NE(msg.find("merge [1,2] must be \"a b\" or [a, b]"), std::string::npos) << msg;
  msg = error({{69999, "a  b"}});
  EXPECT_NE(msg.find("separated by one space"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  Tokenizer t = Tokenizer::from_text(with_merges({}), "", "x.json");
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{256}));
}

TEST(AddedTokens, LstripRstripAbsorbWhitespace) {
  Tokenizer t = Tokenizer::from_text(tiny_tokenizer_json(), "{\"eos_token\": \"<eos>\"}", "tiny");
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.encode("ab  <eos>  ab"), (std::vector<int32_t>{256, 257, 256}));
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{256, 257, 256}, true), "abab");
}

}  // namespace
}  // namespace vkllm

namespace vkllm {
namespace {

std::string run_cmd(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

TEST(Cli, TokenizeJsonlBatchMatchesLibrary) {
  const Tokenizer* q = test::fixture("qwen3");
  ASSERT_NE(q, nullptr);
  std::string d = tmp_dir();
  std::vector<std::string> texts = {"hello world", "<|im_end|> x", "日本語 😀", "", "line\nbreak"};
  {
    std::ofstream in(d + "/in.jsonl");
    for (const auto& t : texts) in << nlohmann::json(t).dump() << "\n";
  }
  int rc = -1;
  std::string out = run_cmd(std::string(VKLLM_EXE) + " tokenize --tokenizer " +
                                test::fixtures_dir() + "/qwen3 --jsonl < " + d + "/in.jsonl",
                            &rc);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(i, texts.size());
    EXPECT_EQ(nlohmann::json::parse(line).get<std::vector<int32_t>>(), q->encode(texts[i]))
        << texts[i];
    ++i;
  }
  EXPECT_EQ(i, texts.size());
  out = run_cmd(std::string(VKLLM_EXE) + " tokenize --tokenizer " + test::fixtures_dir() +
                    "/llama3.2 --chat --ids 'What is the capital of France?'",
                &rc);
  ASSERT_EQ(rc, 0) << out;
  const Tokenizer* l = test::fixture("llama3.2");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<int32_t>>(),
            l->encode(apply_chat_template(ChatFamily::Llama3, kQuestion, true)));
  out = run_cmd(std::string(VKLLM_EXE) + " tokenize --tokenizer " + test::fixtures_dir() +
                    "/qwen3 --decode '" + nlohmann::json(q->encode("Grüße, 世界")).dump() + "'",
                &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "Grüße, 世界");
  out = run_cmd(std::string(VKLLM_EXE) + " tokenize --tokenizer " + test::fixtures_dir() +
                    "/qwen3 --ids --text Hello",
                &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<int32_t>>(), q->encode("Hello"));
  out = run_cmd(std::string(VKLLM_EXE) + " tokenize --tokenizer /nonexistent x 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
}

}  // namespace
}  // namespace vkllm
