// Tool calling of `vkllm serve` without a model: the request checks (tools, tool_choice, the tool
// history), the reply parser on crafted generated text of each chat family, whole and streamed in
// pieces of every size, and the streamed chunks fed to the official openai SDK's own accumulator
// (tool_stream.test.mjs), which must rebuild the same message.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../cli/cli_fixture.h"
#include "grammar/grammar.h"
#include "serve/openai.h"
#include "serve/tools.h"
#include "serve_fixture.h"

using namespace vkllm;
using namespace vkllm::serve;
using nlohmann::json;

namespace {

const std::vector<std::string> kNames = {"get_weather", "add"};

struct Parsed {
  std::string content;
  std::vector<ChatToolCall> calls;
};

// The reply parsed as the server does, with the text pushed in pieces of `step` bytes (0: whole).
Parsed parse(CallSyntax s, const std::string& text, size_t step = 0, bool parallel = true) {
  ToolCallStream p(s, kNames, parallel);
  Parsed out;
  if (step == 0) {
    out.content = p.push(text);
  } else {
    for (size_t i = 0; i < text.size(); i += step) out.content += p.push(text.substr(i, step));
  }
  ToolCallStream::End e = p.finish();
  out.content += e.content;
  out.calls = e.calls;
  return out;
}

void expect_calls(const Parsed& p, const std::vector<std::pair<std::string, json>>& want) {
  ASSERT_EQ(p.calls.size(), want.size()) << p.content;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, want[i].first);
    EXPECT_EQ(json::parse(p.calls[i].arguments), want[i].second);
    EXPECT_EQ(p.calls[i].id.rfind("call_", 0), 0u);
    EXPECT_EQ(p.calls[i].id.size(), 29u);
  }
}

