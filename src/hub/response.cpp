#include "hub/response.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hub/cache.h"

namespace vkllm::hub_detail {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string strip_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? std::string() : it->second;
}

void parse_header_line(std::string_view line, std::map<std::string, std::string>& headers) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {
    headers.clear();  // a new hop (redirect or 100-continue)
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    std::string_view value = line.substr(colon + 1);
    size_t i = value.find_first_not_of(" \t");
    value = i == std::string_view::npos ? std::string_view() : value.substr(i);
    headers[lower(std::string(line.substr(0, colon)))] = std::string(value);
  }
}

RevisionInfo parse_model_info(const std::string& body, const std::string& url,
                              const RepoSpec& spec) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !j.contains("siblings") || !j["siblings"].is_array())
    fail("{}: the model info is not the expected JSON (needs \"sha\" and \"siblings\")", url);
  RevisionInfo info;
  info.commit = j["sha"].get<std::string>();
  if (!is_commit_hash(info.commit))
    fail("{}: the model info's sha '{}' is not a 40-hex commit id", url, info.commit);
  if (is_commit_hash(spec.revision) && spec.revision != info.commit)
    fail("{}: asked for commit {} but the hub answered {}", url, spec.revision, info.commit);
  for (const auto& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
      fail("{}: a sibling has no \"rfilename\"", url);
    std::string name = s["rfilename"].get<std::string>();
    check_repo_path(spec.repo, name);
    info.siblings.insert(name);
  }
  return info;
}

std::string resolve_location(const std::string& endpoint, const std::string& loc) {
  if (loc.rfind("http", 0) == 0) return loc;
  return endpoint + (!loc.empty() && loc[0] == '/' ? "" : "/") + loc;
}

FileHead parse_file_head(const HttpResponse& head, const std::string& endpoint,
                         const std::string& url, const RepoSpec& spec, const std::string& commit,
                         const std::string& name) {
  FileHead out;
  const std::string linked = head.header("x-linked-etag");
  out.etag = strip_etag(!linked.empty() ? linked : head.header("etag"));
  const std::string served = head.header("x-repo-commit");
  if (!served.empty() && served != commit)
    fail("{}/{}: the hub served commit {} while {} resolved to {}", spec.repo, name, served,
         spec.revision, commit);
  if (!(out.etag.size() == 64 || out.etag.size() == 40) || !is_hex(out.etag))
    fail(
        "{}/{}: the hub's ETag '{}' is neither a sha256 nor a git sha1, so the download cannot be "
        "verified",
        spec.repo, name, out.etag);
  const std::string size_s = head.header(!linked.empty() ? "x-linked-size" : "content-length");
  out.size_known = !size_s.empty() && size_s.find_first_not_of("0123456789") == std::string::npos &&
                   size_s.size() < 19;
  out.size = out.size_known ? std::stoull(size_s) : 0;
  out.download_url = url;
  if (head.status >= 300 && head.status < 400 && !head.header("location").empty())
    out.download_url = resolve_location(endpoint, head.header("location"));
  return out;
}

}  // namespace vkllm::hub_detail
