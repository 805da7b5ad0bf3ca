// ChatRenderer (tokenizer/chat_render.h): which renderer a checkpoint gets, and that the Jinja
// path gives exactly what @huggingface/jinja renders from the checkpoint's own template (the
// references in reference/chat.json, chat_tools.json and chat_render.json).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "fixtures.h"
#include "tokenizer/chat_render.h"

namespace vkllm {
namespace {

using ojson = nlohmann::ordered_json;

// The renderer of the fixture NAME as an artifact of architecture ARCH would have it.
ChatRenderer renderer(const std::string& name, Arch arch) {
  const Tokenizer* tok = test::fixture(name);
  if (!tok) throw Error("fixture missing");
  const std::string cfg =
      read_text_file(test::fixtures_dir() + "/" + name + "/tokenizer_config.json");
  return ChatRenderer::make(arch, *tok, chat_template_of(cfg, "", name), name);
}

std::vector<ChatMessage> messages_of(const ojson& c) {
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
  return msgs;
}

ojson reference(const char* file) {
  std::ifstream f(test::tests_dir() + "/reference/" + file);
  EXPECT_TRUE(f.good()) << file;
  return ojson::parse(f);
}

TEST(ChatRenderer, PicksTheCheckpointTemplateOrTheNativeFormat) {
  EXPECT_TRUE(renderer("qwen3", Arch::Qwen3).uses_checkpoint_template());
  EXPECT_EQ(renderer("qwen3", Arch::Qwen3).describe(), "the checkpoint's chat template (Jinja)");
  // Llama 3 keeps the plain format of docs/design.md section 1; Phi-4-mini its tool convention.
  EXPECT_EQ(renderer("llama3.2", Arch::Llama).native_family(), ChatFamily::Llama3);
  EXPECT_EQ(renderer("llama3.2", Arch::Llama).describe(), "native llama3 format");
  EXPECT_EQ(renderer("phi4mini", Arch::Phi3).native_family(), ChatFamily::Phi4Mini);
  // A Llama-architecture checkpoint with another tokenizer gets its own template.
  EXPECT_TRUE(renderer("gemma3", Arch::Llama).uses_checkpoint_template());
  EXPECT_TRUE(renderer("qwen3", Arch::Llama).uses_checkpoint_template());
  // ... and so does one with the Llama 3 tokenizer and a template in another format (SmolLM3).
  const Tokenizer* l = test::fixture("llama3.2");
  ASSERT_NE(l, nullptr);
  EXPECT_TRUE(
      ChatRenderer::make(Arch::Llama, *l, "{{ '<|im_start|>' }}", "s").uses_checkpoint_template());
  EXPECT_EQ(ChatRenderer::make(Arch::Llama, *l, "", "s").native_family(), ChatFamily::Llama3);
  // No template: Qwen3 falls back to its native format; others have none.
  const Tokenizer* q = test::fixture("qwen3");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(ChatRenderer::make(Arch::Qwen3, *q, "", "q").native_family(), ChatFamily::Qwen3);
  EXPECT_FALSE(ChatRenderer::make(Arch::Llama, *q, "", "q").native_family());
}

// Qwen3 through its own template gives what the native renderer gave: the references.
TEST(ChatRenderer, Qwen3TemplateEqualsTheReferenceRenderings) {
  const ChatRenderer r = renderer("qwen3", Arch::Qwen3);
  ASSERT_TRUE(r.uses_checkpoint_template());
  size_t n = 0;
  for (const char* file : {"chat.json", "chat_tools.json"}) {
    for (const auto& c : reference(file)) {
      if (c.at("family") != "qwen3") continue;
      ChatOptions opt;
      opt.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
      opt.disable_thinking = c.at("options").value("disable_thinking", false);
      if (c.contains("tools") && !c.at("tools").is_null()) opt.tools = c.at("tools").dump();
      EXPECT_EQ(r.render(messages_of(c), opt), c.at("text").get<std::string>()) << c.dump();
      ++n;
    }
  }
  EXPECT_GE(n, 40u);
}

TEST(ChatRenderer, Gemma3TemplateEqualsTheReferenceRenderings) {
  const ChatRenderer r = renderer("gemma3", Arch::Llama);
  const Tokenizer* tok = test::fixture("gemma3");
  ASSERT_NE(tok, nullptr);
  size_t n = 0, raised = 0;
  for (const auto& c : reference("chat_render.json")) {
    if (c.at("family") != "gemma3") continue;
    ChatOptions opt;
    opt.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const auto msgs = messages_of(c);
    if (c.contains("error")) {
      // The reference's message, after our position of the raise_exception call.
      const std::string e = test::error_of([&] { r.render(msgs, opt); });
      const std::string head = "gemma3: chat template: template raised an exception at line ";
      const std::string tail = ": " + c.at("error").get<std::string>();
      EXPECT_EQ(e.rfind(head, 0), 0u) << e;
      EXPECT_TRUE(e.size() > tail.size() &&
                  e.compare(e.size() - tail.size(), tail.size(), tail) == 0)
          << e;
      ++raised;
      continue;
    }
    const std::string text = r.render(msgs, opt);
    EXPECT_EQ(text, c.at("text").get<std::string>()) << c.dump();
    EXPECT_EQ(tok->encode(text), c.at("ids").get<std::vector<int32_t>>()) << c.dump();
    ++n;
  }
  EXPECT_GE(n, 8u);
  EXPECT_GE(raised, 2u);
}

TEST(ChatRenderer, BrokenOrMissingTemplatesAreOneLineErrors) {
  const Tokenizer* tok = test::fixture("llama2");
  ASSERT_NE(tok, nullptr);
  const std::vector<ChatMessage> hi{{"user", "Hi"}};
  // llama2's tokenizer_config.json has no chat_template.
  const std::string cfg = read_text_file(test::fixtures_dir() + "/llama2/tokenizer_config.json");
  const ChatRenderer none =
      ChatRenderer::make(Arch::Llama, *tok, chat_template_of(cfg, "", "m"), "m");
  EXPECT_EQ(test::error_of([&] { none.render(hi, {}); }),
            "m: the checkpoint has no chat template (tokenizer_config.json chat_template or "
            "chat_template.jinja): give a raw prompt");
  // A template that does not parse still loads; rendering names the position.
  const ChatRenderer bad = ChatRenderer::make(Arch::Llama, *tok, "{% for m in messages %}x", "m");
  EXPECT_EQ(test::error_of([&] {
              bad.render(hi, {});
            }).rfind("m: chat template: template syntax error at line 1", 0),
            0u);
  EXPECT_NE(bad.describe().find("does not parse"), std::string::npos);
  // Errors while rendering, and bad tool-call arguments, are one line too.
  const ChatRenderer undef =
      ChatRenderer::make(Arch::Llama, *tok, "{{ messages[0].content.nope() }}", "m");
  const std::string e = test::error_of([&] { undef.render(hi, {}); });
  EXPECT_EQ(e.rfind("m: chat template: template error at line 1", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  const ChatRenderer ok = ChatRenderer::make(Arch::Llama, *tok, "{{ messages | tojson }}", "m");
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"c", "f", "{not json"});
  EXPECT_EQ(test::error_of([&] { ok.render({call}, {}); }),
            "m: chat template: a tool call's arguments is not valid JSON");
  ChatOptions tools;
  tools.tools = "{}";
  EXPECT_EQ(test::error_of([&] { ok.render(hi, tools); }),
            "m: chat template: the tools must be a JSON array");
}

TEST(ChatRenderer, TemplateSources) {
  // chat_template.jinja wins; a list of named templates gives "default".
  EXPECT_EQ(chat_template_of(R"({"chat_template": "a"})", "b", "w"), "b");
  EXPECT_EQ(chat_template_of(R"({"chat_template": "a"})", "", "w"), "a");
  EXPECT_EQ(chat_template_of(R"({"chat_template": null})", "", "w"), "");
  EXPECT_EQ(chat_template_of("", "", "w"), "");
  EXPECT_EQ(
      chat_template_of(
          R"({"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]})",
          "", "w"),
      "d");
  EXPECT_EQ(test::error_of([] { chat_template_of(R"({"chat_template": 3})", "", "w"); }),
            "w: tokenizer_config.json chat_template must be a string or a list of named templates");
  EXPECT_EQ(test::error_of([] {
              chat_template_of(R"({"chat_template": [{"name": "x", "template": "t"}]})", "", "w");
            }),
            "w: tokenizer_config.json chat_template: the list has no \"default\" template");
}

}  // namespace
}  // namespace vkllm
