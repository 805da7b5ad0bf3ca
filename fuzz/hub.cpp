// fuzz_hub: what a (hostile) hub server sends. Input: raw response header lines, NUL, the body of
// GET /api/models/<repo>/revision/<rev>. The header block goes through libcurl's header callback
// parser and the HEAD interpretation (ETag, sizes, redirect target, error messages); the body
// through the model-info parser. Accepted file names must stay inside the snapshot; an accepted
// ETag must be a hex digest that can verify the download.
#include "fuzz_util.h"
#include "hub/cache.h"
#include "hub/response.h"
#ifdef VKLLM_WITH_CURL
#include "hub/download.h"
#endif

using namespace vkllm;
using namespace vkllm::hub_detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_parts(data, size, 2);
  static const long kStatus[] = {200, 206, 302, 307, 401, 403, 404, 416, 429, 500};
  const uint8_t sel = size ? data[0] : 0;
  HttpResponse r;
  r.status = kStatus[sel % 10];
  size_t start = 0;
  const std::string& head = parts[0];
  while (start < head.size()) {
    size_t end = head.find('\n', start);
    end = end == std::string::npos ? head.size() : end + 1;
    parse_header_line(std::string_view(head).substr(start, end - start), r.headers);
    start = end;
  }
  for (const auto& [k, v] : r.headers)
    for (char c : k) VKLLM_FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
  const std::string endpoint = "https://hub.example";
  const RepoSpec spec{"org/name", (sel & 16) ? "0123456789abcdef0123456789abcdef01234567" : "main"};
  try {
    const FileHead fh =
        parse_file_head(r, endpoint, endpoint + "/org/name/resolve/x/config.json", spec,
                        "0123456789abcdef0123456789abcdef01234567", "config.json");
    VKLLM_FUZZ_CHECK((fh.etag.size() == 40 || fh.etag.size() == 64) && is_hex(fh.etag));
    VKLLM_FUZZ_CHECK(fh.download_url.rfind("http", 0) == 0);
  } catch (const Error&) {
  }
#ifdef VKLLM_WITH_CURL
  r.body = parts[1];
  HttpClient::describe("https://hub.example/x", r);
  HttpClient::retryable(r);
#endif
  try {
    const RevisionInfo info = parse_model_info(parts[1], endpoint + "/api/models/org/name", spec);
    VKLLM_FUZZ_CHECK(is_commit_hash(info.commit));
    for (const auto& s : info.siblings) VKLLM_FUZZ_CHECK(is_safe_repo_path(s));
  } catch (const Error&) {
  }
  return 0;
}
