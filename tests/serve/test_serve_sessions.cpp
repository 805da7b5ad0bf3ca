// `vkllm serve` beyond one request at a time: the Vulkan backend against the CPU reference
// through the openai SDK (with the validation layer on), the KV slots that keep interleaved
// conversations' prefixes, and a non-streaming client that leaves. The references: the CPU
// backend's replies, a fresh server (nothing cached) for the same conversations, `vkllm run`.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "../cli/cli_fixture.h"
#include "serve_fixture.h"

using namespace vkllm::test;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A non-streamed chat completion; the parsed body (null when no answer or not 200).
json chat(int port, const json& messages, int max_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  const json body = {{"messages", messages}, {"temperature", 0}, {"max_tokens", max_tokens}};
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
  return res && res->status == 200 ? json::parse(res->body) : json();
}

}  // namespace

// The decision of docs/serve.md: the SDK, page and load suites run on the CPU backend; this one
// runs `vkllm serve --backend vulkan` (lavapipe here) under the Khronos validation layer: its
// greedy replies, streamed and not, and their usage equal the CPU backend's, and its stderr has
// no validation message.
TEST(Serve, VulkanBackendRepliesEqualTheCpuBackends) {
  const std::string art = shared_twin().artifact;
  const auto t0 = Clock::now();
  ServeProc cpu(art, {"-q"}, "cpu");
  ServeProc vk(art, {}, "vulkan");  // per-request log lines on: the generation counts
  const NodeResult r =
      run_node("backends.test.mjs", {{"VKLLM_URL_A", cpu.url()},
                                     {"VKLLM_URL_B", vk.url()},
                                     {"VKLLM_MODEL", std::filesystem::path(art).stem().string()},
                                     {"VKLLM_QUESTION", "What is the capital of France?"},
                                     {"VKLLM_N", "4"}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(vk.stop(SIGTERM), 0);
  EXPECT_EQ(cpu.stop(SIGTERM), 0);
  const std::string err = vk.err();
  EXPECT_NE(err.find("serving"), std::string::npos) << err;
  EXPECT_NE(err.find(" generated, "), std::string::npos) << err;  // it did generate
  EXPECT_EQ(err.find("validation"), std::string::npos) << err;
  std::printf("both servers and the SDK: %.1f s\n", seconds_since(t0));
}

namespace {

struct Turn {
  std::string reply;
  int prompt = 0, completion = 0, cached = 0;
};

// Conversation c's next turn: its history plus the user message, on the server at `port`.
Turn turn(int port, json& history, const std::string& user, int n) {
  history.push_back({{"role", "user"}, {"content", user}});
  const json r = chat(port, history, n);
  Turn t;
  if (r.is_null()) return t;
  t.reply = r["choices"][0]["message"]["content"];
  t.prompt = r["usage"]["prompt_tokens"];
  t.completion = r["usage"]["completion_tokens"];
  t.cached = r["usage"]["prompt_tokens_details"]["cached_tokens"];
  history.push_back({{"role", "assistant"}, {"content", t.reply}});
  return t;
}

}  // namespace

// Two conversations of two turns, interleaved (A1 B1 A2 B2), on a server with two slots (one
// request at a time, --no-batching): each
// second turn takes all of its conversation's previous context (prompt and reply) from the KV
// cache and prefills only its new turn, though the other conversation ran in between. Every reply
// equals that of a fresh server, one with nothing cached for it: the first turns come from empty
// slots (0 cached), the second turns' messages go to a second, fresh server.
TEST(Serve, SlotsKeepInterleavedConversationsPrefixes) {
  const std::string art = shared_twin().artifact_long;
  constexpr int kReply = 3;  // tokens per reply (the CPU backend decodes ~2 tokens/s under ASan)
  const std::vector<std::vector<std::string>> users = {{"Hi.", "And then?"},
                                                       {"Name a color.", "Why?"}};
  std::vector<json> hist(2, json::array());
  std::vector<std::vector<Turn>> turns(2);
  {
    ServeProc s(art, {"--slots", "2", "--no-batching"});
    for (size_t k = 0; k < 2; ++k)
      for (size_t c = 0; c < 2; ++c)
        turns[c].push_back(turn(s.port(), hist[c], users[c][k], kReply));
    EXPECT_EQ(s.stop(SIGTERM), 0);
    EXPECT_NE(s.err().find("2 slots of"), std::string::npos) << s.err();
  }
  ServeProc fresh(art, {"--slots", "2", "-q", "--no-batching"});
  for (size_t c = 0; c < 2; ++c) {
    const Turn &first = turns[c][0], &second = turns[c][1];
    EXPECT_EQ(first.cached, 0) << "conversation " << c << ": its first turn ran on an empty slot";
    // The previous context is prompt + reply; its last token was generated but not yet fed.
    EXPECT_GE(second.cached, first.prompt + first.completion - 1) << "conversation " << c;
    std::printf("conversation %zu turn 2: %d prompt tokens, %d from the KV cache, %d prefilled\n",
                c, second.prompt, second.cached, second.prompt - second.cached);
    const json msgs(hist[c].begin(), hist[c].begin() + 3);  // user, assistant, user
    const json r = chat(fresh.port(), msgs, kReply);
    ASSERT_FALSE(r.is_null());
    EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << "not fresh";
    EXPECT_EQ(r["usage"]["prompt_tokens"], second.prompt);
    EXPECT_EQ(r["choices"][0]["message"]["content"], second.reply) << "conversation " << c;
  }
  EXPECT_EQ(fresh.stop(SIGTERM), 0);
}

// A non-streaming request for many tokens whose client gives up after 4 s (its prefill alone
// takes ~1.5 s under the sanitizers, more on a loaded machine), and another one queued behind it
// from 2 s on whose client gives up after 0.3 s of waiting: the first generation stops (the
// server's log line says the client left, with far fewer tokens than asked), the second is not
// generated at all, and the next request is served at once with the right reply.
TEST(Serve, NonStreamingClientThatLeavesStopsItsGeneration) {
  const std::string art = shared_twin().artifact_long;
  constexpr int kMax = 900, kReply = 2;
  const std::string want = greedy_chat_reply(art, "Name a color.", kReply);
  ServeProc s(art, {"--parallel", "1"});
  const auto leave_after = [&](int ms) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(ms / 1000, (ms % 1000) * 1000);
    const json body = {
        {"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
        {"temperature", 0},
        {"max_tokens", kMax},
        {"ignore_eos", true}};
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_FALSE(res) << "a long request was answered within " << ms << " ms";
  };  // the client closes its connection
  std::thread first(leave_after, 4000);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  std::thread second(leave_after, 300);  // waits for the first one's turn, then leaves
  second.join();
  first.join();
  const auto t0 = Clock::now();
  const json r = chat(s.port(), {{{"role", "user"}, {"content", "Name a color."}}}, kReply);
  const double next_s = seconds_since(t0);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["choices"][0]["message"]["content"], want);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  const std::string err = s.err();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      err, m,
      std::regex(R"(chatcmpl-\d+: .* (\d+) generated, length \(client left\) in (\d+) ms)")))
      << err;
  EXPECT_NE(err.find(": the client left before its turn; not generated"), std::string::npos) << err;
  EXPECT_NE(err.find("POST /v1/chat/completions 499"), std::string::npos) << err;
  const int generated = std::stoi(m[1]);
  const double ms = std::stod(m[2]);
  std::printf(
      "the abandoned request: %d of %d tokens in %.0f ms; the next one answered in %.2f s\n",
      generated, kMax, ms, next_s);
  EXPECT_LT(generated, kMax / 2);
  // Promptly: well before the abandoned generation would have ended at its own pace.
  EXPECT_LT(next_s * 1000, ms / std::max(generated, 1) * kMax / 2);
}

