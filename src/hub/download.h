// Internal: the network half of a pull (libcurl). Only compiled with VKLLM_WITH_CURL.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "hub/hub.h"
#include "hub/response.h"

namespace vkllm::hub_detail {

// A reusable libcurl handle with the pull's timeouts, user agent and token.
class HttpClient {
 public:
  explicit HttpClient(const PullOptions& opts);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sink gets each body chunk once the status is known (returns false to abort the transfer).
  using Sink = std::function<bool(long status, const char* data, size_t n)>;
  using OnProgress = std::function<void(uint64_t now, uint64_t total)>;
  HttpResponse request(const std::string& method, const std::string& url, bool follow,
                       uint64_t range_from = 0, const Sink& sink = nullptr,
                       const OnProgress& progress = nullptr);
  std::string escape(const std::string& s);  // percent-encodes everything but unreserved
  const std::string& endpoint() const { return endpoint_; }

  // True for failures worth another try: transport errors, timeouts, cut transfers, 5xx, 429.
  static bool retryable(const HttpResponse& r);
  // "<what>: <curl error>" or "<what>: HTTP <status>[: <X-Error-Message>]".
  static std::string describe(const std::string& what, const HttpResponse& r);

 private:
  void* curl_ = nullptr;
  std::string endpoint_, token_, user_agent_;
  int connect_timeout_s_, stall_timeout_s_;
};

PullResult pull_online(const RepoSpec& spec, const PullOptions& opts);

// sha256 of the file, or git's blob sha1 ("blob <size>\0" + bytes) when git_blob.
std::string hash_file(const std::string& path, bool git_blob);

}  // namespace vkllm::hub_detail
