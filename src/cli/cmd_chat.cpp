// vkllm chat: a multi-turn conversation in the model's chat template. The session keeps its KV
// cache between turns: each turn prefills only its new tokens (Session::generate_reusing with the
// conversation rendered again; the previous reply's tokens stay as generated). On a terminal:
// interactive, streamed replies, /reset /stats /exit /help, a line ending in '\' continues on the
// next one, Ctrl-C stops the reply being generated. On a pipe: one user message per line, each
// reply followed by an empty line, or with --json one JSON object per reply.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/gen_flags.h"
#include "core/device_error.h"
#include "core/error.h"
#include "vkllm/vkllm.h"

namespace vkllm::cli {

namespace {

struct ChatArgs {
  std::string model, system, device, backend = "vulkan";
  GenFlags gen;
  int seq_len = 0;
  bool json = false;
};

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) {
  g_interrupt.store(true);
}

// One line of input without its newline; false at end of input. A Ctrl-C while reading sets
// `interrupted` (and returns false).
bool read_line(std::string& line, bool& interrupted) {
  line.clear();
  interrupted = false;
  for (;;) {
    const int c = std::fgetc(stdin);
    if (c == EOF) {
      if (std::ferror(stdin) && g_interrupt.exchange(false)) {
        std::clearerr(stdin);
        interrupted = true;
        return false;
      }
      return !line.empty();
    }
    if (c == '\n') return true;
    line += static_cast<char>(c);
  }
}

struct Chat {
  const ChatArgs& a;
  std::shared_ptr<Model> model;
  std::unique_ptr<Session> session;
  std::vector<ChatTurn> conv;
  bool tty = false;
  int ctx = 0;

  void start_conversation() {
    conv.clear();
    session->reset();
    if (!a.system.empty()) conv.push_back({"system", a.system});
  }

  std::string stats_line() const {
    const GenerationStats& s = session->stats();
    return fmt::format(
        "context: {} of {} tokens; last turn: {} new tokens prefilled ({} reused from the KV "
        "cache), {} generated; prefill {:.1f} tok/s, decode {:.1f} tok/s",
        session->context_tokens(), ctx, s.prompt_tokens, s.reused_tokens, s.generated_tokens,
        s.prefill_tok_s(), s.decode_tok_s());
  }

  void say(const std::string& text) const {  // a note to the user (stderr on a pipe)
    std::fprintf(tty ? stdout : stderr, "%s\n", text.c_str());
    std::fflush(tty ? stdout : stderr);
  }

  // Returns false to leave.
  bool command(const std::string& line) {
    if (line == "/exit" || line == "/quit") return false;
    if (line == "/reset") {
      start_conversation();
      say("(conversation cleared)");
    } else if (line == "/stats") {
      say(stats_line());
    } else if (line == "/help") {
      say("/reset clears the conversation, /stats shows the KV cache and speed, /exit leaves; a "
          "line ending in \\ continues on the next; Ctrl-C stops a reply");
    } else {
      say("unknown command " + line + " (/help lists them)");
    }
    return true;
  }

