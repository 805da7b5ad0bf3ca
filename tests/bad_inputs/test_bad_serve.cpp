// The bad-input catalogue's entries for `vkllm serve` and `vkllm chat` (docs/robustness.md): each
// hostile request is answered with its status and an OpenAI error body, the server never crashes
// or wedges (after every case it still gives the greedy reply of `vkllm run --chat`), and its
// stderr has no internal error or sanitizer report. Chat: refusals as one line, a turn that does
// not fit the context refused without leaving the chat.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../cli/cli_fixture.h"
#include "../serve/serve_fixture.h"

using namespace vkllm::test;
using nlohmann::json;

namespace {

const std::string kQ = "What is the capital of France?";

struct Answer {
  int status = 0;
  json body;
};

Answer post(int port, const std::string& path, const std::string& body,
            const httplib::Headers& h = {}, const char* type = "application/json") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post(path, h, body, type);
  if (!r) return {};
  return {r->status, json::parse(r->body, nullptr, false)};
}

json chat(const json& messages) {
  return {{"messages", messages}, {"temperature", 0}, {"max_tokens", 6}};
}

}  // namespace

TEST(BadInputs, ServeHostileRequests) {
  const std::string art = shared_twin().artifact;
  const std::string want = greedy_chat_reply(art, kQ, 6);
  ServeProc s(art, {"--api-key", "k", "--max-body", "65536"});
  const httplib::Headers auth = {{"Authorization", "Bearer k"}};
  const json good = chat({{{"role", "user"}, {"content", kQ}}});
  std::string deep(60000, '[');
  struct Case {
    std::string name, path, body;
    httplib::Headers headers;
    int status;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"not JSON", "/v1/chat/completions", "{\"messages\": [", auth, 400, "not valid JSON"},
      {"empty body", "/v1/chat/completions", "", auth, 400, "not valid JSON"},
      {"a JSON array", "/v1/chat/completions", "[1, 2]", auth, 400, "JSON object"},
      {"60000 nested arrays", "/v1/chat/completions", deep, auth, 400, "not valid JSON"},
      {"invalid UTF-8", "/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", auth, 400, "JSON"},
      {"messages not a list", "/v1/chat/completions", R"({"messages": "hi"})", auth, 400,
       "messages"},
      {"no messages", "/v1/chat/completions", R"({"model": "x"})", auth, 400, "messages"},
      {"unknown role", "/v1/chat/completions", chat({{{"role", "tool"}, {"content", "x"}}}).dump(),
       auth, 400, "tool"},
      {"role not a string", "/v1/chat/completions", chat({{{"role", 7}, {"content", "x"}}}).dump(),
       auth, 400, "role"},
      {"image content", "/v1/chat/completions",
       chat({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}).dump(), auth, 400,
       "only text"},
      {"max_tokens 1e30", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1e30})", auth, 400,
       "max_tokens"},
      {"max_tokens 2^64", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":18446744073709551615})", auth,
       400, "max_tokens"},
      {"temperature NaN-like string", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"temperature":"NaN"})", auth, 400,
       "temperature"},
      {"top_p 7", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"top_p":7})", auth, 400, "top_p"},
      {"seed a float", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"seed":1.5})", auth, 400, "seed"},
      {"stop of 17 strings", "/v1/chat/completions",
       json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"stop", std::vector<std::string>(17, "x")}}
           .dump(),
       auth, 400, "stop"},
      {"tools", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]})", auth, 400,
       "tools"},
      // Tool calling.
      {"tools not a list", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":"get_weather"})", auth, 400,
       "'tools' must be an array"},
      {"tool name with a space", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get weather"}}]})",
       auth, 400, "tools[0].function.name"},
      {"tool parameters not an object", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]})",
       auth, 400, "parameters"},
      {"two tools of one name", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]})",
       auth, 400, "two tools"},
      {"129 tools", "/v1/chat/completions",
       json{
           {"messages", {{{"role", "user"}, {"content", "hi"}}}},
           {"tools", std::vector<json>(129, {{"type", "function"}, {"function", {{"name", "f"}}}})}}
           .dump(),
       auth, 400, "at most 128"},
      {"tool_choice naming no tool", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       auth, 400, "not in 'tools'"},
      {"tool_choice required, no tools", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})", auth, 400,
       "no 'tools'"},
      {"tool result answering no call", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_9","content":"x"}]})",
       auth, 400, "no earlier assistant"},
      {"tool call arguments not JSON", "/v1/chat/completions",
       R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]})",
       auth, 400, "arguments"},
      {"tool calls on a user message", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
       auth, 400, "only assistant"},
      {"legacy functions", "/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f"}]})", auth, 400,
       "functions"},
      // The Anthropic Messages API (its error shape also has error.message).
      {"messages API: not JSON", "/v1/messages", "{\"max_tokens\": ", auth, 400, "not valid JSON"},
      {"messages API: no max_tokens", "/v1/messages",
       R"({"messages":[{"role":"user","content":"hi"}]})", auth, 400, "max_tokens"},
      {"messages API: max_tokens 0", "/v1/messages",
       R"({"max_tokens":0,"messages":[{"role":"user","content":"hi"}]})", auth, 400, "max_tokens"},
      {"messages API: system role in messages", "/v1/messages",
       R"({"max_tokens":4,"messages":[{"role":"system","content":"hi"}]})", auth, 400, "role"},
      {"messages API: image block", "/v1/messages",
       R"({"max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})",
       auth, 400, "image"},
      {"messages API: tool_result answering nothing", "/v1/messages",
       R"({"max_tokens":4,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]})",
       auth, 400, "tool_result"},
      {"messages API: tool without input_schema", "/v1/messages",
       R"({"max_tokens":4,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]})",
       auth, 400, "input_schema"},
      {"messages API: server tool", "/v1/messages",
       R"({"max_tokens":4,"tools":[{"type":"bash_20250124","name":"bash"}],"messages":[{"role":"user","content":"hi"}]})",
       auth, 400, "custom"},
      {"messages API: no API key", "/v1/messages", good.dump(), {}, 401, "API key"},
      {"messages API: body over --max-body", "/v1/messages",
       json{{"max_tokens", 4},
            {"messages", {{{"role", "user"}, {"content", std::string(70000, 'x')}}}}}
           .dump(),
       auth, 413, "65536"},
      // The token endpoints.
      {"tokenize: content not a string", "/tokenize", R"({"content": 5})", auth, 400, "content"},
      {"detokenize: id past the vocabulary", "/detokenize", R"({"tokens": [1, 99999999]})", auth,
       400, "tokens[1]"},
      {"detokenize: id 2^64", "/detokenize", R"({"tokens": [18446744073709551615]})", auth, 400,
       "tokens[0]"},
      {"tools over --max-body", "/v1/chat/completions",
       json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"tools",
             {{{"type", "function"},
               {"function", {{"name", "f"}, {"description", std::string(70000, 'd')}}}}}}}
           .dump(),
       auth, 413, "65536"},
      {"prompt over the context", "/v1/completions",
       json{{"prompt", std::string(3000, 'a') + " b c d e f g h i j k l m n o p q r s t u v w x"}}
           .dump(),
       auth, 400, "context holds 64 tokens"},
      {"no API key", "/v1/chat/completions", good.dump(), {}, 401, "API key"},
      {"wrong API key", "/v1/completions", "{}", {{"Authorization", "Bearer j"}}, 401, "API key"},
      {"body over --max-body", "/v1/chat/completions",
       chat({{{"role", "user"}, {"content", std::string(70000, 'x')}}}).dump(), auth, 413, "65536"},
      {"gzip body",
       "/v1/chat/completions",
       "\x1f\x8b\x08",
       {{"Authorization", "Bearer k"}, {"Content-Encoding", "gzip"}},
       415,
       "compressed"},
      {"unknown path", "/v1/engines", "{}", auth, 404, "/v1/engines"},
      {"POST on models", "/v1/models", "{}", auth, 405, "GET"},
  };
  for (const Case& c : cases) {
    const Answer a = post(s.port(), c.path, c.body, c.headers);
    EXPECT_EQ(a.status, c.status) << c.name;
    ASSERT_TRUE(a.body.is_object() && a.body.contains("error")) << c.name << ": " << a.body;
    const std::string msg = a.body["error"]["message"];
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.name << ": " << msg;
  }
  // A request line and headers that are not HTTP; a client that connects and sends nothing.
  {
    httplib::Client c("127.0.0.1", s.port());
    auto r = c.Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  const Answer after = post(s.port(), "/v1/chat/completions", good.dump(), auth);
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(after.body["choices"][0]["message"]["content"], want);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  const std::string err = s.err();
  for (const char* bad : {"internal error", "AddressSanitizer", "runtime error", "terminate"})
    EXPECT_EQ(err.find(bad), std::string::npos) << err;
}

