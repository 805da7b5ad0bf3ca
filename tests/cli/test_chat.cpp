// `vkllm chat` as a script and as a person see it: on a pipe (--json, one message per line) and
// through a pseudo-terminal (interactive: prompt, /stats, /reset, Ctrl-C). References: `vkllm run
// --chat`'s greedy reply (a separate process), and the token count of each turn's new text with
// the model's tokenizer and chat template (what prefilling only the new turn must cost).
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_fixture.h"
#include "vkllm/vkllm.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;

namespace {

const std::string kQ1 = "What is the capital of France?", kQ2 = "Name a color.";

std::shared_ptr<Model> cpu_model(const std::string& art) {
  ModelOptions o;
  o.backend = "cpu";
  return Model::open(art, o);
}

// Tokens of the second turn's new text: the conversation rendered with the first reply and the
// second question, past the first prompt and the reply itself.
int new_turn_tokens(const Model& m, const std::string& reply) {
  const std::string before = m.chat_prompt(kQ1) + reply;
  const std::string all =
      m.chat_prompt(std::vector<ChatTurn>{{"user", kQ1}, {"assistant", reply}, {"user", kQ2}});
  EXPECT_EQ(all.compare(0, before.size(), before), 0);
  return static_cast<int>(m.encode(all.substr(before.size())).size());
}

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(json::parse(l));
  return v;
}

}  // namespace

TEST(Chat, PipeTwoTurnsPrefillOnlyTheNewTurn) {
  const std::string art = shared_twin().artifact;
  const std::string in = scratch_dir() + "/in.txt";
  std::ofstream(in) << kQ1 << "\n" << kQ2 << "\n";
  const std::string script = "exec '" + std::string(VKLLM_EXE) + "' chat -m '" + art +
                             "' --json -n 6 --temperature 0 < '" + in + "'";
  const Proc r = run_vkllm({"chat", "-m", art, "--json", "-n", "6"}, {}, 120);  // stdin: none
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // no input, no reply
  FILE* p = ::popen(script.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  const auto turns = json_lines(out);
  ASSERT_EQ(turns.size(), 2u) << out;
  // Turn 1: the same reply as `vkllm run --chat`.
  const Proc ref = run_vkllm({"run", "-m", art, "--chat", "-p", kQ1, "-n", "6", "--no-stats"});
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_EQ(turns[0]["reply"], ref.out);
  EXPECT_EQ(turns[0]["reused_tokens"], 0);
  // Turn 2: the first turn stays in the KV cache; only the new text (and a last generated token
  // not fed yet) is prefilled.
  auto m = cpu_model(art);
  const int pending = turns[0]["finish_reason"] == "stop" ? 0 : 1;
  const int ctx1 = turns[0]["context_tokens"];
  EXPECT_EQ(turns[1]["reused_tokens"].get<int>(), ctx1 - pending);
  EXPECT_EQ(turns[1]["prompt_tokens"].get<int>(), new_turn_tokens(*m, turns[0]["reply"]) + pending);
  EXPECT_EQ(turns[1]["context_tokens"].get<int>(), ctx1 + new_turn_tokens(*m, turns[0]["reply"]) +
                                                       turns[1]["completion_tokens"].get<int>());
}

namespace {

// A child on a pseudo-terminal: write keys, read what the terminal shows.
struct Pty {
  pid_t pid = -1;
  int fd = -1;
  std::string seen;  // everything read so far
  explicit Pty(const std::vector<std::string>& args) {
    struct winsize ws {};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid = ::forkpty(&fd, nullptr, nullptr, &ws);
    if (pid == 0) {
      std::vector<char*> argv;
      std::vector<std::string> a = args;
      for (auto& s : a) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Pty() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (fd >= 0) ::close(fd);
  }
  void type(const std::string& s) {
    ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  // Reads until `needle` appears after offset `from`; returns its position (npos on timeout).
  size_t wait_for(const std::string& needle, size_t from, double timeout_s = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      const size_t at = seen.find(needle, from);
      if (at != std::string::npos) return at;
      if (std::chrono::steady_clock::now() > end) return std::string::npos;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return std::string::npos;
        seen.append(buf, static_cast<size_t>(n));
      }
    }
  }
  int wait_exit(double timeout_s = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) return -2;
      wait_for("\x01never", seen.size(), 0.05);
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

struct TurnStats {
  int context = -1, prefilled = -1, reused = -1, generated = -1;
};
TurnStats parse_stats(const std::string& text) {
  static const std::regex re(
      R"(context: (\d+) of \d+ tokens; last turn: (\d+) new tokens prefilled \((\d+) reused from the KV cache\), (\d+) generated)");
  std::smatch m;
  TurnStats t;
  if (std::regex_search(text, m, re))
    t = {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4])};
  return t;
}

}  // namespace

