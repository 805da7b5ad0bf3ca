#include "serve/server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "core/error.h"
#include "serve/chat_page.h"
#include "serve/openai.h"
#include "serve/peer.h"
#include "serve/queue.h"
#include "serve/slots.h"
#include "vkllm/vkllm.h"

namespace vkllm::serve {

namespace {

using nlohmann::json;

sigset_t server_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const HttpError& e) {
  send_json(res, e.status, e.body());
}

std::string sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// Byte-wise comparison that takes the same time wherever the first difference is.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

class Server {
 public:
  explicit Server(const ServeOptions& o) : o_(o), queue_(o.queue) {
    ModelOptions mo;
    mo.backend = o.backend;
    mo.device = o.device;
    mo.context_length = o.ctx;
    model_ = Model::open(o.model_path, mo);
    ctx_ = model_->info().context_length;
    slots_ = std::make_unique<SlotPool>(model_, o.slots);
    name_ =
        o.model_name.empty() ? std::filesystem::path(o.model_path).stem().string() : o.model_name;
    if (name_.empty()) name_ = "vkllm";
    routes();
  }

  int run() {
    const int port = o_.port == 0 ? svr_.bind_to_any_port(o_.host)
                                  : (svr_.bind_to_port(o_.host, o_.port) ? o_.port : -1);
    if (port < 0)
      fail("cannot listen on {}:{} (in use, or not an address of this machine)", o_.host, o_.port);
    // SIGINT and SIGTERM (blocked in every thread by run_server) go to a thread of their own: it
    // stops the server, whose pool finishes the reply being generated; waiting requests get 503.
    const sigset_t set = server_signals();
    std::thread signals([&] {
      int sig = 0;
      sigwait(&set, &sig);
      if (sig == SIGUSR1) return;  // the server ended on its own
      std::fprintf(stderr, "vkllm: %s: finishing the running reply, then exiting\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      queue_.stop();
      svr_.stop();
    });
    std::fprintf(stderr,
                 "vkllm: serving %s on http://%s:%d (context %d tokens, %s, %d slots of %.1f MiB "
                 "KV cache each)\n",
                 name_.c_str(), o_.host.c_str(), port, ctx_, model_->info().device_name.c_str(),
                 slots_->size(), static_cast<double>(model_->info().kv_cache_bytes) / (1 << 20));
    std::fflush(stderr);
    svr_.listen_after_bind();
    queue_.stop();
    pthread_kill(signals.native_handle(), SIGUSR1);
    signals.join();
    return 0;
  }

 private:
  ServeOptions o_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<SlotPool> slots_;  // used only by the request holding the queue's turn
  std::string name_;
  int ctx_ = 0;
  FairQueue queue_;
  httplib::Server svr_;
  std::atomic<uint64_t> ids_{0};
  std::mutex log_mu_;

  void log(const std::string& line) {
    if (!o_.log) return;
    std::lock_guard<std::mutex> lock(log_mu_);
    std::fprintf(stderr, "vkllm: %s\n", line.c_str());
  }

  void routes() {
    // Connections kept alive hold a thread each: room for every waiting request plus some.
    const size_t threads = static_cast<size_t>(o_.queue) + 8;
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which lets a second server
    // bind a port already serving (and silently share its connections).
    svr_.set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    svr_.set_payload_max_length(o_.max_body);
    svr_.set_read_timeout(10, 0);
    svr_.set_write_timeout(10, 0);
    svr_.set_keep_alive_timeout(5);
    // Before the body is read: a compressed body could inflate past --max-body.
    svr_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      const std::string enc = req.get_header_value("Content-Encoding");
      if (!enc.empty() && enc != "identity") {
        send_error(res,
                   HttpError(415, "compressed request bodies are not accepted (Content-Encoding: " +
                                      enc + ")"));
        res.set_header("Connection", "close");  // its body is not read
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg;
      switch (res.status) {
        case 404:
          msg = "no such endpoint: " + req.method + " " + req.path;
          break;
        case 413:  // cpp-httplib caps form-encoded bodies (curl -d's default type) lower
          msg = req.get_header_value("Content-Type") == "application/x-www-form-urlencoded"
                    ? "the request body is too large for a form-encoded body (send "
                      "Content-Type: application/json)"
                    : fmt::format("the request body is larger than {} bytes", o_.max_body);
          break;
        case 400:
          msg = "malformed HTTP request";
          break;
        default:
          msg = fmt::format("HTTP status {}", res.status);
      }
      send_json(res, res.status, error_body(res.status, msg));
    });
    svr_.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string msg = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            msg += std::string(": ") + e.what();
          } catch (...) {
          }
          send_json(res, 500, error_body(500, msg));
        });
    svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (req.path != "/health") log(fmt::format("{} {} {}", req.method, req.path, res.status));
    });
    svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page(), "text/html; charset=utf-8");
    });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}, {"model", name_}, {"waiting", queue_.waiting()}});
    });
    svr_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      send_json(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
    });
    svr_.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      if (req.matches[1] != name_)
        return send_error(res, HttpError(404, "no model named " + std::string(req.matches[1]),
                                         "model", "model_not_found"));
      send_json(res, 200, model_json());
    });
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, true);
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, false);
    });
    // The other methods on a known path: 405 (httplib would answer 404).
    const auto not_allowed = [](const char* allow) {
      return [allow](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", allow);
        send_json(res, 405,
                  error_body(405, fmt::format("{} is not allowed on {} (use {})", req.method,
                                              req.path, allow)));
      };
    };
    for (const char* p : {"/v1/chat/completions", "/v1/completions"}) {
      svr_.Get(p, not_allowed("POST"));
      svr_.Put(p, not_allowed("POST"));
      svr_.Patch(p, not_allowed("POST"));
      svr_.Delete(p, not_allowed("POST"));
    }
    for (const char* p : {"/", "/health", "/v1/models"}) {
      svr_.Post(p, not_allowed("GET"));
      svr_.Put(p, not_allowed("GET"));
      svr_.Patch(p, not_allowed("GET"));
      svr_.Delete(p, not_allowed("GET"));
    }
  }

  json model_json() const {
    return {{"id", name_},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "vkllm"},
            {"context_length", ctx_}};
  }

  // What one generation needs: the prompt and options, checked before the request queues.
  struct Job {
    Request r;
    std::string text;             // chat: the rendered conversation
    std::vector<int32_t> tokens;  // completions: the prompt's ids
    std::string id;
    int64_t created = 0;
  };

  Job prepare(const httplib::Request& req, bool chat) {
    Job job;
    job.r = parse_request(req.body, chat);
    size_t n = 0;
    try {
      if (chat) {
        job.text = model_->chat_prompt(job.r.messages);
        n = model_->encode(job.text).size();
      } else {
        job.tokens = model_->encode(job.r.prompt, true);
        n = job.tokens.size();
      }
    } catch (const Error& e) {
      throw HttpError(400, e.what(), chat ? "messages" : "prompt");
    }
    if (n + 1 > static_cast<size_t>(ctx_))
      throw HttpError(400,
                      fmt::format("the prompt has {} tokens but the context holds {} tokens (at "
                                  "least one must be left to generate)",
                                  n, ctx_),
                      chat ? "messages" : "prompt", "context_length_exceeded");
    GenerationOptions& o = job.r.opts;
    const int room = ctx_ - static_cast<int>(n);
    o.max_new_tokens = std::min(job.r.max_tokens.value_or(room), room);
    if (!job.r.seeded) o.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
    job.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ids_.fetch_add(1) + 1);
    job.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    return job;
  }

  // Runs the job on the session (the caller holds the queue's turn). on_piece returns false to
  // stop (a client that left). Returns the usage and sets finish.
  Usage generate(const Job& job, const std::function<bool(const std::string&)>& on_piece,
                 std::string& finish) {
    const auto cb = [&](int32_t, const std::string& piece) {
      return piece.empty() || on_piece(piece);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const SlotPool::Pick slot = slots_->pick(job.r.chat ? job.text : std::string(), job.tokens);
    if (job.r.chat)
      slot.session->generate_reusing(job.text, job.r.opts, cb);
    else
      slot.session->generate_reusing(job.tokens, job.r.opts, cb);
    const GenerationStats& s = slot.session->stats();
    finish = s.stopped_by_eos || s.stopped_by_stop ? "stop" : "length";
    Usage u{s.reused_tokens + s.prompt_tokens, s.generated_tokens, s.reused_tokens};
    log(fmt::format(
        "{}: slot {}, prompt {} tokens ({} reused from the KV cache, {} prefilled), {} generated, "
        "{}{} in {:.0f} ms",
        job.id, slot.slot, u.prompt_tokens, s.reused_tokens, s.prompt_tokens, s.generated_tokens,
        finish, s.stopped_by_callback ? " (client left)" : "",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    return u;
  }

  // The API key check of every /v1/ endpoint (the body, if any, has been read: the connection
  // stays usable).
  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (o_.api_key.empty() ||
        same_secret(req.get_header_value("Authorization"), "Bearer " + o_.api_key))
      return true;
    send_error(res, HttpError(401, "missing or incorrect API key (send Authorization: Bearer KEY)",
                              "", "invalid_api_key"));
    return false;
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    std::shared_ptr<Job> job;
    try {
      job = std::make_shared<Job>(prepare(req, chat));
    } catch (const HttpError& e) {
      return send_error(res, e);
    }
    std::unique_ptr<FairQueue::Ticket> ticket = queue_.enter();
    if (!ticket)
      return send_error(
          res,
          HttpError(503,
                    fmt::format("the server is busy ({} requests waiting) or stopping; retry later",
                                o_.queue)));
    if (!job->r.stream) {
      // Its client is polled between tokens: one that left stops the generation (its reply
      // would go nowhere) and frees the model for the next request.
      // (What goes back to a client that left has nobody to read it: 499, nginx's "client
      // closed request", for the log.)
      const Peer peer(req);
      const HttpError left(499, "the client closed the connection");
      if (!ticket->wait()) return send_error(res, HttpError(503, "the server is stopping"));
      if (peer.gone()) {
        log(fmt::format("{}: the client left before its turn; not generated", job->id));
        return send_error(res, left);
      }
      std::string text, finish;
      try {
        const Usage u = generate(
            *job,
            [&](const std::string& p) {
              text += p;
              return !peer.gone();
            },
            finish);
        ticket.reset();
        if (peer.gone()) return send_error(res, left);
        send_json(res, 200,
                  completion_response(job->r, job->id, job->created, name_, text, finish, u));
      } catch (const Error& e) {
        send_error(res, HttpError(400, e.what()));
      }
      return;
    }
    // The provider and the releaser share the ticket: whichever runs last gives the turn back
    // (the releaser alone when the client left before the stream started).
    auto holder = std::make_shared<std::unique_ptr<FairQueue::Ticket>>(std::move(ticket));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, holder](size_t, httplib::DataSink& sink) {
          auto& turn = *holder;
          if (!turn) return false;
          const Request& r = job->r;
          if (!turn->wait()) {
            const std::string e =
                sse(error_body(503, "the server is stopping")) + "data: [DONE]\n\n";
            sink.write(e.data(), e.size());
            sink.done();
            return true;
          }
          bool first = true, alive = true;
          const auto write = [&](const std::string& s) {
            return alive = alive && sink.is_writable() && sink.write(s.data(), s.size());
          };
          std::string finish;
          try {
            if (r.chat) write(sse(stream_chunk(r, job->id, job->created, name_, "", true, "")));
            first = !r.chat;
            const Usage u = generate(
                *job,
                [&](const std::string& piece) {
                  const bool ok =
                      write(sse(stream_chunk(r, job->id, job->created, name_, piece, first, "")));
                  first = false;
                  return ok;
                },
                finish);
            turn.reset();  // the next request may start while this one's last chunks go out
            write(sse(stream_chunk(r, job->id, job->created, name_, "", false, finish)));
            if (r.include_usage) write(sse(usage_chunk(r, job->id, job->created, name_, u)));
          } catch (const Error& e) {
            turn.reset();
            write(sse(error_body(400, e.what())));
          }
          write("data: [DONE]\n\n");
          if (alive) sink.done();
          return alive;
        },
        [holder](bool) { holder->reset(); });
  }
};

}  // namespace

int run_server(const ServeOptions& options) {
  // Blocked before any thread starts (the Vulkan driver's included), so only sigwait sees them.
  const sigset_t set = server_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a client that left is a failed write, not the end
  Server s(options);
  return s.run();
}

}  // namespace vkllm::serve