TEST(BadInputs, ServeAndChatRefusals) {
  // A model that cannot be opened: one line, exit 1, nothing listening.
  const Proc a = run_vkllm({"serve", "-m", "/nonexistent/m.vkllm", "--port", "0"});
  EXPECT_EQ(a.code, 1);
  EXPECT_EQ(a.err_lines().size(), 1u) << a.err;
  EXPECT_NE(a.err.find("/nonexistent/m.vkllm"), std::string::npos);
  const Proc b = run_vkllm({"chat", "-m", "/nonexistent/m.vkllm"});
  EXPECT_EQ(b.code, 1);
  EXPECT_EQ(b.err_lines().size(), 1u) << b.err;
  // A slot count out of range or not a number: one line naming --slots, nothing started.
  for (const char* n : {"0", "65", "two"}) {
    const Proc d =
        run_vkllm({"serve", "-m", shared_twin().artifact, "--port", "0", "--slots", n}, {}, 60);
    EXPECT_NE(d.code, 0) << n;
    EXPECT_NE(d.err.find("--slots"), std::string::npos) << d.err;
    EXPECT_EQ(d.err.find("serving"), std::string::npos) << d.err;
  }
  // A port already taken.
  ServeProc s(shared_twin().artifact, {"-q"});
  const Proc c = run_vkllm({"serve", "-m", shared_twin().artifact, "--backend", "cpu", "--port",
                            std::to_string(s.port())},
                           {}, 60);
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("cannot listen on 127.0.0.1:" + std::to_string(s.port())), std::string::npos)
      << c.err;
  // Chat on a pipe: a message too long for the context is refused with a line offering /reset;
  // the next message is answered.
  const std::string in = scratch_dir() + "/in.txt";
  {
    std::ofstream f(in);
    for (int i = 0; i < 100; ++i) f << "word ";
    f << "\n" << kQ << "\n";
  }
  const std::string cmd = "'" + std::string(VKLLM_EXE) + "' chat -m '" + shared_twin().artifact +
                          "' --json -n 4 < '" + in + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_NE(out.find("does not fit the context"), std::string::npos) << out;
  EXPECT_NE(out.find("/reset"), std::string::npos) << out;
  EXPECT_NE(out.find("\"reply\""), std::string::npos) << out;
}
