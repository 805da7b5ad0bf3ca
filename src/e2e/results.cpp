// results.tsv and results.json of the e2e matrix.
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"
#include "e2e/matrix.h"

namespace vkllm {

using json = nlohmann::json;

namespace {

std::string field(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s.empty() ? "-" : s;
}

std::string num(double v, const char* f = "{:.1f}") {
  return v > 0 ? fmt::format(fmt::runtime(f), v) : "-";
}

}  // namespace

json CellResult::to_json() const {
  json st = json::array();
  for (const auto& s : stages)
    st.push_back({{"name", s.name},
                  {"ran", s.ran},
                  {"ok", s.ok},
                  {"seconds", s.seconds},
                  {"status", s.status},
                  {"note", s.note},
                  {"logs", s.logs}});
  return {{"cell", cell.id},
          {"model", cell.model},
          {"revision", cell.revision},
          {"recipe", cell.recipe},
          {"twin", cell.twin},
          {"lora", cell.lora},
          {"expected", cell.expected},
          {"max_size", cell.max_size},
          {"prompt_file", cell.prompt_file},
          {"stage", stage},
          {"pass", pass},
          {"reason", reason},
          {"artifact_bytes", artifact_bytes},
          {"prefill_tok_s", prefill_tok_s},
          {"decode_tok_s", decode_tok_s},
          {"peak_host_mb", peak_host_mb},
          {"peak_gpu_mb", peak_gpu_mb},
          {"device", device},
          {"answer", answer},
          {"seconds", seconds},
          {"stages", st}};
}

json MatrixResult::to_json() const {
  json cs = json::array();
  for (const auto& c : cells) cs.push_back(c.to_json());
  int passed = 0;
  for (const auto& c : cells) passed += c.pass;
  return {{"mode", twins ? "twins" : "real"},
          {"started_at", started_at},
          {"command", command},
          {"max_new_tokens", max_new_tokens},
          {"host", host},
          {"out_dir", out_dir},
          {"cells_file", cells_file},
          {"seconds", seconds},
          {"passed", passed},
          {"failed", static_cast<int>(cells.size()) - passed},
          {"stage_names", stage_names()},
          {"cells", cs}};
}

std::vector<std::string> results_columns() {
  std::vector<std::string> c = {"cell",          "model",        "recipe",       "twin",
                                "stage",         "result",       "reason",       "artifact_bytes",
                                "prefill_tok_s", "decode_tok_s", "peak_host_mb", "peak_gpu_mb",
                                "lora"};
  for (const auto& s : stage_names()) c.push_back(s + "_s");
  return c;
}

void write_results_tsv(const MatrixResult& r, const std::string& path) {
  std::string out;
  for (const auto& c : results_columns()) out += (out.empty() ? "" : "\t") + c;
  out += "\n";
  for (const auto& c : r.cells) {
    std::vector<std::string> f = {std::to_string(c.cell.id),
                                  c.cell.model,
                                  c.cell.recipe,
                                  r.twins ? c.cell.twin : "-",
                                  c.stage,
                                  c.pass ? "PASS" : "FAIL",
                                  c.reason,
                                  c.artifact_bytes ? std::to_string(c.artifact_bytes) : "-",
                                  num(c.prefill_tok_s),
                                  num(c.decode_tok_s, "{:.2f}"),
                                  num(c.peak_host_mb),
                                  num(c.peak_gpu_mb),
                                  c.cell.lora};
    for (const auto& s : c.stages) f.push_back(s.ran ? fmt::format("{:.2f}", s.seconds) : "-");
    std::string line;
    for (const auto& x : f) line += fmt::format("{}{}", line.empty() ? "" : "\t", field(x));
    out += line + "\n";
  }
  AtomicFile file(path);
  file.write(out.data(), out.size());
  file.commit();
}

}  // namespace vkllm