  void turn(const std::string& message) {
    conv.push_back({"user", message});
    GenerationOptions go = a.gen.options();
    std::string reply;
    g_interrupt.store(false);
    bool interrupted = false;
    try {
      session->generate_reusing(model->chat_prompt(conv), go, [&](int32_t, const std::string& p) {
        reply += p;
        if (!a.json) {
          std::fwrite(p.data(), 1, p.size(), stdout);
          std::fflush(stdout);
        }
        if (g_interrupt.load()) interrupted = true;
        return !interrupted;
      });
    } catch (const DeviceError&) {
      throw;
    } catch (const Error& e) {
      conv.pop_back();
      const bool full = std::string(e.what()).find("context holds") != std::string::npos;
      say(full ? fmt::format("vkllm: this turn does not fit the context ({} of {} tokens in use): "
                             "/reset starts a new conversation",
                             session->context_tokens(), ctx)
               : fmt::format("vkllm: {}", e.what()));
      return;
    }
    conv.push_back({"assistant", reply});
    const GenerationStats& s = session->stats();
    const bool full = session->context_tokens() >= ctx;
    const char* finish = interrupted                               ? "interrupted"
                         : (s.stopped_by_eos || s.stopped_by_stop) ? "stop"
                                                                   : "length";
    if (a.json) {
      nlohmann::json j = {{"reply", reply},
                          {"finish_reason", finish},
                          {"prompt_tokens", s.prompt_tokens},
                          {"reused_tokens", s.reused_tokens},
                          {"completion_tokens", s.generated_tokens},
                          {"context_tokens", session->context_tokens()},
                          {"context_length", ctx}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::fputs(tty ? "\n" : "\n\n", stdout);
    }
    std::fflush(stdout);
    if (interrupted) say("(reply stopped)");
    if (full) say("(the context is full: /reset starts a new conversation)");
  }

  void loop() {
    for (;;) {
      if (tty) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
      }
      std::string message, line;
      bool interrupted = false, more = true;
      while (more) {
        if (!read_line(line, interrupted)) {
          if (interrupted && tty) {  // Ctrl-C at the prompt leaves
            std::fputc('\n', stdout);
            return;
          }
          if (message.empty()) return;  // end of input
          more = false;
          break;
        }
        more = tty && !line.empty() && line.back() == '\\';
        if (more) {
          line.pop_back();
          line += '\n';
          std::fputs(". ", stdout);
          std::fflush(stdout);
        }
        message += line;
      }
      if (message.empty()) continue;
      if (message[0] == '/') {
        if (!command(message)) return;
        continue;
      }
      turn(message);
    }
  }
};

void chat(const ChatArgs& a) {
  Chat c{a, nullptr, nullptr, {}, ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO), 0};
  ModelOptions mo;
  mo.backend = a.backend;
  mo.device = a.device;
  mo.context_length = a.seq_len;
  if (c.tty) std::fprintf(stderr, "vkllm: loading %s\n", a.model.c_str());
  c.model = Model::open(a.model, mo);
  c.ctx = c.model->info().context_length;
  c.session = std::make_unique<Session>(c.model);
  c.start_conversation();
  struct sigaction sa {};
  sa.sa_handler = on_sigint;  // no SA_RESTART: a read waiting at the prompt returns
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  if (c.tty)
    std::fprintf(stderr,
                 "vkllm: %s on %s, context %d tokens, prompts in %s; /help lists the commands\n",
                 c.model->info().architecture.c_str(), c.model->info().device_name.c_str(), c.ctx,
                 c.model->info().chat_template.c_str());
  c.loop();
}

}  // namespace

void add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand(
      "chat",
      "Chat with a model in its chat template, the KV cache kept between turns (terminal: "
      "interactive; pipe: one message per line)");
  cmd->footer(
      "Prompts are rendered by the checkpoint's own chat template (chat_template.jinja or\n"
      "tokenizer_config.json's chat_template, run by vkllm's Jinja interpreter). Two seed\n"
      "families keep a native format: Llama 3 (the plain Llama 3 format, no dated system block)\n"
      "and Phi-4-mini (its template has no tools); Qwen3 without a template gets its native\n"
      "format. The terminal banner names the renderer in use.");
  cmd->add_option("-m,--model_path,--model", a->model, "Model artifact (.vkllm) or HF folder")
      ->required();
  cmd->add_option("--system", a->system, "A system message opening the conversation");
  add_generation_flags(cmd, a->gen);
  cmd->add_option("--seq_len", a->seq_len, "Context length (default: the artifact's)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--device", a->device, "Vulkan device index or name");
  cmd->add_option("--backend", a->backend, "vulkan (default) or cpu (the reference)")
      ->check(CLI::IsMember({"vulkan", "cpu"}));
  cmd->add_flag("--json", a->json,
                "On a pipe: one JSON object per reply (reply, finish_reason, token counts)");
  cmd->callback([a] { chat(*a); });
}

}  // namespace vkllm::cli
