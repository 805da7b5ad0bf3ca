// Conformance against the reference tokenizer (transformers.js via @lenml/tokenizers): identical
// ids on the committed corpus for the five tokenizers (byte-level: qwen3, llama3.2, phi4mini;
// SentencePiece style: gemma3, llama2), round trips, streaming decode, chat prompts.
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "fixtures.h"
#include "tokenizer/utf8.h"

namespace vkllm {
namespace {

using nlohmann::json;

struct CorpusLine {
  std::string cat, text;  // text: raw bytes (hex lines decoded to bytes)
  bool is_bytes = false;
};

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

const std::vector<CorpusLine>& corpus() {
  static const std::vector<CorpusLine> lines = [] {
    std::vector<CorpusLine> v;
    for (const auto& j : read_jsonl(test::tests_dir() + "/corpus.jsonl")) {
      CorpusLine c;
      c.cat = j.at("cat").get<std::string>();
      if (j.contains("hex")) {
        std::string hex = j.at("hex").get<std::string>();
        for (size_t i = 0; i + 1 < hex.size(); i += 2)
          c.text.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
        c.is_bytes = true;
      } else {
        c.text = j.at("text").get<std::string>();
      }
      v.push_back(std::move(c));
    }
    return v;
  }();
  return lines;
}

std::string show(const std::vector<int32_t>& ids, size_t max = 40) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < max; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + (ids.size() > max ? ",...]" : "]");
}

class Conformance : public ::testing::TestWithParam<std::string> {};
class ChatConformance : public Conformance {};

// The chat family of a fixture (the three ChatConformance instantiates).
ChatFamily chat_family(const std::string& fixture) {
  return fixture == "qwen3"      ? ChatFamily::Qwen3
         : fixture == "llama3.2" ? ChatFamily::Llama3
                                 : ChatFamily::Phi4Mini;
}

// The SentencePiece-style fixtures: their reference has ids_special on every line and the
// reference decode wherever it differs from the input.
bool is_spm(const std::string& name) {
  return name == "gemma3" || name == "llama2";
}

TEST_P(Conformance, CorpusIdsIdenticalToReference) {
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto& lines = corpus();
  auto ref = read_jsonl(test::tests_dir() + "/reference/" + GetParam() + ".jsonl");
  ASSERT_EQ(ref.size(), lines.size())
      << "reference out of date: rerun tools/fixtures/make_reference.mjs";
  ASSERT_GE(lines.size(), 3000u);
  size_t mismatches = 0, roundtrips = 0, special_checked = 0, bytes_lines = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& want = ref[i].at("ids").get_ref<const json::array_t&>();
    std::vector<int32_t> expect;
    expect.reserve(want.size());
    for (const auto& x : want) expect.push_back(x.get<int32_t>());
    std::vector<int32_t> got = tok->encode(lines[i].text);
    if (got != expect) {
      if (++mismatches <= 5)
        ADD_FAILURE() << GetParam() << " line " << i + 1 << " (" << lines[i].cat
                      << "): ids differ\n  ours " << show(got) << "\n  ref  " << show(expect);
      continue;
    }
    // The reference saw the text with invalid UTF-8 replaced (U+FFFD per maximal subpart).
    if (ref[i].at("rt").get<bool>()) {
      EXPECT_EQ(tok->decode(got), utf8::lossy(lines[i].text))
          << GetParam() << " line " << i + 1 << ": round trip";
      ++roundtrips;
    } else if (ref[i].contains("text")) {
      EXPECT_EQ(tok->decode(got), ref[i].at("text").get<std::string>())
          << GetParam() << " line " << i + 1 << ": decode differs from the reference decode";
    }
    if (lines[i].is_bytes) ++bytes_lines;
    if (ref[i].contains("ids_special")) {
      std::vector<int32_t> want_sp = ref[i].at("ids_special").get<std::vector<int32_t>>();
      EXPECT_EQ(tok->encode(lines[i].text, true), want_sp)
          << GetParam() << " line " << i + 1 << ": add_special";
      ++special_checked;
    }
  }
  EXPECT_EQ(mismatches, 0u) << GetParam() << ": " << mismatches << " of " << lines.size()
                            << " lines differ";
  EXPECT_GT(roundtrips, lines.size() / 2);
  EXPECT_EQ(special_checked, is_spm(GetParam()) ? lines.size() : 100u);
  EXPECT_GT(bytes_lines, 100u);
  std::printf("[%s] %zu lines identical, %zu round trips checked, %zu invalid-UTF-8 lines\n",
              GetParam().c_str(), lines.size() - mismatches, roundtrips, bytes_lines);
}