// Continuous batching under concurrent clients (load.test.mjs: plain fetch, a third streamed, some
// leaving after their first piece): 6 clients x 2 requests on --parallel 4. Every completed reply
// equals the greedy reply of `vkllm run` (one request alone), no 5xx, requests ran together (a
// log line shows several active), and afterwards no KV block is held and nothing runs.
TEST(Serve, ConcurrentClientsGetTheRepliesTheyGetAlone) {
  const std::string art = shared_twin().artifact;
  constexpr int kReplyTokens = 6;
  json want;
  want["questions"] = {"What is the capital of France?", "Name a color.", "Say hello."};
  want["answers"] = json::array();
  for (const auto& q : want["questions"])
    want["answers"].push_back(greedy_chat_reply(art, q.get<std::string>(), kReplyTokens));
  want["n"] = kReplyTokens;
  ServeProc s(art, {"--parallel", "4", "--queue", "8"});
  const NodeResult r = run_node("load.test.mjs", {{"VKLLM_URL", s.url()},
                                                  {"VKLLM_EXPECT", want.dump()},
                                                  {"VKLLM_CLIENTS", "6"},
                                                  {"VKLLM_REQUESTS", "2"}});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  const json fig = json::parse(r.out.substr(r.out.rfind("figures ") + 8), nullptr, false);
  ASSERT_TRUE(fig.is_object()) << r.out;
  EXPECT_EQ(fig["requests"], 12);
  EXPECT_EQ(fig["http_5xx"], 0);
  EXPECT_EQ(fig["wrong_text"], 0);
  EXPECT_GE(fig["completed"].get<int>(), 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // cancels of leavers land
  httplib::Client c("127.0.0.1", s.port());
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  const json health = json::parse(h->body);
  EXPECT_EQ(health["active"], 0) << h->body;
  EXPECT_EQ(health["kv_blocks_used"], 0) << h->body;
  EXPECT_EQ(s.stop(SIGTERM), 0);
  const std::string err = s.err();
  int most = 0;
  const std::regex active(R"(; (\d+) active, (\d+) waiting, KV blocks)");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), active); it != std::sregex_iterator();
       ++it)
    most = std::max(most, std::stoi((*it)[1]));
  EXPECT_GE(most, 2) << "no request ran beside another:\n" << err;
  EXPECT_NE(err.find("continuous batching: up to 4 sequences"), std::string::npos) << err;
}