// Two turns through a terminal: the second prefills only its new tokens (/stats), /reset empties
// the context, Ctrl-C stops a long reply and the chat goes on, /exit leaves with 0.
TEST(Chat, TerminalTwoTurnsStatsResetAndCtrlC) {
  const std::string art = shared_twin().artifact_long;
  Pty t({VKLLM_EXE, "chat", "-m", art, "--backend", "cpu", "-n", "6", "--temperature", "0"});
  ASSERT_GT(t.pid, 0);
  ASSERT_NE(t.wait_for("> ", 0, 120), std::string::npos) << t.seen;
  size_t from = t.seen.size();
  t.type(kQ1 + "\r");
  ASSERT_NE(t.wait_for("\n> ", from), std::string::npos) << t.seen;
  from = t.seen.size();
  t.type("/stats\r");
  ASSERT_NE(t.wait_for("decode", from), std::string::npos) << t.seen;
  const TurnStats s1 = parse_stats(t.seen.substr(from));
  ASSERT_GT(s1.context, 0) << t.seen.substr(from);
  EXPECT_EQ(s1.reused, 0);
  // The reference: the same conversation on a pipe (--json gives the reply text and finish).
  const std::string in = scratch_dir() + "/in.txt";
  std::ofstream(in) << kQ1 << "\n";
  FILE* p = ::popen(("'" + std::string(VKLLM_EXE) + "' chat -m '" + art +
                     "' --backend cpu --json -n 6 --temperature 0 < '" + in + "'")
                        .c_str(),
                    "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  const json first = json::parse(out);
  EXPECT_EQ(first["context_tokens"].get<int>(), s1.context);
  from = t.seen.size();
  t.type(kQ2 + "\r");
  ASSERT_NE(t.wait_for("\n> ", from), std::string::npos) << t.seen;
  from = t.seen.size();
  t.type("/stats\r");
  ASSERT_NE(t.wait_for("decode", from), std::string::npos) << t.seen;
  const TurnStats s2 = parse_stats(t.seen.substr(from));
  auto m = cpu_model(art);
  const int pending = first["finish_reason"] == "stop" ? 0 : 1;
  EXPECT_EQ(s2.reused, s1.context - pending);
  EXPECT_EQ(s2.prefilled, new_turn_tokens(*m, first["reply"]) + pending);
  EXPECT_LT(
      s2.prefilled,
      static_cast<int>(m->encode(m->chat_prompt(std::vector<ChatTurn>{
                                     {"user", kQ1}, {"assistant", first["reply"]}, {"user", kQ2}}))
                           .size()) /
          2);
  // /reset: an empty context.
  from = t.seen.size();
  t.type("/reset\r");
  ASSERT_NE(t.wait_for("conversation cleared", from), std::string::npos) << t.seen;
  from = t.seen.size();
  t.type("/stats\r");
  ASSERT_NE(t.wait_for("decode", from), std::string::npos);
  EXPECT_EQ(parse_stats(t.seen.substr(from)).context, 0);
  // Ctrl-C during a long reply (up to the whole context, end-of-sequence ignored) stops it.
  from = t.seen.size();
  t.type("/exit\r");
  EXPECT_EQ(t.wait_exit(), 0) << t.seen;
  Pty u({VKLLM_EXE, "chat", "-m", art, "--backend", "cpu", "-n", "1000", "--ignore_eos",
         "--temperature", "0"});
  ASSERT_NE(u.wait_for("> ", 0, 120), std::string::npos) << u.seen;
  from = u.seen.size();
  u.type("Tell me a long story.\r");
  // The echo of the line, then the reply's first bytes: stop it.
  ASSERT_NE(u.wait_for("\n", from), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  u.type("\x03");
  ASSERT_NE(u.wait_for("(reply stopped)", from), std::string::npos) << u.seen;
  ASSERT_NE(u.wait_for("> ", u.seen.find("(reply stopped)", from)), std::string::npos);
  from = u.seen.size();
  u.type("/stats\r");
  ASSERT_NE(u.wait_for("decode", from), std::string::npos) << u.seen;
  const TurnStats s3 = parse_stats(u.seen.substr(from));
  EXPECT_GT(s3.generated, 0);
  EXPECT_LT(s3.generated, 1000 - 30);
  from = u.seen.size();
  u.type("/exit\r");
  EXPECT_EQ(u.wait_exit(), 0) << u.seen;
}
