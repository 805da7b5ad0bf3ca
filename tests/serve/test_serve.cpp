// `vkllm serve` with real clients: the official OpenAI SDK for Node (sdk.test.mjs), a bounded
// load test (load.test.mjs), the chat page in Debian's chromium through playwright-core
// (page.test.mjs), and cpp-httplib's client for the queue and the signals. The references: the
// greedy replies of `vkllm run --chat` (a separate process) on the same artifact.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "../cli/cli_fixture.h"
#include "serve_fixture.h"

using namespace vkllm::test;
using nlohmann::json;

namespace {

const std::string kQ1 = "What is the capital of France?", kQ2 = "Name a color.";
constexpr int kN = 8;  // tokens per greedy reply

// A middle piece of `s` that starts and ends on UTF-8 boundaries (a stop string for the tests).
std::string middle_piece(const std::string& s) {
  size_t b = s.size() / 3, e = 2 * s.size() / 3;
  while (b < s.size() && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) ++b;
  while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
  return s.substr(b, e - b);
}

json expectations(const std::string& art) {
  json w;
  w["model"] = std::filesystem::path(art).stem().string();
  w["n"] = kN;
  w["ctx"] = 64;
  w["q1"] = kQ1;
  w["q2"] = kQ2;
  w["a1"] = greedy_chat_reply(art, kQ1, kN);
  w["a2"] = greedy_chat_reply(art, kQ2, kN);
  w["prompt"] = "The capital of France is";
  const Proc c = run_vkllm(
      {"run", "-m", art, "-p", "The capital of France is", "-n", std::to_string(kN), "--no-stats"});
  EXPECT_EQ(c.code, 0) << c.err;
  w["completion"] = c.out;
  w["stop"] = middle_piece(w["a1"].get<std::string>());
  return w;
}

}  // namespace

TEST(Serve, OpenAISdkAgainstTheServer) {
  const std::string art = shared_twin().artifact;
  const json want = expectations(art);
  ASSERT_GE(want["a1"].get<std::string>().size(), 6u) << "the twin's greedy reply is too short";
  ASSERT_FALSE(want["stop"].get<std::string>().empty());
  ServeProc s(art, {"--api-key", "sesame"});
  const NodeResult r =
      run_node("sdk.test.mjs",
               {{"VKLLM_URL", s.url()}, {"VKLLM_KEY", "sesame"}, {"VKLLM_EXPECT", want.dump()}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
  const std::string err = s.err();
  EXPECT_NE(err.find("(client left)"), std::string::npos) << err;  // the mid-stream disconnect
  EXPECT_NE(err.find("SIGTERM"), std::string::npos);
}

// /tokenize, /detokenize, /props and /metrics (endpoints.test.mjs).
TEST(Serve, TokenizePropsAndMetrics) {
  const std::string art = shared_twin().artifact;
  ServeProc s(art, {"--api-key", "sesame"});
  const NodeResult r =
      run_node("endpoints.test.mjs", {{"VKLLM_URL", s.url()},
                                      {"VKLLM_KEY", "sesame"},
                                      {"VKLLM_MODEL", std::filesystem::path(art).stem().string()},
                                      {"VKLLM_CTX", "64"}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
}

// The Anthropic Messages API with the Anthropic SDK (messages.test.mjs), on the long-context twin
// (the tool round trip's prompt outgrows 64 tokens).
TEST(Serve, AnthropicSdkAgainstTheServer) {
  const SharedTwin& t = shared_twin();
  json want = {{"model", std::filesystem::path(t.artifact_long).stem().string()},
               {"n", kN},
               {"q1", kQ1},
               {"q2", kQ2},
               {"a1", greedy_chat_reply(t.artifact_long, kQ1, kN)},
               {"a2", greedy_chat_reply(t.artifact_long, kQ2, kN)}};
  want["stop"] = middle_piece(want["a1"].get<std::string>());
  ASSERT_FALSE(want["stop"].get<std::string>().empty());
  ServeProc s(t.artifact_long, {"--api-key", "sesame"});
  const NodeResult r = run_node("messages.test.mjs", {{"VKLLM_URL", s.url()},
                                                      {"VKLLM_KEY", "sesame"},
                                                      {"VKLLM_TWIN", t.dir},
                                                      {"VKLLM_EXPECT", want.dump()}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
}

namespace {

struct Streamed {
  int status = 0;
  std::string body, retry_after;
};
Streamed post_stream(int port, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  Streamed out;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  if (res) {
    out.status = res->status;
    out.body = res->body;
    out.retry_after = res->get_header_value("Retry-After");
  }
  return out;
}

json chat_body(int max_tokens, bool stream) {
  return {{"messages", {{{"role", "user"}, {"content", kQ1}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

}  // namespace

// --parallel 1 --queue 1: of many simultaneous requests one runs, one waits, the others get 503
// at once (with Retry-After); the ones served are complete. Then SIGTERM during a streamed reply:
// the reply finishes (all its tokens, [DONE]) and the server exits 0.
TEST(Serve, QueueFullIs503AndSigtermFinishesTheRunningReply) {
  ServeProc s(shared_twin().artifact, {"--queue", "1", "--parallel", "1"});
  std::vector<std::thread> threads;
  std::vector<Streamed> got(10);
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = post_stream(s.port(), chat_body(20, false)); });
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (const Streamed& g : got) {
    if (g.status == 200) {
      ++ok;
      EXPECT_EQ(json::parse(g.body)["usage"]["completion_tokens"], 20);
    } else {
      EXPECT_EQ(g.status, 503) << g.body;
      EXPECT_EQ(g.retry_after, "1");
      ++busy;
      const json e = json::parse(g.body, nullptr, false);
      EXPECT_TRUE(e.contains("error") && e["error"]["message"].is_string()) << g.body;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1) << "no request was refused with --queue 1";
  // SIGTERM while a reply streams.
  std::atomic<bool> first{false};
  std::string body;
  int status = 0;
  std::thread reader([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = chat_body(40, true).dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      first = true;
      return true;
    };
    auto res = c.send(req);
    if (res) status = res->status;
  });
  while (!first) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int code = s.stop(SIGTERM);
  reader.join();
  EXPECT_EQ(code, 0) << s.err();
  EXPECT_EQ(status, 200);
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos) << body;
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  EXPECT_NE(s.err().find("40 generated"), std::string::npos) << s.err();
}

// The chat page in headless chromium: type a message, the reply streams in (several updates) and
// equals the greedy reply; a screenshot is written.
TEST(Serve, ChatPageInHeadlessChromium) {
  const std::string art = shared_twin().artifact;
  ServeProc s(art, {"-q"});
  const std::string png = scratch_dir() + "/chat-page.png";
  const NodeResult r = run_node("page.test.mjs", {{"VKLLM_URL", s.url()},
                                                  {"VKLLM_QUESTION", kQ1},
                                                  {"VKLLM_ANSWER", greedy_chat_reply(art, kQ1, 24)},
                                                  {"VKLLM_N", "24"},
                                                  {"VKLLM_SCREENSHOT", png}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_TRUE(std::filesystem::exists(png) && std::filesystem::file_size(png) > 1000);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}
