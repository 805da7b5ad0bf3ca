#include "serve/server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>

#include "core/error.h"
#include "grammar/grammar.h"
#include "runtime/constraint.h"
#include "serve/anthropic.h"
#include "serve/batch_runner.h"
#include "serve/chat_page.h"
#include "serve/job.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/peer.h"
#include "serve/queue.h"
#include "serve/slots.h"
#include "serve/tokens.h"
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
    EngineOptions eo;
    eo.max_sequences = o.parallel;
    eo.step_tokens = std::max(eo.step_tokens, o.parallel);
    eo.kv_budget_bytes = o.kv_budget_mib << 20;
    try {
      if (!o.batching) fail("--no-batching");
      runner_ = std::make_unique<BatchRunner>(model_, eo, o.parallel + o.queue);
    } catch (const Error& e) {
      // A backend without the batched forward serves one request at a time; a budget asked for
      // that does not fit, or a CPU backend failing, is the user's error.
      if (o.batching && (o.kv_budget_mib > 0 || model_->info().backend == "cpu")) throw;
      unbatched_ = e.what();
      slots_ = std::make_unique<SlotPool>(model_, o.slots);
    }
    slot_tokens_ =
        std::make_unique<std::atomic<int>[]>(static_cast<size_t>(slots_ ? slots_->size() : 1));
    name_ =
        o.model_name.empty() ? std::filesystem::path(o.model_path).stem().string() : o.model_name;
    if (name_.empty()) name_ = "vkllm";
    syntax_ = call_syntax_for(model_->info().architecture);
    jobs_ = std::make_unique<JobMaker>(model_, ctx_, syntax_);
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
      if (runner_) runner_->stop();
      svr_.stop();
    });
    if (runner_) {
      const EngineStats st = runner_->stats();
      const std::string window =
          st.kv_window > 0
              ? fmt::format("; sliding-window layers' pool {} blocks, {:.1f} MiB (window {})",
                            st.kv_window_blocks_total,
                            static_cast<double>(st.kv_window_block_bytes) *
                                st.kv_window_blocks_total / (1 << 20),
                            st.kv_window)
              : "";
      std::fprintf(
          stderr,
          "vkllm: serving %s on http://%s:%d (context %d tokens, %s, continuous batching: "
          "up to %d sequences, %d waiting; KV pool %d blocks of %d tokens, %.1f MiB%s%s)\n",
          name_.c_str(), o_.host.c_str(), port, ctx_, model_->info().device_name.c_str(),
          o_.parallel, o_.queue, st.kv_blocks_total, st.block_tokens,
          static_cast<double>(st.kv_block_bytes) * st.kv_blocks_total / (1 << 20), window.c_str(),
          o_.kv_budget_mib ? "" : " = the default --kv-budget: --parallel full contexts");
    } else {
      std::fprintf(stderr,
                   "vkllm: serving %s on http://%s:%d (context %d tokens, %s, one request at a "
                   "time, %d slots of %.1f MiB KV cache each; no batching: %s)\n",
                   name_.c_str(), o_.host.c_str(), port, ctx_, model_->info().device_name.c_str(),
                   slots_->size(), static_cast<double>(model_->info().kv_cache_bytes) / (1 << 20),
                   unbatched_.c_str());
    }
    std::fflush(stderr);
    svr_.listen_after_bind();
    queue_.stop();
    runner_.reset();  // every handler has returned: nothing is left to run
    pthread_kill(signals.native_handle(), SIGUSR1);
    signals.join();
    return 0;
  }

 private:
  ServeOptions o_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<BatchRunner> runner_;  // continuous batching (null: slots_)
  std::string unbatched_;                // why there is no runner_
  std::unique_ptr<SlotPool> slots_;      // used only by the request holding the queue's turn
  std::string name_;
  int ctx_ = 0;
  CallSyntax syntax_ = CallSyntax::Qwen3;  // how the model writes tool calls
  Metrics metrics_;
  std::unique_ptr<std::atomic<int>[]> slot_tokens_;  // per slot: tokens its KV cache holds
  std::atomic<int> generating_{0};

  // The endpoint label of a path in the metrics (unknown paths together: their number is bounded).
  static std::string endpoint_label(const std::string& path) {
    for (const char* p : {"/", "/health", "/metrics", "/props", "/tokenize", "/detokenize",
                          "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/messages"})
      if (path == p) return path;
    if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
  }

  Metrics::Gauges gauges() const {
    Metrics::Gauges g;
    if (runner_) {
      const EngineStats st = runner_->stats();
      g.batched = true;
      g.waiting = st.waiting;
      g.generating = st.active;
      g.kv_blocks_used = st.kv_blocks_used;
      g.kv_blocks_cached = st.kv_blocks_cached;
      g.kv_blocks_total = st.kv_blocks_total;
      g.kv_window_blocks_used = st.kv_window_blocks_used;
      g.kv_window_blocks_cached = st.kv_window_blocks_cached;
      g.kv_window_blocks_total = st.kv_window_blocks_total;
      g.block_tokens = st.block_tokens;
      g.prefix_hit_tokens = st.prefix_hit_tokens;
      g.preemptions = st.preemptions;
      return g;
    }
    g.waiting = queue_.waiting();
    g.generating = generating_.load();
    g.slots = slots_->size();
    g.context = ctx_;
    for (int i = 0; i < g.slots; ++i) {
      const int n = slot_tokens_[static_cast<size_t>(i)].load();
      g.slots_holding += n > 0;
      g.kv_tokens += n;
    }
    return g;
  }

  // GET /props: what the server serves and its defaults (llama-server's endpoint, vkllm's fields).
  json props() const {
    const ModelInfo& mi = model_->info();
    const Request d = parse_request(R"({"messages": [{"role": "user", "content": "x"}]})", true);
    static constexpr const char* kFamily[] = {"qwen3", "llama3", "phi4mini"};
    return {{"model", name_},
            {"model_path", o_.model_path},
            {"architecture", mi.architecture},
            {"recipe", mi.recipe},
            {"backend", mi.backend},
            {"device", mi.device_name},
            {"vocab_size", mi.vocab_size},
            {"eos_token_ids", mi.eos_ids},
            {"context_length", ctx_},
            {"chat_template", kFamily[static_cast<int>(syntax_)]},
            {"total_slots", runner_ ? o_.parallel : slots_->size()},
            {"continuous_batching", runner_ != nullptr},
            {"max_queue", o_.queue},
            {"max_body_bytes", o_.max_body},
            {"api_key_required", !o_.api_key.empty()},
            {"version", version()},
            {"default_generation_settings",
             {{"max_tokens", nullptr},
              {"temperature", d.opts.temperature},
              {"top_p", d.opts.top_p},
              {"top_k", d.opts.top_k},
              {"min_p", d.opts.min_p},
              {"presence_penalty", d.opts.presence_penalty},
              {"frequency_penalty", d.opts.frequency_penalty},
              {"repetition_penalty", d.opts.repetition_penalty},
              {"stop_at_eos", d.opts.stop_at_eos}}}};
  }
  FairQueue queue_;
  httplib::Server svr_;
  std::unique_ptr<JobMaker> jobs_;
  std::mutex log_mu_;

  void log(const std::string& line) {
    if (!o_.log) return;
    std::lock_guard<std::mutex> lock(log_mu_);
    std::fprintf(stderr, "vkllm: %s\n", line.c_str());
  }

  void routes() {
    // Connections kept alive hold a thread each: room for every waiting request plus some.
    const size_t threads = static_cast<size_t>(o_.queue + (runner_ ? o_.parallel : 0)) + 8;
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
      send_json(res, res.status,
                req.path == "/v1/messages" ? anthropic_error(res.status, msg)
                                           : error_body(res.status, msg));
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
      metrics_.request(endpoint_label(req.path), res.status);
      if (req.path != "/health") log(fmt::format("{} {} {}", req.method, req.path, res.status));
    });
    svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page(), "text/html; charset=utf-8");
    });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      json h = {{"status", "ok"}, {"model", name_}, {"waiting", queue_.waiting()}};
      if (runner_) {
        const EngineStats st = runner_->stats();
        h["waiting"] = st.waiting;
        h["active"] = st.active;
        h["kv_blocks_used"] = st.kv_blocks_used;
        h["kv_blocks_cached"] = st.kv_blocks_cached;
        h["kv_blocks_total"] = st.kv_blocks_total;
        h["prefix_hit_tokens"] = st.prefix_hit_tokens;
        if (st.kv_window > 0) {  // the sliding-window layers' pool
          h["kv_window"] = st.kv_window;
          h["kv_window_blocks_used"] = st.kv_window_blocks_used;
          h["kv_window_blocks_cached"] = st.kv_window_blocks_cached;
          h["kv_window_blocks_total"] = st.kv_window_blocks_total;
        }
      }
      send_json(res, 200, h);
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
    svr_.Get("/props", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) send_json(res, 200, props());
    });
    svr_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res))
        res.set_content(metrics_.render(gauges()), "text/plain; version=0.0.4; charset=utf-8");
    });
    const auto token_route = [this](json (*fn)(const Model&, const std::string&)) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        try {
          send_json(res, 200, fn(*model_, req.body));
        } catch (const HttpError& e) {
          send_error(res, e);
        }
      };
    };
    svr_.Post("/tokenize", token_route(&tokenize));
    svr_.Post("/detokenize", token_route(&detokenize));
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, true);
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, false);
    });
    svr_.Post("/v1/messages",
              [this](const httplib::Request& req, httplib::Response& res) { messages(req, res); });
    // The other methods on a known path: 405 (httplib would answer 404).
    const auto not_allowed = [](const char* allow) {
      return [allow](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", allow);
        send_json(res, 405,
                  error_body(405, fmt::format("{} is not allowed on {} (use {})", req.method,
                                              req.path, allow)));
      };
    };
    for (const char* p :
         {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/tokenize", "/detokenize"}) {
      svr_.Get(p, not_allowed("POST"));
      svr_.Put(p, not_allowed("POST"));
      svr_.Patch(p, not_allowed("POST"));
      svr_.Delete(p, not_allowed("POST"));
    }
    for (const char* p : {"/", "/health", "/v1/models", "/props", "/metrics"}) {
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

  // A request's place: its engine stream (continuous batching), or its ticket in the queue for
  // the slots.
  struct Turn {
    std::unique_ptr<FairQueue::Ticket> ticket;
    std::unique_ptr<BatchRunner::Stream> stream;
    bool wait() { return stream || ticket->wait(); }  // the engine queues the request itself
  };
  // The job's turn; null when the server is full (503). HttpError 400 when the engine refuses it.
  std::unique_ptr<Turn> enter(const Job& job) {
    auto t = std::make_unique<Turn>();
    if (runner_) {
      try {
        t->stream = runner_->submit(job.ids, job.r.opts);
      } catch (const Error& e) {
        throw HttpError(400, e.what());
      }
      if (!t->stream) return nullptr;
    } else {
      t->ticket = queue_.enter();
      if (!t->ticket) return nullptr;
    }
    return t;
  }
  HttpError busy(httplib::Response& res) const {
    res.set_header("Retry-After", "1");
    return HttpError(503,
                     fmt::format("the server is busy ({} requests in) or stopping; retry later",
                                 runner_ ? runner_->limit() : o_.queue));
  }

  // Runs the job through its turn (the queue's turn held: on the slot; else the engine's events).
  // on_piece returns false to stop (a client that left; it is also asked, with an empty piece,
  // while the engine has nothing for the job). Returns the usage and sets finish.
  Usage generate(const Job& job, Turn& turn,
                 const std::function<bool(const std::string&)>& on_piece, std::string& finish,
                 std::string* stop_met = nullptr) {
    if (turn.stream) return generate_batched(job, *turn.stream, on_piece, finish, stop_met);
    using clock = std::chrono::steady_clock;
    std::optional<clock::time_point> last;
    const auto cb = [&](int32_t id, const std::string& piece) {
      if (id >= 0) {
        const clock::time_point now = clock::now();
        const auto s = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
        if (last)
          metrics_.token_gap(s(now - *last));
        else
          metrics_.first_token(s(now - job.arrival));
        last = now;
      }
      return piece.empty() || on_piece(piece);
    };
    const auto t0 = clock::now();
    const SlotPool::Pick slot = slots_->pick(job.r.chat ? job.text : std::string(), job.tokens);
    struct Running {  // the running gauge, also when generate throws
      std::atomic<int>& n;
      explicit Running(std::atomic<int>& g) : n(g) { ++n; }
      ~Running() { --n; }
    } running(generating_);
    const std::vector<int32_t> out =
        job.r.chat ? slot.session->generate_reusing(job.text, job.r.opts, cb)
                   : slot.session->generate_reusing(job.tokens, job.r.opts, cb);
    const GenerationStats& s = slot.session->stats();
    if (stop_met && s.stopped_by_stop) {
      // The stop string met: the first one in the reply's whole text.
      const std::string all = model_->decode(out);
      size_t at = std::string::npos;
      for (const std::string& x : job.r.opts.stop)
        if (const size_t k = all.find(x); k < at) at = k, *stop_met = x;
    }
    finish = s.stopped_by_eos || s.stopped_by_stop ? "stop" : "length";
    Usage u{s.reused_tokens + s.prompt_tokens, s.generated_tokens, s.reused_tokens};
    metrics_.tokens(u.prompt_tokens, u.completion_tokens);
    slot_tokens_[static_cast<size_t>(slot.slot)] = slot.session->context_tokens();
    log(fmt::format(
        "{}: slot {}, prompt {} tokens ({} reused from the KV cache, {} prefilled), {} generated, "
        "{}{} in {:.0f} ms",
        job.id, slot.slot, u.prompt_tokens, s.reused_tokens, s.prompt_tokens, s.generated_tokens,
        finish, s.stopped_by_callback ? " (client left)" : "",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    return u;
  }

  Usage generate_batched(const Job& job, BatchRunner::Stream& stream,
                         const std::function<bool(const std::string&)>& on_piece,
                         std::string& finish, std::string* stop_met) {
    using clock = std::chrono::steady_clock;
    const auto secs = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
    const auto t0 = clock::now();
    std::optional<clock::time_point> last;
    bool left = false;
    EngineEvent end;
    end.generated_tokens = -1;  // no event yet
    for (;;) {
      std::optional<EngineEvent> ev = stream.next(std::chrono::milliseconds(100));
      if (ev && ev->token >= 0) {
        const clock::time_point now = clock::now();
        if (last)
          metrics_.token_gap(secs(now - *last));
        else
          metrics_.first_token(secs(now - job.arrival));
        last = now;
      }
      if (ev && ev->finished && ev->finish_reason == "error") throw Error(ev->text);
      if (ev) end.generated_tokens = ev->generated_tokens, end.cached_tokens = ev->cached_tokens;
      if (!on_piece(ev ? ev->text : std::string())) {
        left = true;
        stream.cancel();
        break;
      }
      if (ev && ev->finished) {
        end = std::move(*ev);
        break;
      }
    }
    const int generated = std::max(end.generated_tokens, 0);
    finish = !left && end.finish_reason == "stop" ? "stop" : "length";
    if (stop_met) *stop_met = end.stop;
    const Usage u{job.prompt_tokens, generated, end.cached_tokens};
    metrics_.tokens(u.prompt_tokens, u.completion_tokens);
    const EngineStats st = runner_->stats();
    if (left && end.generated_tokens < 0) {
      log(fmt::format("{}: the client left before its turn; not generated", job.id));
    } else {
      log(fmt::format(
          "{}: prompt {} tokens ({} from the prefix cache, {} prefilled), {} generated, {}{} in "
          "{:.0f} ms; {} active, {} waiting, KV blocks {} used, {} cached of {}",
          job.id, u.prompt_tokens, u.cached_tokens, u.prompt_tokens - u.cached_tokens, generated,
          finish, left ? " (client left)" : "",
          std::chrono::duration<double, std::milli>(clock::now() - t0).count(), st.active,
          st.waiting, st.kv_blocks_used, st.kv_blocks_cached, st.kv_blocks_total));
    }
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
      job = std::make_shared<Job>(jobs_->prepare(req.body, chat));
    } catch (const HttpError& e) {
      return send_error(res, e);
    }
    std::unique_ptr<Turn> ticket;
    try {
      ticket = enter(*job);
    } catch (const HttpError& e) {
      return send_error(res, e);
    }
    if (!ticket) return send_error(res, busy(res));
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
            *job, *ticket,
            [&](const std::string& p) {
              text += p;
              return !peer.gone();
            },
            finish);
        ticket.reset();
        if (peer.gone()) return send_error(res, left);
        std::vector<ChatToolCall> calls;
        if (chat && job->r.tools.active()) {
          calls = jobs_->split_calls(*job, text);
          if (!calls.empty()) finish = "tool_calls";
        }
        send_json(
            res, 200,
            completion_response(job->r, job->id, job->created, name_, text, finish, u, calls));
      } catch (const Error& e) {
        send_error(res, HttpError(400, e.what()));
      }
      return;
    }
    // The provider and the releaser share the ticket: whichever runs last gives the turn back
    // (the releaser alone when the client left before the stream started).
    auto holder = std::make_shared<std::unique_ptr<Turn>>(std::move(ticket));
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
          const bool tools = r.chat && r.tools.active();
          ToolCallStream parser = jobs_->reply_parser(*job);
          try {
            if (r.chat) write(sse(stream_chunk(r, job->id, job->created, name_, "", true, "")));
            first = !r.chat;
            const auto text = [&](const std::string& piece) {
              if (piece.empty()) return alive;
              const bool ok =
                  write(sse(stream_chunk(r, job->id, job->created, name_, piece, first, "")));
              first = false;
              return ok;
            };
            const Usage u = generate(
                *job, *turn,
                [&](const std::string& piece) { return text(tools ? parser.push(piece) : piece); },
                finish);
            turn.reset();  // the next request may start while this one's last chunks go out
            if (tools) {
              // Held-back text that was no call goes out as content; calls as tool_calls deltas.
              ToolCallStream::End end = parser.finish();
              text(end.content);
              for (const json& c : tool_call_chunks(r, job->id, job->created, name_, end.calls))
                write(sse(c));
              if (!end.calls.empty()) finish = "tool_calls";
            }
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
  // The API key of /v1/messages: x-api-key (Anthropic's clients) or Authorization: Bearer.
  bool authorized_anthropic(const httplib::Request& req, httplib::Response& res) const {
    if (o_.api_key.empty() || same_secret(req.get_header_value("x-api-key"), o_.api_key) ||
        same_secret(req.get_header_value("Authorization"), "Bearer " + o_.api_key))
      return true;
    send_json(res, 401, anthropic_error(401, "missing or incorrect API key (send x-api-key: KEY)"));
    return false;
  }

  // The end of a /v1/messages reply: its text and calls, the stop reason and the usage.
  static MessageEnd message_end(std::string text, const std::string& finish,
                                const std::string& stop, const Usage& u,
                                std::vector<ChatToolCall> calls) {
    MessageEnd e;
    e.text = std::move(text);
    e.calls = std::move(calls);
    for (ChatToolCall& c : e.calls) c.id = "toolu_" + c.id.substr(5);
    e.stop_reason = !e.calls.empty()     ? "tool_use"
                    : finish == "length" ? "max_tokens"
                    : !stop.empty()      ? "stop_sequence"
                                         : "end_turn";
    if (e.stop_reason == "stop_sequence") e.stop_sequence = stop;
    e.input_tokens = u.prompt_tokens;
    e.output_tokens = u.completion_tokens;
    e.cached_tokens = u.cached_tokens;
    return e;
  }

  // POST /v1/messages: the Anthropic Messages API over the same queue and slots.
  void messages(const httplib::Request& req, httplib::Response& res) {
    if (!authorized_anthropic(req, res)) return;
    const auto fail = [&](const HttpError& e) {
      send_json(res, e.status, anthropic_error(e.status, e.what()));
    };
    std::shared_ptr<Job> job;
    try {
      job = std::make_shared<Job>(jobs_->prepare(req.body, true, true));
    } catch (const HttpError& e) {
      return fail(e);
    }
    std::unique_ptr<Turn> ticket;
    try {
      ticket = enter(*job);
    } catch (const HttpError& e) {
      return fail(e);
    }
    if (!ticket) return fail(busy(res));
    const bool tools = job->r.tools.active();
    if (!job->r.stream) {
      const Peer peer(req);
      if (!ticket->wait()) return fail(HttpError(503, "the server is stopping"));
      if (peer.gone()) return fail(HttpError(499, "the client closed the connection"));
      std::string text, finish, stop;
      try {
        const Usage u = generate(
            *job, *ticket,
            [&](const std::string& p) {
              text += p;
              return !peer.gone();
            },
            finish, &stop);
        ticket.reset();
        std::vector<ChatToolCall> calls;
        if (tools) calls = jobs_->split_calls(*job, text);
        send_json(
            res, 200,
            message_response(job->id, name_, message_end(std::move(text), finish, stop, u, calls)));
      } catch (const Error& e) {
        fail(HttpError(400, e.what()));
      }
      return;
    }
    auto holder = std::make_shared<std::unique_ptr<Turn>>(std::move(ticket));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, holder, tools](size_t, httplib::DataSink& sink) {
          auto& turn = *holder;
          if (!turn) return false;
          bool alive = true;
          const auto write = [&](const std::string& s) {
            return alive = alive && sink.is_writable() && sink.write(s.data(), s.size());
          };
          if (!turn->wait()) {
            write(sse_event("error", anthropic_error(503, "the server is stopping")));
            if (alive) sink.done();
            return alive;
          }
          MessageStream ms(job->id, name_);
          ToolCallStream parser = jobs_->reply_parser(*job);
          std::string finish, stop;
          try {
            write(ms.start(job->prompt_tokens, 0));
            const Usage u = generate(
                *job, *turn,
                [&](const std::string& piece) {
                  const std::string t = ms.text(tools ? parser.push(piece) : piece);
                  return t.empty() ? alive : write(t);
                },
                finish, &stop);
            turn.reset();
            ToolCallStream::End end;
            if (tools) end = parser.finish();
            if (!end.content.empty()) write(ms.text(end.content));
            write(ms.finish(message_end("", finish, stop, u, std::move(end.calls))));
          } catch (const Error& e) {
            turn.reset();
            write(sse_event("error", anthropic_error(400, e.what())));
          }
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
