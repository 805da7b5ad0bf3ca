#include "backend/vulkan/vk_verdict.h"

#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/vulkan/vk_cache_dir.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace vkllm::vk {
namespace {

// A file-name-safe rendering of a device or driver name.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-';
    if (keep)
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.substr(0, 80);
}

}  // namespace

std::string verdict_path(const DeviceInfo& d) {
  return fmt::format("{}/selftest/{}-{}-{}.json", cache_root(), slug(d.name), slug(d.driver),
                     VKLLM_VERSION_STRING);
}

std::optional<Verdict> read_verdict(const DeviceInfo& d) {
  const std::string path = verdict_path(d);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 20))
    text.append(buf, n);
  std::fclose(f);
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("wrong") || !j["wrong"].is_array()) return std::nullopt;
  Verdict v;
  for (const auto& w : j["wrong"]) {
    if (!w.is_string()) continue;
    const std::string s = w.get<std::string>();
    v.int_dot_wrong = v.int_dot_wrong || s == "int8-dot";
    v.coopmat_wrong = v.coopmat_wrong || s == "coopmat";
    v.fusion_wrong = v.fusion_wrong || s == "fusion";
    v.subgroups_wrong = v.subgroups_wrong || s == "subgroups";
  }
  return v;
}

std::string write_verdict(const DeviceInfo& d, const Verdict& v, const std::string& report_json) {
  const std::string path = verdict_path(d);
  if (const std::string why = make_dirs(path.substr(0, path.rfind('/'))); !why.empty())
    fail("selftest cache: {}", why);
  nlohmann::json j = {{"device", d.name}, {"driver", d.driver}, {"vkllm", VKLLM_VERSION_STRING}};
  j["wrong"] = nlohmann::json::array();
  if (v.int_dot_wrong) j["wrong"].push_back("int8-dot");
  if (v.coopmat_wrong) j["wrong"].push_back("coopmat");
  if (v.fusion_wrong) j["wrong"].push_back("fusion");
  if (v.subgroups_wrong) j["wrong"].push_back("subgroups");
  j["report"] = nlohmann::json::parse(report_json, nullptr, false);
  write_text_file(path, j.dump(1) + "\n");
  return path;
}

void apply_verdict(const DeviceInfo& d, VulkanOptions& opt) {
  if (opt.tuning.ignore_selftest) return;
  const auto v = read_verdict(d);
  if (!v || !v->any()) return;
  if (v->subgroups_wrong)
    fail(
        "`vkllm selftest` found that Vulkan device {} ({}, driver {}) runs subgroups other than "
        "the {} lanes it reports: vkllm's kernels would give wrong results there; choose another "
        "device with --device or VKLLM_DEVICE, or another driver (VKLLM_IGNORE_SELFTEST=1 runs "
        "anyway)",
        d.index, d.name, d.driver, d.subgroup_size);
  static std::mutex m;
  static std::set<std::string> said;  // one note per path and device a process
  auto apply = [&](bool wrong, bool chosen, const char* env, bool& off, const char* what) {
    if (!wrong || chosen) return;  // the user's own switch decides
    off = true;
    std::lock_guard<std::mutex> lock(m);
    if (said.insert(d.name + env).second)
      std::fprintf(stderr,
                   "vkllm: `vkllm selftest` found the %s wrong on %s (driver %s): using the "
                   "portable kernels instead (%s=0 overrides; `vkllm selftest` checks again)\n",
                   what, d.name.c_str(), d.driver.c_str(), env);
  };
  const Tuning& t = opt.tuning;
  apply(v->int_dot_wrong, t.chose_int_dot, "VKLLM_NO_INT_DOT", opt.no_int_dot,
        "int8 dot-product kernels");
  apply(v->coopmat_wrong, t.chose_coopmat, "VKLLM_NO_COOPMAT", opt.no_coopmat,
        "cooperative-matrix prefill (GEMM and attention)");
  apply(v->fusion_wrong, t.chose_fusion, "VKLLM_NO_FUSION", opt.no_fusion, "fused decode kernels");
}

}  // namespace vkllm::vk