// A model with sliding-window layers (the tiny-gemma3 twin at a context of 1,024, window 8) served
// with continuous batching on the CPU: the start line, /health and /metrics show the sliding
// layers' pool beside the full layers' (--parallel 2: 2 x 64 + 1 blocks of 16 tokens for the
// context, 2 x 34 for the window and a step's 512 tokens), and two concurrent greedy completions
// of 40 tokens (five windows past the prompt) equal the same requests sent one at a time.
TEST(Serve, SlidingWindowPoolInTheStartLineHealthAndMetrics) {
  const std::string dir = scratch_dir(), art = dir + "/gemma3.vkllm";
  Proc a = run_vkllm({"synth", "--preset", "tiny-gemma3", "-o", dir + "/twin", "-q"});
  Proc b = run_vkllm({"export", dir + "/twin", "--recipe", "non-quantized", "--max-context", "1024",
                      "-o", art, "-q"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  ServeProc s(art, {"--parallel", "2"}, "cpu");
  EXPECT_NE(s.err().find("KV pool 129 blocks of 16 tokens"), std::string::npos) << s.err();
  EXPECT_NE(s.err().find("sliding-window layers' pool 68 blocks"), std::string::npos) << s.err();
  EXPECT_NE(s.err().find("(window 8)"), std::string::npos) << s.err();
  auto complete = [&](const std::string& prompt) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(300, 0);
    const json body = {
        {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    return res && res->status == 200
               ? json::parse(res->body)["choices"][0]["text"].get<std::string>()
               : std::string("(none)");
  };
  const std::string p1 = "The quick brown fox jumps over the lazy dog.", p2 = "One two three.";
  std::string c1, c2;
  std::thread t([&] { c1 = complete(p1); });
  c2 = complete(p2);
  t.join();
  EXPECT_EQ(c1, complete(p1));
  EXPECT_EQ(c2, complete(p2));
  httplib::Client c("127.0.0.1", s.port());
  auto h = c.Get("/health");
  ASSERT_TRUE(h && h->status == 200);
  const json health = json::parse(h->body);
  EXPECT_EQ(health.value("kv_window", 0), 8) << h->body;
  EXPECT_EQ(health.value("kv_window_blocks_total", 0), 68) << h->body;
  EXPECT_EQ(health.value("kv_blocks_total", 0), 129) << h->body;
  EXPECT_LE(health.value("kv_window_blocks_cached", -1), 68) << h->body;
  EXPECT_EQ(health.value("kv_window_blocks_used", -1), 0) << h->body;
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find("\nvkllm_kv_window_blocks_total 68\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\nvkllm_kv_window_blocks_used 0\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("\nvkllm_kv_blocks_total 129\n"), std::string::npos) << m->body;
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.err();
}
