// Internal: what the hub sends back, parsed without any network (libcurl hands the raw header
// lines and bodies to these functions). Pure functions, so fuzz/fuzz_hub.cpp can feed them
// arbitrary bytes.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "hub/hub.h"

namespace vkllm::hub_detail {

// One HTTP response: status, headers (lower-case names, last value wins; reset at each
// redirect hop), and the curl-level error when the transfer itself failed.
struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;
  std::string body;   // text requests only (capped), or the error body of a download
  int curl_code = 0;  // CURLcode; 0 when the transfer completed
  std::string curl_error;
  uint64_t received = 0;  // body bytes delivered to the sink
  std::string header(const std::string& name) const;
};

// One raw header line as libcurl delivers it ("Name: value\r\n", or a status line "HTTP/..."
// that starts a new hop and clears the headers collected so far).
void parse_header_line(std::string_view line, std::map<std::string, std::string>& headers);

// GET /api/models/<repo>/revision/<rev>: the commit the revision resolves to and the repository's
// file names (each checked by check_repo_path). Throws Error naming `url`.
struct RevisionInfo {
  std::string commit;
  std::set<std::string> siblings;
};
RevisionInfo parse_model_info(const std::string& body, const std::string& url,
                              const RepoSpec& spec);

// HEAD /<repo>/resolve/<commit>/<file>: what to download and how to verify it.
struct FileHead {
  std::string etag;   // sha256 (64 hex) or git blob sha1 (40 hex), quotes and W/ removed
  uint64_t size = 0;  // X-Linked-Size (LFS) or Content-Length
  bool size_known = false;
  std::string download_url;  // the LFS redirect target, else `url`
};
// Throws Error when the hub served another commit or an ETag that cannot verify the download.
FileHead parse_file_head(const HttpResponse& head, const std::string& endpoint,
                         const std::string& url, const RepoSpec& spec, const std::string& commit,
                         const std::string& name);

// A Location header made absolute against the endpoint (relative ones start with '/' or not).
std::string resolve_location(const std::string& endpoint, const std::string& location);

}  // namespace vkllm::hub_detail