TEST_P(Conformance, StreamingDecodeConcatenationEqualsDecode) {
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  for (const auto& line : corpus()) {
    std::vector<int32_t> ids = tok->encode(line.text);
    for (bool skip : {false, true}) {
      StreamDecoder sd(*tok, skip);
      std::string all;
      for (int32_t id : ids) {
        std::string piece = sd.push(id);
        ASSERT_TRUE(utf8::is_valid(piece)) << "stream emitted a partial UTF-8 sequence";
        all += piece;
      }
      all += sd.flush();
      ASSERT_EQ(all, tok->decode(ids, skip)) << line.cat << ": " << line.text.substr(0, 80);
    }
  }
}

TEST_P(ChatConformance, ChatPromptsTokenExactAgainstReferenceRendering) {
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  std::ifstream f(test::tests_dir() + "/reference/chat.json");
  ASSERT_TRUE(f.good());
  json cases = json::parse(f);
  const ChatFamily fam = chat_family(GetParam());
  size_t n = 0;
  for (const auto& c : cases) {
    if (c.at("family") != GetParam()) continue;
    std::vector<ChatMessage> msgs;
    for (const auto& m : c.at("messages"))
      msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    ChatOptions opt;
    opt.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const json& o = c.at("options");
    opt.disable_thinking = o.value("disable_thinking", false);
    if (o.contains("llama_date")) opt.llama_date = o.at("llama_date").get<std::string>();
    std::string text = apply_chat_template(fam, msgs, opt);
    EXPECT_EQ(text, c.at("text").get<std::string>()) << c.dump();
    EXPECT_EQ(tok->encode(text), c.at("ids").get<std::vector<int32_t>>()) << c.dump();
    ++n;
  }
  EXPECT_GE(n, 10u);
}

// Conversations with tools, tool calls and tool results: byte-exact against the real templates
// rendered by @huggingface/jinja (tools/fixtures/make_chat_tools_reference.mjs).
TEST_P(ChatConformance, ChatToolsAgainstReferenceRendering) {
  using ojson = nlohmann::ordered_json;  // key order is part of the rendering
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  std::ifstream f(test::tests_dir() + "/reference/chat_tools.json");
  ASSERT_TRUE(f.good());
  const ojson cases = ojson::parse(f);
  const ChatFamily fam = chat_family(GetParam());
  size_t n = 0;
  for (const auto& c : cases) {
    if (c.at("family") != GetParam()) continue;
    std::vector<ChatMessage> msgs;
    for (const auto& m : c.at("messages")) {
      ChatMessage cm{m.at("role").get<std::string>(), m.at("content").get<std::string>()};
      if (m.contains("tool_calls"))
        for (const auto& tc : m.at("tool_calls"))
          cm.tool_calls.push_back({tc.at("id").get<std::string>(), tc.at("name").get<std::string>(),
                                   tc.at("arguments").get<std::string>()});
      cm.tool_call_id = m.value("tool_call_id", "");
      msgs.push_back(std::move(cm));
    }
    ChatOptions opt;
    opt.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (!c.at("tools").is_null()) opt.tools = c.at("tools").dump();
    if (c.at("options").contains("llama_date"))
      opt.llama_date = c.at("options").at("llama_date").get<std::string>();
    const std::string text = apply_chat_template(fam, msgs, opt);
    EXPECT_EQ(text, c.at("text").get<std::string>()) << c.dump();
    EXPECT_EQ(tok->encode(text), c.at("ids").get<std::vector<int32_t>>()) << c.dump();
    ++n;
  }
  EXPECT_GE(n, 8u);
}

// Not a gate: prints our encode throughput on the corpus (process CPU time, warm merge cache), to
// compare with `node tools/fixtures/make_reference.mjs ... --bench` (docs/tokenizer.md).
TEST_P(Conformance, EncodeThroughput) {
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  size_t bytes = 0;
  for (const auto& l : corpus()) bytes += l.text.size();
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = cpu();
    size_t n = 0;
    for (const auto& l : corpus()) n += tok->encode(l.text).size();
    best = std::min(best, cpu() - t0);
    ASSERT_GT(n, 0u);
  }
  std::printf("[%s] encode: %.2f MB/s (%zu bytes, best of 3: %.3f s CPU)\n", GetParam().c_str(),
              bytes / 1e6 / best, bytes, best);
}