// Every piece size gives the same split as the whole text.
void expect_same_streamed(CallSyntax s, const std::string& text) {
  const Parsed whole = parse(s, text);
  for (size_t step = 1; step <= text.size(); ++step) {
    const Parsed part = parse(s, text, step);
    EXPECT_EQ(part.content, whole.content) << "step " << step;
    ASSERT_EQ(part.calls.size(), whole.calls.size()) << "step " << step;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(part.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(part.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

}  // namespace

TEST(ServeTools, Qwen3Calls) {
  const std::string two =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": "
      "{\"a\": 1, \"b\": 2.5}}\n</tool_call>";
  Parsed p = parse(CallSyntax::Qwen3, two);
  EXPECT_EQ(p.content, "Let me check.\n");
  expect_calls(
      p, {{"get_weather", {{"city", "Paris"}, {"unit", "c"}}}, {"add", {{"a", 1}, {"b", 2.5}}}});
  // The arguments keep the model's key order.
  EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"c\"}");
  expect_same_streamed(CallSyntax::Qwen3, two);
  // parallel_tool_calls false: the first call only.
  expect_calls(parse(CallSyntax::Qwen3, two, 0, false),
               {{"get_weather", {{"city", "Paris"}, {"unit", "c"}}}});
  // A reply cut before its closing tag still is a call when its JSON is whole.
  expect_calls(parse(CallSyntax::Qwen3, "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}"),
               {{"add", json::object()}});
  // Plain text, and text that only looks like the start of a call.
  EXPECT_EQ(parse(CallSyntax::Qwen3, "Paris is <tool sunny").content, "Paris is <tool sunny");
  EXPECT_TRUE(parse(CallSyntax::Qwen3, "Paris is <tool sunny").calls.empty());
  expect_same_streamed(CallSyntax::Qwen3, "Paris is <tool_ <tool sunny <");
}

TEST(ServeTools, MalformedCallsStayContent) {
  for (const std::string& t : {
           std::string(
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>"),
           std::string("<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"),
           std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),
           std::string("<tool_call>\n{\"name\": \"add\", \"arguments\": [1]}\n</tool_call>"),
           std::string(
               "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call> and then"),
           std::string("<tool_call>"),
       }) {
    const Parsed p = parse(CallSyntax::Qwen3, "x " + t);
    EXPECT_TRUE(p.calls.empty()) << t;
    EXPECT_EQ(p.content, "x " + t);
    expect_same_streamed(CallSyntax::Qwen3, "x " + t);
  }
  EXPECT_TRUE(
      parse(CallSyntax::Llama3, "{\"name\": \"add\", \"parameters\": {\"a\": ").calls.empty());
  EXPECT_TRUE(parse(CallSyntax::Phi4Mini, "<|tool_call|>[{\"name\": \"nope\"}]<|/tool_call|>")
                  .calls.empty());
}

TEST(ServeTools, Llama3Calls) {
  const std::string t = "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  Parsed p = parse(CallSyntax::Llama3, t);
  EXPECT_EQ(p.content, "");
  expect_calls(p, {{"get_weather", {{"city", "Paris"}}}});
  expect_same_streamed(CallSyntax::Llama3, t);
  expect_calls(
      parse(CallSyntax::Llama3, "<|python_tag|>{\"name\": \"add\", \"arguments\": {\"a\": 1}}"),
      {{"add", {{"a", 1}}}});
  // Text first: plain content, a JSON object later in it is no call.
  const std::string text = "Sure: {\"name\": \"add\", \"parameters\": {}}";
  EXPECT_EQ(parse(CallSyntax::Llama3, text).content, text);
  EXPECT_TRUE(parse(CallSyntax::Llama3, text).calls.empty());
  expect_same_streamed(CallSyntax::Llama3, text);
  expect_same_streamed(CallSyntax::Llama3, " <|python_ta no tag");
}

TEST(ServeTools, Phi4MiniCalls) {
  const std::string t =
      "On it.<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}, "
      "{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}]<|/tool_call|>";
  Parsed p = parse(CallSyntax::Phi4Mini, t);
  EXPECT_EQ(p.content, "On it.");
  expect_calls(p, {{"get_weather", {{"city", "Zürich"}}}, {"add", {{"a", 2}, {"b", 3}}}});
  expect_same_streamed(CallSyntax::Phi4Mini, t);
}

TEST(ServeTools, RequestChecks) {
  const json weather = {{"type", "function"},
                        {"function",
                         {{"name", "get_weather"},
                          {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}};
  const auto req = [&](json extra) {
    json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", {weather}}};
    b.update(extra);
    return b.dump();
  };
  const auto status_of = [](const std::string& body, std::string* param = nullptr) {
    try {
      parse_request(body, true);
    } catch (const HttpError& e) {
      if (param) *param = e.param;
      return e.status;
    }
    return 200;
  };
  Request r =
      parse_request(req({{"tool_choice", "required"}, {"parallel_tool_calls", false}}), true);
  EXPECT_EQ(r.tools.names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(r.tools.choice, ToolChoice::Required);
  EXPECT_FALSE(r.tools.parallel);
  // The tools' text keeps the client's key order.
  EXPECT_EQ(
      parse_request(
          R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"parameters":{"type":"object"},"name":"z"}}]})",
          true)
          .tools.tools_json,
      R"([{"type":"function","function":{"parameters":{"type":"object"},"name":"z"}}])");
  r = parse_request(
      req({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
      true);
  EXPECT_EQ(r.tools.choice, ToolChoice::Named);
  std::string param;
  EXPECT_EQ(
      status_of(req({{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
                &param),
      400);
  EXPECT_EQ(param, "tool_choice");
  EXPECT_EQ(status_of(req({{"tool_choice", "sometimes"}})), 400);
  EXPECT_EQ(status_of(req({{"tools", {{{"type", "retrieval"}}}}})), 400);
  EXPECT_EQ(
      status_of(req({{"tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}}}),
                &param),
      400);
  EXPECT_EQ(param, "tools[0].function.name");
  EXPECT_EQ(
      status_of(
          req({{"tools",
                {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}}),
          &param),
      400);
  EXPECT_EQ(param, "tools[0].function.parameters");
  EXPECT_EQ(status_of(req({{"tools", {weather, weather}}})), 400);
  EXPECT_EQ(status_of(req({{"tools", nullptr}, {"tool_choice", "required"}})), 400);
  EXPECT_EQ(status_of(req({{"parallel_tool_calls", "yes"}})), 400);
  // The history: an assistant call (content null) and its result; a result that answers no call.
  const json call = {
      {"id", "call_1"},
      {"type", "function"},
      {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}};
  json msgs = {{{"role", "user"}, {"content", "weather?"}},
               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
               {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}};
  r = parse_request(req({{"messages", msgs}}), true);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].tool_calls.at(0).arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  msgs[2]["tool_call_id"] = "call_2";
  EXPECT_EQ(status_of(req({{"messages", msgs}}), &param), 400);
  EXPECT_EQ(param, "messages[2].tool_call_id");
  msgs[2].erase("tool_call_id");
  EXPECT_EQ(status_of(req({{"messages", msgs}})), 400);
  json bad_args = msgs;
  bad_args[1]["tool_calls"][0]["function"]["arguments"] = "[1, 2]";
  EXPECT_EQ(status_of(req({{"messages", bad_args}}), &param), 400);
  EXPECT_EQ(param, "messages[1].tool_calls[0].function.arguments");
  json user_calls = {{{"role", "user"}, {"content", "x"}, {"tool_calls", {call}}}};
  EXPECT_EQ(status_of(req({{"messages", user_calls}})), 400);
  EXPECT_EQ(status_of(req({{"functions", {weather}}})), 400);
}

// The stream of a reply with calls, as the server writes it (content chunks while the text
// streams, then the held-back text, the tool_calls deltas and the finish chunk), rebuilt by the
// openai SDK's ChatCompletionStream in node.
TEST(ServeTools, StreamedCallsAssembledByTheOpenAISdk) {
  json cases = json::array();
  const std::vector<std::pair<CallSyntax, std::string>> replies = {
      {CallSyntax::Qwen3,
       "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, "
       "France (the capital)\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
       "\"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"},
      {CallSyntax::Llama3, "{\"name\": \"add\", \"parameters\": {\"a\": 10, \"b\": \"ünï\"}}"},
      {CallSyntax::Phi4Mini,
       "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Oslo\"}}]<|/tool_call|>"},
      {CallSyntax::Qwen3, "No call here <tool_c"},
  };
  Request r;
  r.chat = true;
  for (const auto& [syntax, text] : replies) {
    std::string sse;
    const auto put = [&](const json& j) { sse += "data: " + j.dump() + "\n\n"; };
    put(stream_chunk(r, "chatcmpl-1", 1, "m", "", true, ""));
    ToolCallStream p(syntax, kNames, true);
    for (size_t i = 0; i < text.size(); i += 3)
      if (std::string c = p.push(text.substr(i, 3)); !c.empty())
        put(stream_chunk(r, "chatcmpl-1", 1, "m", c, false, ""));
    ToolCallStream::End end = p.finish();
    if (!end.content.empty()) put(stream_chunk(r, "chatcmpl-1", 1, "m", end.content, false, ""));
    for (const json& c : tool_call_chunks(r, "chatcmpl-1", 1, "m", end.calls)) put(c);
    put(stream_chunk(r, "chatcmpl-1", 1, "m", "", false,
                     end.calls.empty() ? "stop" : "tool_calls"));
    sse += "data: [DONE]\n\n";
    const Parsed whole = parse(syntax, text);
    json want_calls = json::array();
    for (const ChatToolCall& c : whole.calls)
      want_calls.push_back({{"name", c.name}, {"arguments", json::parse(c.arguments)}});
    cases.push_back({{"sse", sse}, {"content", whole.content}, {"calls", want_calls}});
  }
  const std::string file = test::scratch_dir() + "/tool_streams.json";
  std::ofstream(file) << cases.dump();
  const test::NodeResult n = test::run_node("tool_stream.test.mjs", {{"VKLLM_STREAMS", file}}, 60);
  std::printf("%s", n.out.c_str());
  EXPECT_EQ(n.code, 0) << n.out << n.err;
  EXPECT_EQ(n.out.find("FAIL"), std::string::npos);
}

// tool_choice "required" and a named function (the server's constrain_tool_choice): for each
// family, the grammar of forced_call_schema, walked by random allowed tokens of a byte vocabulary
// under the budget rule, always gives a text that, after the forced prefix, the family's reply
// parser reads as calls of the allowed functions whose arguments the parameters schema accepts.
// A tool whose schema is outside the grammar's subset (a pattern) is refused by the compiler and
// the arguments fall back to any JSON object.
TEST(ServeTools, ForcedCallsParseAsValidCalls) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\": ", "get_weather", "city", "\"}", "12"}) bytes.push_back(t);
  std::vector<bool> special(bytes.size(), false);
  const auto index = std::make_shared<const grammar::TokenIndex>(
      bytes, special, std::vector<int32_t>{}, static_cast<int32_t>(bytes.size()));
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["a", "b"], "additionalProperties": false}}}])");
  for (CallSyntax syntax : {CallSyntax::Qwen3, CallSyntax::Llama3, CallSyntax::Phi4Mini})
    for (bool named : {false, true}) {
      ToolSpec spec;
      spec.tools_json = tools.dump();
      spec.names = kNames;
      spec.choice = named ? ToolChoice::Named : ToolChoice::Required;
      spec.choice_name = "add";
      spec.parallel = syntax == CallSyntax::Phi4Mini && !named;
      const auto g = grammar::compile_json_schema(forced_call_schema(spec, syntax, false));
      std::mt19937 rng(7);
      for (int walk = 0; walk < 20; ++walk) {
        grammar::Matcher m(g, index);
        std::vector<uint8_t> allowed;
        std::string text;
        for (int left = 160; left > 0 && !m.complete(); --left) {
          m.fill_mask(allowed, left);
          std::vector<int32_t> ids;
          for (size_t i = 0; i < allowed.size(); ++i)
            if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
          ASSERT_FALSE(ids.empty());
          const int32_t id = ids[rng() % ids.size()];
          ASSERT_TRUE(m.accept_token(id));
          text += bytes[static_cast<size_t>(id)];
        }
        ASSERT_TRUE(m.complete()) << text;
        ToolCallStream p(syntax, named ? std::vector<std::string>{"add"} : kNames, spec.parallel);
        std::string content = p.push(forced_call_prefix(syntax));
        content += p.push(text);
        ToolCallStream::End e = p.finish();
        const std::string what = std::to_string(static_cast<int>(syntax)) + ": " + text;
        ASSERT_FALSE(e.calls.empty()) << what;
        EXPECT_EQ(content + e.content, "") << what;
        for (const ChatToolCall& c : e.calls) {
          if (named) {
            EXPECT_EQ(c.name, "add") << what;
          }
          const json args = json::parse(c.arguments);
          ASSERT_TRUE(args.is_object()) << what;
          if (c.name == "get_weather") {
            EXPECT_TRUE(args.at("city").is_string()) << what;
          }
          if (c.name == "add") {
            EXPECT_EQ(args.size(), 2u) << what;
            EXPECT_TRUE(args.at("a").is_number_integer() && args.at("b").is_number_integer())
                << what;
          }
        }
      }
    }
  ToolSpec odd;
  odd.tools_json = R"([{"type": "function", "function": {"name": "f", "parameters":
    {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}}}}])";
  odd.names = {"f"};
  odd.choice = ToolChoice::Required;
  EXPECT_THROW(grammar::compile_json_schema(forced_call_schema(odd, CallSyntax::Qwen3, false)),
               grammar::SchemaError);
  EXPECT_NO_THROW(grammar::compile_json_schema(forced_call_schema(odd, CallSyntax::Qwen3, true)));
}
