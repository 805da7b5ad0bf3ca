#include "e2e/matrix.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "e2e/process.h"
#include "e2e/twin_hub.h"

namespace vkllm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string read_or_empty(const std::string& path) {
  try {
    return fs::exists(path) ? read_text_file(path) : std::string();
  } catch (const Error&) {
    return {};
  }
}

// A child's stdout parsed as one JSON document; null when it is not JSON.
json parse_json(const std::string& text) {
  return json::parse(text, nullptr, false);
}

// The last `vkllm-stats {...}` line of a runner's stderr; null when there is none.
json stats_line(const std::string& err) {
  const std::string tag = "vkllm-stats ";
  json found;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(tag, 0) == 0) found = parse_json(line.substr(tag.size()));
  return found.is_object() ? found : json(nullptr);
}

std::string mib(uint64_t b) {
  return fmt::format("{:.1f} MiB", b / 1048576.0);
}

// One cell: its stages in order, each a child process; the first failing gate ends the cell.
class CellRun {
 public:
  // golden_done: the golden stage's result per model spec, shared by the cells of one matrix.
  CellRun(const MatrixOptions& o, const Cell& c, const std::string& exe, const std::string& out,
          const TwinHub* hub, std::map<std::string, std::pair<int, StageResult>>& golden_done)
      : o_(o), exe_(exe), out_(out), hub_(hub), golden_done_(golden_done) {
    r_.cell = c;
    for (const auto& n : stage_names()) r_.stages.push_back(StageResult{n});
    log_rel_ = "logs/cell" + std::to_string(c.id);
    fs::create_directories(out_ + "/" + log_rel_);
    fs::create_directories(out_ + "/artifacts");
    artifact_ = out_ + "/artifacts/cell" + std::to_string(c.id) + ".vkllm";
  }

  CellResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = pull() && lora() && golden() && export_artifact() && verify() && run_vulkan() &&
              run_cpu() && quality();
    lora_hub_.reset();
    std::error_code ec;
    if (!o_.keep_artifacts) {
      fs::remove(artifact_, ec);
      if (!merged_.empty()) fs::remove(merged_, ec);
    }
    r_.pass = ok;
    if (ok) {  // what the gates measured: the stages that compare against something
      std::string s;
      for (const auto& st : r_.stages) {
        const bool gate = st.name == "lora" || st.name == "golden" || st.name == "cpu" ||
                          st.name == "quality" || (st.name == "run" && !hub_) ||
                          (st.name == "verify" && (r_.cell.max_size_bytes || has_lora()));
        if (st.ran && gate) s += (s.empty() ? "" : "; ") + st.note;
      }
      r_.reason = s;
    }
    r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r_;
  }

 private:
  StageResult& stage(const std::string& name) {
    for (auto& s : r_.stages)
      if (s.name == name) return s;
    fail("internal: no stage {}", name);
  }

  bool has_lora() const { return !r_.cell.lora.empty(); }

  // The environment of a child that pulls the cell's adapter (an export with --lora).
  std::map<std::string, std::optional<std::string>> lora_env() const {
    return lora_hub_ ? lora_hub_->pull_env(lora_cache_)
                     : std::map<std::string, std::optional<std::string>>{};
  }

  // The export arguments that merge the cell's adapter, pulled from its hub as a user would.
  std::vector<std::string> lora_args() const {
    return has_lora() ? std::vector<std::string>{"--lora", r_.cell.lora}
                      : std::vector<std::string>{};
  }

  bool fail_stage(StageResult& s, const std::string& why) {
    s.ok = false;
    s.note = why;
    r_.reason = s.name + ": " + why;
    progress(s);
    return false;
  }

  bool pass_stage(StageResult& s, const std::string& note) {
    s.ok = true;
    s.note = note;
    progress(s);
    return true;
  }

  void progress(const StageResult& s) {
    if (o_.progress)
      o_.progress(fmt::format("  {:<8} {:<4} {:7.1f} s  {}", s.name, s.ok ? "ok" : "FAIL",
                              s.seconds, s.note));
  }

  // Runs `vkllm args...` as (part of) stage s, logged as <log>.stdout / .stderr (log: the stage
  // name unless given).
  ChildResult child(StageResult& s, const std::vector<std::string>& args,
                    const std::map<std::string, std::optional<std::string>>& env = {},
                    const std::string& log = "") {
    r_.stage = s.name;
    s.ran = true;
    ChildSpec c;
    c.argv = {exe_};
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    c.env = env;
    const std::string base = log_rel_ + "/" + (log.empty() ? s.name : log);
    c.stdout_path = out_ + "/" + base + ".stdout";
    c.stderr_path = out_ + "/" + base + ".stderr";
    c.timeout_s = o_.stage_timeout_s;
    s.logs.insert(s.logs.end(), {base + ".stdout", base + ".stderr"});
    const ChildResult res = run_child(c);
    s.seconds += res.seconds;
    s.status = res.describe();
    out_text_ = read_or_empty(c.stdout_path);
    err_text_ = read_or_empty(c.stderr_path);
    return res;
  }

  // "exit 1: <its one-line error>"
  std::string child_failure(const ChildResult& res) const {
    const std::string line = last_line(err_text_);
    return line.empty() ? res.describe() : res.describe() + ": " + line;
  }

  std::string ids_path(const std::string& stage_name) const {
    return out_ + "/" + log_rel_ + "/" + stage_name + ".ids.json";
  }

  // `vkllm run` of `model` with the cell's prompt; the ids it writes are returned in ids.
  bool runner(StageResult& s, const std::string& model, const std::string& backend, int n,
              json& ids, json& stats, const std::string& log = "") {
    const std::string name = log.empty() ? s.name : log;
    std::vector<std::string> a = {"run",
                                  "-m",
                                  model,
                                  "--prompt_file",
                                  r_.cell.prompt_path,
                                  "-n",
                                  std::to_string(n),
                                  "--temperature",
                                  "0",
                                  "--backend",
                                  backend,
                                  "--ids_file",
                                  ids_path(name)};
    if (backend == "vulkan" && !o_.device.empty()) a.insert(a.end(), {"--device", o_.device});
    const ChildResult res = child(s, a, {}, name);
    s.logs.push_back(log_rel_ + "/" + name + ".ids.json");
    if (!res.ok()) return fail_stage(s, child_failure(res));
    stats = stats_line(err_text_);
    if (stats.is_null()) return fail_stage(s, "no vkllm-stats line at the end of stderr");
    ids = parse_json(read_or_empty(ids_path(name)));
    if (!ids.is_object() || !ids.contains("generated_ids") || !ids["generated_ids"].is_array())
      return fail_stage(s, "no token ids written to " + ids_path(name));
    if (stats.value("validation_messages", 0) > 0)
      return fail_stage(
          s, fmt::format("the Vulkan validation layer reported {} messages (see {}.stderr)",
                         stats.value("validation_messages", 0), name));
    return true;
  }

  bool pull() {
    StageResult& s = stage("pull");
    const auto env = hub_ ? hub_->pull_env() : std::map<std::string, std::optional<std::string>>{};
    const ChildResult res = child(s, {"pull", r_.cell.spec(), "--json"}, env);
    if (!res.ok()) return fail_stage(s, child_failure(res));
    pulled_ = parse_json(out_text_);
    if (!pulled_.is_object() || !pulled_.contains("snapshot_dir"))
      return fail_stage(s, "`vkllm pull --json` printed no snapshot_dir");
    snapshot_ = pulled_["snapshot_dir"].get<std::string>();
    int downloaded = 0, files = 0;
    for (const auto& f : pulled_.value("files", json::array())) {
      ++files;
      downloaded += f.value("downloaded", false);
    }
    return pass_stage(s, fmt::format("{} files, {} downloaded", files, downloaded));
  }

  // Twin mode: the fp32 twin continues the prompt exactly as transformers did
  // (tests/goldens/<twin>.json, made on the GPU machine), twice: the pulled folder lowered in fp32
  // on the CPU reference backend, and its non-quantized artifact greedily on Vulkan (whose
  // arithmetic is exact enough: float summation order only). Once per model and revision: later
  // cells of the same model reuse the result.
  // An adapter cell adds the merged model's golden (merged_golden) to its base's.
  bool golden() {
    if (!hub_) return true;
    StageResult& s = stage("golden");
    if (auto it = golden_done_.find(r_.cell.spec()); it != golden_done_.end()) {
      s = it->second.second;
      s.seconds = 0;
      s.note += fmt::format(" (checked in cell {})", it->second.first);
      r_.stage = s.name;
      if (!s.ok) return fail_stage(s, s.note);
    } else {
      const bool ok = check_golden(s);
      golden_done_[r_.cell.spec()] = {r_.cell.id, s};
      if (!ok) return false;
    }
    if (!has_lora()) return pass_stage(s, s.note);
    return merged_golden(s);
  }

  // The transformers golden of the cell's twin (checked by check_golden before it is used).
  json base_golden() const {
    return parse_json(read_or_empty(o_.goldens_dir + "/" + r_.cell.twin + ".json"));
  }

  int golden_n(const json& g) const {
    return std::min<int>(o_.golden_tokens, static_cast<int>(g["continuation_ids"].size()));
  }

  // The base: ok with s.note set, or failed (fail_stage).
  bool check_golden(StageResult& s) {
    r_.stage = s.name;
    s.ran = true;
    const std::string gpath = o_.goldens_dir + "/" + r_.cell.twin + ".json";
    const json g = base_golden();
    if (!g.is_object() || !g.contains("continuation_ids") || !g.contains("prompt_ids") ||
        !g["continuation_ids"].is_array())
      return fail_stage(s, gpath + ": missing or not a golden file");
    if (auto why = golden_pin_mismatch(g, pulled_.value("files", json::array())); !why.empty())
      return fail_stage(s, why);
    const auto cont = g["continuation_ids"].get<std::vector<int>>();
    const int n = golden_n(g);
    // Both runs' ids against the golden's; "" when they are equal, else why not.
    const auto differs = [&](const json& ids, const std::string& what) -> std::string {
      if (ids["prompt_ids"] != g["prompt_ids"])
        return fmt::format(
            "prompt ids differ from the golden's ({} vs {} ids): {} tokenizes differently",
            ids["prompt_ids"].size(), g["prompt_ids"].size(), r_.cell.prompt_file);
      const auto got = ids["generated_ids"].get<std::vector<int>>();
      for (int k = 0; k < n; ++k)
        if (k >= static_cast<int>(got.size()) || got[k] != cont[k])
          return fmt::format(
              "{} differs from the transformers golden at step {}: {} vs golden {}", what, k,
              k < static_cast<int>(got.size()) ? std::to_string(got[k]) : "(stopped)", cont[k]);
      return "";
    };
    json ids, stats;
    if (!runner(s, snapshot_, "cpu", n, ids, stats)) return false;
    if (auto why = differs(ids, "fp32 twin"); !why.empty()) return fail_stage(s, why);
    // The same on Vulkan: the twin's non-quantized artifact.
    const std::string fp32 = out_ + "/artifacts/golden-" + r_.cell.twin + ".vkllm";
    const ChildResult res =
        child(s, {"export", snapshot_, "--recipe", "non-quantized", "-o", fp32, "--json"}, {},
              "golden-export");
    if (!res.ok()) return fail_stage(s, "export of the fp32 artifact: " + child_failure(res));
    const bool ran = runner(s, fp32, "vulkan", n, ids, stats, "golden-vulkan");
    std::error_code ec;
    if (!o_.keep_artifacts) fs::remove(fp32, ec);
    if (!ran) return false;
    if (auto why = differs(ids, "the fp32 artifact on Vulkan"); !why.empty())
      return fail_stage(s, why);
    s.ok = true;
    s.note = fmt::format(
        "fp32 twin = transformers golden ({}/{} ids) on the CPU (folder) and on Vulkan "
        "(non-quantized artifact)",
        n, n);
    return true;
  }

  // An adapter cell's golden: the merged model, the base exported non-quantized with the adapter
  // pulled from the cell's hub, run greedily on the CPU reference backend (the merge itself is
  // checked against Hugging Face peft by tests/export/test_lora_goldens.cpp). Its greedy ids
  // must part from the base's transformers golden: an adapter that is not applied, or whose B is
  // zero, changes nothing and fails here. The merged artifact is the quality stage's reference.
  bool merged_golden(StageResult& s) {
    const std::string base_note = s.note;
    s.ok = false;
    const json g = base_golden();
    const auto cont = g["continuation_ids"].get<std::vector<int>>();
    const int n = golden_n(g);
    merged_ = out_ + "/artifacts/golden-lora-cell" + std::to_string(r_.cell.id) + ".vkllm";
    std::vector<std::string> a = {"export", snapshot_, "--recipe", "non-quantized",
                                  "-o",     merged_,   "--json"};
    const auto la = lora_args();
    a.insert(a.end(), la.begin(), la.end());
    const ChildResult res = child(s, a, lora_env(), "golden-lora-export");
    if (!res.ok())
      return fail_stage(s, "export of the merged fp32 artifact: " + child_failure(res));
    const json e = parse_json(out_text_);
    const int modules = e.is_object() && e.contains("lora") && e["lora"].is_object()
                            ? e["lora"].value("modules", 0)
                            : 0;
    if (modules < 1) return fail_stage(s, "the merged fp32 export reports no merged LoRA module");
    json ids, stats;
    if (!runner(s, merged_, "cpu", n, ids, stats, "golden-lora")) return false;
    if (ids["prompt_ids"] != g["prompt_ids"])
      return fail_stage(s, "the merged model's prompt ids differ from the base golden's");
    const auto got = ids["generated_ids"].get<std::vector<int>>();
    int part = -1;
    for (int k = 0; k < n && part < 0; ++k)
      if (k >= static_cast<int>(got.size()) || got[k] != cont[k]) part = k;
    if (part < 0)
      return fail_stage(
          s, fmt::format("the merged model's {} greedy ids on the CPU equal the base twin's "
                         "transformers golden: the adapter changed nothing",
                         n));
    return pass_stage(s, fmt::format("{}; merged fp32 ({} LoRA modules) on the CPU = this cell's "
                                     "golden, parting from the base's at step {}",
                                     base_note, modules, part));
  }

  // An adapter cell: the adapter generated for the pulled base (`vkllm synth --lora-for`: random
  // non-zero A and B shaped by its config.json, the twin's in twin mode, the real model's in real
  // mode), published as the cell's `lora` id by a loopback hub of its own; the exports pull it from
  // there with `--lora <id>`, exactly as a user would from the Hugging Face hub.
  bool lora() {
    if (!has_lora()) return true;
    StageResult& s = stage("lora");
    const std::string root = out_ + "/lora-hub/cell" + std::to_string(r_.cell.id);
    lora_cache_ = out_ + "/lora-cache/cell" + std::to_string(r_.cell.id);
    std::error_code ec;
    fs::remove_all(root, ec);
    fs::remove_all(lora_cache_, ec);
    const std::string dir = root + "/" + r_.cell.lora;
    const ChildResult res =
        child(s,
              {"synth", "--lora", dir, "--lora-for", snapshot_, "--lora-base", r_.cell.model,
               "--lora-strength", fmt::format("{}", o_.lora_strength), "--json"},
              {}, "lora-synth");
    if (!res.ok()) return fail_stage(s, "generating the adapter: " + child_failure(res));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      lora_hub_ =
          std::make_unique<LoopbackHub>(o_.repo_root, root, out_ + "/" + log_rel_, "lora-hub");
    } catch (const Error& e) {
      return fail_stage(s, e.what());
    }
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const char* f : {"lora-hub.stdout", "lora-hub.stderr", "lora-hub-requests.jsonl"})
      s.logs.push_back(log_rel_ + "/" + f);
    std::error_code sz;
    const auto bytes = fs::file_size(dir + "/adapter_model.safetensors", sz);
    return pass_stage(s, fmt::format("adapter for the pulled base (strength {:g}, {}) published "
                                     "as {} on the loopback hub {}",
                                     o_.lora_strength, sz ? "?" : mib(bytes), r_.cell.lora,
                                     lora_hub_->endpoint()));
  }

  bool export_artifact() {
    StageResult& s = stage("export");
    std::vector<std::string> a = {"export", snapshot_, "--recipe", r_.cell.recipe,
                                  "-o",     artifact_, "--json"};
    const auto la = lora_args();
    a.insert(a.end(), la.begin(), la.end());
    const ChildResult res = child(s, a, lora_env());
    if (!res.ok()) return fail_stage(s, child_failure(res));
    const json j = parse_json(out_text_);
    r_.artifact_bytes = j.is_object() ? j.value("file_size", uint64_t{0}) : 0;
    if (!r_.artifact_bytes)
      r_.artifact_bytes = fs::exists(artifact_) ? fs::file_size(artifact_) : 0;
    if (!has_lora()) return pass_stage(s, mib(r_.artifact_bytes));
    const int modules = j.is_object() && j.contains("lora") && j["lora"].is_object()
                            ? j["lora"].value("modules", 0)
                            : 0;
    if (modules < 1) return fail_stage(s, "the export reports no merged LoRA module");
    return pass_stage(s,
                      fmt::format("{}, {} LoRA modules merged", mib(r_.artifact_bytes), modules));
  }

  bool verify() {
    StageResult& s = stage("verify");
    std::vector<std::string> a = {"verify", artifact_, "--recipe", r_.cell.recipe};
    if (r_.cell.max_size_bytes) a.insert(a.end(), {"--max-size", r_.cell.max_size});
    const ChildResult res = child(s, a);
    if (!res.ok()) return fail_stage(s, child_failure(res));
    std::string note = r_.cell.max_size_bytes
                           ? fmt::format("{} <= {}", mib(r_.artifact_bytes), r_.cell.max_size)
                           : "recipe, GPU delegation and integrity ok";
    if (has_lora()) {  // the artifact records the adapter it was merged with, as pulled
      const std::string tag = "  lora       ";
      std::string line;
      std::istringstream in(out_text_);
      for (std::string l; std::getline(in, l);)
        if (l.rfind(tag, 0) == 0) line = l.substr(tag.size());
      if (line.rfind(r_.cell.lora + " @ ", 0) != 0)
        return fail_stage(s, fmt::format("verify prints no adapter {} pulled from the hub (its "
                                         "lora line: '{}')",
                                         r_.cell.lora, line));
      note += "; lora " + line;
    }
    return pass_stage(s, note);
  }

  bool run_vulkan() {
    StageResult& s = stage("run");
    json stats;
    if (!runner(s, artifact_, "vulkan", o_.max_new_tokens, vk_ids_, stats)) return false;
    r_.prefill_tok_s = stats.value("prefill_tok_s", 0.0);
    r_.decode_tok_s = stats.value("decode_tok_s", 0.0);
    r_.peak_host_mb = stats.value("peak_host_mb", 0.0);
    r_.peak_gpu_mb = stats.value("peak_gpu_mb", 0.0);
    r_.device = stats.value("device", "");
    r_.answer = out_text_.size() > 4000 ? out_text_.substr(0, 4000) + "..." : out_text_;
    const int n = stats.value("generated_tokens", 0);
    if (hub_) return pass_stage(s, fmt::format("{} tokens on {}", n, r_.device));
    if (!contains_word(out_text_, r_.cell.expected))
      return fail_stage(
          s, fmt::format("answer '{}' not found in the runner's stdout ({} tokens: \"{}\")",
                         r_.cell.expected, n, last_line(out_text_, 80)));
    return pass_stage(s, fmt::format("answer '{}' found ({} tokens)", r_.cell.expected, n));
  }

  // Twin mode: Vulkan against the CPU reference backend on the same artifact, by `vkllm verify
  // --agree` (src/runtime/agreement.h: at every greedy step the logits NMSE under the recipe's
  // bound and Vulkan's token the CPU's argmax or a near tie); the tokens it verified must be the
  // ones the run stage printed.
  bool run_cpu() {
    if (!hub_) return true;
    StageResult& s = stage("cpu");
    std::vector<std::string> args = {"verify",         artifact_,
                                     "--agree",        r_.cell.prompt_path,
                                     "--agree-tokens", std::to_string(o_.max_new_tokens),
                                     "--json"};
    if (!o_.device.empty()) args.insert(args.end(), {"--device", o_.device});
    const ChildResult res = child(s, args, {}, "cpu-agree");
    const json v = parse_json(out_text_);
    if (!v.is_object() || !v.contains("agreement") || !v["agreement"].is_object())
      return fail_stage(s, child_failure(res));
    const json& g = v["agreement"];
    if (!g.value("ok", false))
      return fail_stage(
          s, "Vulkan disagrees with the CPU reference: " + g.value("reason", std::string("?")));
    if (!res.ok()) return fail_stage(s, child_failure(res));
    json verified = g["tokens"];  // ends with the eos id where the run stopped at it
    if (vk_ids_.value("stopped_by_eos", false) && verified.is_array() && !verified.empty())
      verified.erase(verified.size() - 1);
    if (verified != vk_ids_["generated_ids"])
      return fail_stage(s,
                        "the run stage's tokens differ from the Vulkan tokens verify --agree "
                        "checked (same artifact, prompt and greedy decoding)");
    const int steps = g.value("steps", 0), exact = g.value("exact", 0);
    return pass_stage(
        s, fmt::format(
               "Vulkan vs CPU logits, CPU teacher-forced on Vulkan's tokens: {}/{} steps "
               "the CPU's argmax, {} near ties (<= {}, worst CPU margin {:.3g} <= {:g}), "
               "top-{} logits within {:.3g} (<= {:g}), NMSE <= {:.2g} (<= {:g}){}",
               exact, steps, g.value("near_ties", 0), g.value("max_near_ties", 0),
               g.value("worst_tie_margin", 0.0), g.value("max_tie_margin", 0.0),
               g.value("top_k", 0), g.value("worst_topk_diff", 0.0), g.value("max_topk_diff", 0.0),
               g.value("worst_logits_nmse", 0.0), g.value("max_logits_nmse", 0.0),
               g.value("greedy_tokens_equal", false) ? "; free greedy runs identical" : ""));
  }

  // Twin mode: the recipe's quality gate against the fp32 twin (docs/quality.md).
  bool quality() {
    if (!hub_) return true;
    StageResult& s = stage("quality");
    // An adapter cell is measured against its merged model (the golden stage's merged artifact).
    const std::string ref = merged_.empty() ? snapshot_ : merged_;
    const ChildResult res = child(s, {"e2e", "quality", artifact_, "--reference", ref, "--json"});
    const json q = parse_json(out_text_);
    if (!q.is_object() || !q.contains("kl_mean")) return fail_stage(s, child_failure(res));
    const std::string m = fmt::format(
        "KL {:.3f} {} {:g}, top-1 {:.3f} {} {:g}", q["kl_mean"].get<double>(),
        q["kl_mean"].get<double>() <= q["gate"]["kl_mean_max"].get<double>() ? "<=" : ">",
        q["gate"]["kl_mean_max"].get<double>(), q["top1"].get<double>(),
        q["top1"].get<double>() >= q["gate"]["top1_min"].get<double>() ? ">=" : "<",
        q["gate"]["top1_min"].get<double>());
    if (!q.value("pass", false) || !res.ok()) return fail_stage(s, "quality gate: " + m);
    return pass_stage(s, merged_.empty() ? m : m + " (vs the merged fp32 model)");
  }

  const MatrixOptions& o_;
  std::string exe_, out_;
  const TwinHub* hub_;
  std::map<std::string, std::pair<int, StageResult>>& golden_done_;
  CellResult r_;
  std::string log_rel_, artifact_, snapshot_, out_text_, err_text_;
  std::string lora_cache_, merged_;  // an adapter cell's hub cache and merged fp32 artifact
  std::unique_ptr<LoopbackHub> lora_hub_;
  json pulled_, vk_ids_;
};

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_outputs(const MatrixResult& r) {
  write_results_tsv(r, r.out_dir + "/results.tsv");
  AtomicFile f(r.out_dir + "/results.json");
  const std::string j = r.to_json().dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  f.write(j.data(), j.size());
  f.commit();
  write_report_html(r, r.out_dir + "/report.html");
}

}  // namespace