// The compiled form (Tokenizer::compile, what artifacts embed) is the same tokenizer: every id's
// spelling, bytes and special flag, bos/eos, and every corpus line's ids (with and without the
// post-processor) and decode equal the tokenizer.json load's; its load time is printed beside.
TEST_P(Conformance, CompiledFormIsTheSameTokenizer) {
  const Tokenizer* tok = test::fixture(GetParam());
  ASSERT_NE(tok, nullptr);
  const std::string dir = test::fixtures_dir() + "/" + GetParam();
  const std::string json_text = read_text_file(dir + "/tokenizer.json");
  const std::string config = read_text_file(dir + "/tokenizer_config.json");
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer from_json = Tokenizer::from_text(json_text, config, "json");
  const auto t1 = std::chrono::steady_clock::now();
  const std::string compiled = Tokenizer::compile(json_text, "json", 7);
  const auto t2 = std::chrono::steady_clock::now();
  const Tokenizer c = Tokenizer::from_compiled(compiled, config, "compiled");
  const auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::printf("[%s] load: tokenizer.json %.0f ms (%zu bytes), compiled %.0f ms (%zu bytes)\n",
              GetParam().c_str(), ms(t0, t1), json_text.size(), ms(t2, t3), compiled.size());
  ASSERT_EQ(c.vocab_size(), tok->vocab_size());
  size_t differ = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id)
    differ += c.token(id) != tok->token(id) || c.token_bytes(id) != tok->token_bytes(id) ||
              c.is_special(id) != tok->is_special(id) ||
              c.token_id(tok->token(id)) != tok->token_id(tok->token(id));
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(c.bos_id(), tok->bos_id());
  EXPECT_EQ(c.eos_id(), tok->eos_id());
  size_t lines = 0;
  for (const auto& l : corpus()) {
    const std::vector<int32_t> ids = tok->encode(l.text);
    ASSERT_EQ(c.encode(l.text), ids) << GetParam() << ": " << l.cat;
    ASSERT_EQ(c.encode(l.text, true), tok->encode(l.text, true)) << GetParam() << ": " << l.cat;
    ASSERT_EQ(c.decode(ids), tok->decode(ids)) << GetParam() << ": " << l.cat;
    ++lines;
  }
  EXPECT_GE(lines, 3000u);
}

// A damaged compiled form is one clear error, never a crash or a different tokenizer: every
// truncation point of its first 256 and last 64 bytes and some between, a wrong magic, trailing
// bytes, and a merge or vocab id out of range.
TEST(CompiledTokenizer, DamageIsAnError) {
  const std::string dir = test::fixtures_dir() + "/qwen3";
  const std::string good = Tokenizer::compile(read_text_file(dir + "/tokenizer.json"), "t", 42);
  EXPECT_EQ(Tokenizer::compiled_source_key(good), 42u);
  EXPECT_EQ(Tokenizer::compiled_source_key(good.substr(0, 15)), std::nullopt);
  auto error = [](const std::string& bytes) {
    return test::error_of([&] { Tokenizer::from_compiled(bytes, "", "t"); });
  };
  EXPECT_EQ(error(good), "(no error)");
  for (size_t n = 0; n < good.size(); n += n < 256 || n + 64 > good.size() ? 1 : 65537)
    ASSERT_NE(error(good.substr(0, n)), "(no error)") << "truncated to " << n << " bytes";
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_EQ(error(bad), "t: not a compiled tokenizer (no VKTOK001 magic)");
  EXPECT_EQ(error(good + "x"), "t: the compiled tokenizer has bytes after its merges");
  bad = good;
  const uint32_t huge = 0x7FFFFFF0u;
  std::memcpy(&bad[bad.size() - 4], &huge, 4);  // the last merge's merged token
  EXPECT_NE(error(bad).find("has a token id outside the vocab"), std::string::npos) << error(bad);
  uint64_t rest = 0;
  std::memcpy(&rest, &good[16], 8);
  bad = good;
  std::memcpy(&bad[24 + rest + 4], &huge, 4);  // the first vocab entry's id
  EXPECT_NE(error(bad).find("out of range"), std::string::npos) << error(bad);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string s = p.param;
  for (auto& ch : s)
    if (ch == '.') ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Conformance,
                         ::testing::Values("qwen3", "llama3.2", "phi4mini", "gemma3", "llama2"),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, ChatConformance,
                         ::testing::Values("qwen3", "llama3.2", "phi4mini"), param_name);

}  // namespace
}  // namespace vkllm
