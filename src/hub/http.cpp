// libcurl wrapper for the hub client: one easy handle, headers captured per redirect hop.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "hub/cache.h"
#include "hub/download.h"

namespace vkllm::hub_detail {

namespace {

constexpr size_t kMaxTextBody = 32u << 20;  // model info / error bodies

struct Transfer {
  HttpResponse* resp;
  const HttpClient::Sink* sink;
  const HttpClient::OnProgress* progress;
  CURL* curl;
  uint64_t range_from;
  int stall_timeout_s;
  std::string abort_reason;
  bool stalled = false;
  curl_off_t last_bytes = -1;
  std::chrono::steady_clock::time_point last_change = std::chrono::steady_clock::now();
};

size_t on_header(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nitems;
  parse_header_line(std::string_view(data, n), t->resp->headers);
  return n;
}

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  t->resp->status = status;
  bool ok_status = status == 200 || status == 206;
  if (!*t->sink || !ok_status) {
    // Text request, or an error page of a download: keep it (bounded) for the message.
    if (t->resp->body.size() + n > kMaxTextBody) {
      t->abort_reason = "response body too large";
      return 0;
    }
    t->resp->body.append(data, n);
    return n;
  }
  if (!(*t->sink)(status, data, n)) {
    t->abort_reason = "cannot write the download to disk";
    return 0;
  }
  t->resp->received += n;
  return n;
}

int on_progress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  // Stall watchdog: no new byte for stall_timeout_s (curl's own low-speed check averages over
  // several seconds, so a burst followed by silence would go unnoticed for too long).
  auto now = std::chrono::steady_clock::now();
  if (dlnow != t->last_bytes) {
    t->last_bytes = dlnow;
    t->last_change = now;
  } else if (now - t->last_change > std::chrono::seconds(t->stall_timeout_s)) {
    t->stalled = true;
    t->abort_reason = fmt::format("no data received for {} s", t->stall_timeout_s);
    return 1;
  }
  if (*t->progress && dltotal > 0) {
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    uint64_t base = status == 206 ? t->range_from : 0;
    (*t->progress)(base + static_cast<uint64_t>(dlnow), base + static_cast<uint64_t>(dltotal));
  }
  return 0;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

HttpClient::HttpClient(const PullOptions& opts)
    : endpoint_(hub_endpoint(opts)),
      token_(hub_token(opts)),
      connect_timeout_s_(opts.connect_timeout_s > 0 ? opts.connect_timeout_s : 10) {
  global_init();
  stall_timeout_s_ = opts.stall_timeout_s;
  if (stall_timeout_s_ <= 0)
    stall_timeout_s_ = std::atoi(env_str("HF_HUB_DOWNLOAD_TIMEOUT").c_str());
  if (stall_timeout_s_ <= 0) stall_timeout_s_ = 10;
  user_agent_ = std::string("vkllm/0.1.0; ") + curl_version();
  curl_ = curl_easy_init();
  if (!curl_) fail("libcurl: cannot create a transfer handle");
}

HttpClient::~HttpClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string HttpClient::escape(const std::string& s) {
  char* e = curl_easy_escape(static_cast<CURL*>(curl_), s.data(), static_cast<int>(s.size()));
  if (!e) fail("libcurl: out of memory escaping a URL");
  std::string out(e);
  curl_free(e);
  return out;
}

HttpResponse HttpClient::request(const std::string& method, const std::string& url, bool follow,
                                 uint64_t range_from, const Sink& sink,
                                 const OnProgress& progress) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);
  HttpResponse resp;
  Transfer t{&resp, &sink, &progress, c, range_from, stall_timeout_s_};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_USERAGENT, user_agent_.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(connect_timeout_s_));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  std::string range;
  if (range_from > 0) {
    range = std::to_string(range_from) + "-";
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  }
  curl_slist* hdrs = nullptr;
  // The token goes to the hub only; curl also drops it when a redirect changes host.
  std::string auth = "Authorization: Bearer " + token_;
  if (!token_.empty() && url.rfind(endpoint_ + "/", 0) == 0)
    hdrs = curl_slist_append(hdrs, auth.c_str());
  if (hdrs) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(hdrs);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc != CURLE_OK) {
    resp.curl_code = static_cast<int>(t.stalled ? CURLE_OPERATION_TIMEDOUT : rc);
    resp.curl_error = !t.abort_reason.empty() ? t.abort_reason
                      : errbuf[0]             ? std::string(errbuf)
                                              : std::string(curl_easy_strerror(rc));
  }
  return resp;
}

bool HttpClient::retryable(const HttpResponse& r) {
  switch (static_cast<CURLcode>(r.curl_code)) {
    case CURLE_OK:
      return r.status >= 500 || r.status == 429;
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

std::string HttpClient::describe(const std::string& what, const HttpResponse& r) {
  if (r.curl_code != 0) return fmt::format("{}: {}", what, r.curl_error);
  std::string msg = r.header("x-error-message");
  if (msg.empty() && !r.body.empty() && r.body.size() < 512 &&
      r.body.find('\n') == std::string::npos)
    msg = r.body;
  return msg.empty() ? fmt::format("{}: HTTP {}", what, r.status)
                     : fmt::format("{}: HTTP {}: {}", what, r.status, msg);
}

}  // namespace vkllm::hub_detail