std::string golden_pin_mismatch(const json& golden, const json& pulled_files) {
  // Both documents are read defensively: a wrong type is a mismatch, not an exception.
  const auto str = [](const json& o, const char* k) {
    return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "";
  };
  const json pins =
      golden.is_object() && golden.contains("files_sha256") ? golden["files_sha256"] : json();
  const std::string want_sha = str(pins, "model.safetensors");
  if (want_sha.empty()) return "the golden pins no sha256 of model.safetensors";
  for (const auto& f : pulled_files.is_array() ? pulled_files : json::array()) {
    if (str(f, "name") != "model.safetensors") continue;
    if (str(f, "etag") == want_sha) return "";
    return fmt::format(
        "the served twin's model.safetensors (sha256 {}) is not the one the golden was made "
        "from ({})",
        str(f, "etag"), want_sha);
  }
  return "the pulled snapshot has no model.safetensors, whose sha256 the golden pins";
}

const std::vector<std::string>& stage_names() {
  static const std::vector<std::string> n = {"pull",   "lora", "golden", "export",
                                             "verify", "run",  "cpu",    "quality"};
  return n;
}

bool MatrixResult::all_pass() const {
  for (const auto& c : cells)
    if (!c.pass) return false;
  return !cells.empty();
}

MatrixResult run_matrix(const MatrixOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Cell> cells = select_cells(read_cells(o.cells_file), o.cells);
  MatrixResult res;
  res.twins = o.twins;
  res.max_new_tokens = o.max_new_tokens;
  res.started_at = utc_now();
  res.command = o.command;
  res.cells_file = o.cells_file;
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  res.host = host;
  fs::create_directories(o.out_dir);
  res.out_dir = fs::canonical(o.out_dir).string();
  const std::string exe = o.exe.empty() ? self_exe_path() : o.exe;
  const std::string logs = res.out_dir + "/logs";
  std::error_code ec;
  fs::remove_all(logs, ec);
  fs::create_directories(logs);
  for (const char* f : {"results.tsv", "results.json", "report.html"})
    fs::remove(res.out_dir + "/" + f, ec);
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  say(fmt::format("{} mode, {} cell(s), output in {}", o.twins ? "twin" : "real", cells.size(),
                  res.out_dir));
  std::unique_ptr<TwinHub> hub;
  if (o.twins)
    hub = std::make_unique<TwinHub>(exe, o.repo_root, cells, res.out_dir, logs, o.progress);
  MatrixOptions opts = o;
  if (opts.goldens_dir.empty()) opts.goldens_dir = o.repo_root + "/tests/goldens";
  std::map<std::string, std::pair<int, StageResult>> golden_done;
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    say(fmt::format("[{}/{}] cell {}: {} {}{}", i + 1, cells.size(), c.id, c.model, c.recipe,
                    o.twins ? " (twin " + c.twin + ")" : ""));
    res.cells.push_back(CellRun(opts, c, exe, res.out_dir, hub.get(), golden_done).run());
    const CellResult& cr = res.cells.back();
    say(fmt::format("[{}/{}] cell {}: {} in {:.1f} s{}", i + 1, cells.size(), c.id,
                    cr.pass ? "PASS" : "FAIL", cr.seconds, cr.pass ? "" : " - " + cr.reason));
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_outputs(res);  // after every cell, so a long run can be watched
  }
  hub.reset();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_outputs(res);
  return res;
}

}  // namespace vkllm
