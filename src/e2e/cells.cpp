#include "e2e/cells.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>

#include "artifact/verify.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "export/recipe.h"
#include "hf/synth.h"
#include "hub/hub.h"

namespace vkllm {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

bool is_hex40(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

bool word_char(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

int parse_id(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      }))
    fail("{}: '{}' is not a cell number", what, s);
  return std::stoi(s);
}

}  // namespace

const std::vector<std::string>& cell_columns() {
  static const std::vector<std::string> cols = {
      "cell", "model", "revision", "recipe", "prompt_file", "expected", "max_size", "twin", "lora"};
  return cols;
}

std::vector<Cell> read_cells(const std::string& path) {
  const std::string text = read_text_file(path);
  const fs::path base = fs::path(path).parent_path();
  std::istringstream in(text);
  std::vector<Cell> cells;
  std::set<int> ids;
  bool header = false;
  int lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, lineno);
    const auto f = split_tabs(line);
    if (!header) {
      if (f != cell_columns()) {
        std::string want;
        for (auto& c : cell_columns()) want += (want.empty() ? "" : " ") + c;
        fail("{}: the header must be the tab-separated columns: {}", where, want);
      }
      header = true;
      continue;
    }
    if (f.size() != cell_columns().size())
      fail("{}: {} tab-separated fields, expected {}", where, f.size(), cell_columns().size());
    Cell c;
    c.id = parse_id(f[0], where);
    if (c.id < 1 || !ids.insert(c.id).second)
      fail("{}: cell number {} is repeated or < 1", where, c.id);
    c.model = f[1];
    if (c.model.find('@') != std::string::npos)
      fail("{}: put the revision in its own column, not in '{}'", where, c.model);
    try {
      parse_repo_spec(c.model);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
    c.revision = f[2];
    if (!is_hex40(c.revision))
      fail("{}: revision '{}' is not a pinned 40-hex (lowercase) commit id", where, c.revision);
    c.recipe = f[3];
    const auto& names = recipe_names();
    if (std::find(names.begin(), names.end(), c.recipe) == names.end())
      fail("{}: unknown recipe '{}'", where, c.recipe);
    c.prompt_file = f[4];
    const fs::path pf(c.prompt_file);
    if (c.prompt_file.empty() || pf.is_absolute() ||
        std::any_of(pf.begin(), pf.end(), [](const fs::path& p) { return p == ".."; }))
      fail("{}: prompt_file '{}' must be a relative path inside the cells folder", where,
           c.prompt_file);
    c.prompt_path = (base / pf).string();
    if (!fs::is_regular_file(c.prompt_path))
      fail("{}: prompt file {} does not exist", where, c.prompt_path);
    c.expected = f[5];
    if (c.expected.empty() || !std::all_of(c.expected.begin(), c.expected.end(), [](char ch) {
          return word_char(static_cast<unsigned char>(ch));
        }))
      fail("{}: expected answer '{}' must be one word", where, c.expected);
    c.max_size = f[6];
    if (c.max_size != "-") {
      try {
        c.max_size_bytes = parse_size(c.max_size);
      } catch (const Error& e) {
        fail("{}: max_size: {}", where, e.what());
      }
    }
    c.twin = f[7];
    try {
      const SynthPreset& p = find_synth_preset(c.twin);
      if (!p.tiny) fail("'{}' is a full-shape preset, not a tiny twin", c.twin);
      if (p.hf_model != c.model) fail("twin {} mirrors {}, not {}", c.twin, p.hf_model, c.model);
    } catch (const Error& e) {
      fail("{}: twin: {}", where, e.what());
    }
    if (f[8] != "-") {
      c.lora = f[8];
      if (c.lora.find('@') != std::string::npos)
        fail(
            "{}: lora '{}': the matrix publishes its adapter at the hub's main revision; give "
            "the id alone",
            where, c.lora);
      try {
        parse_repo_spec(c.lora);
      } catch (const Error& e) {
        fail("{}: lora: {}", where, e.what());
      }
      if (c.lora == c.model) fail("{}: lora: the adapter's id must differ from the model's", where);
    }
    cells.push_back(std::move(c));
  }
  if (!header) fail("{}: empty (no header line)", path);
  if (cells.empty()) fail("{}: no cells", path);
  return cells;
}

std::vector<Cell> select_cells(const std::vector<Cell>& cells, const std::string& list) {
  if (list.empty() || list == "all") return cells;
  std::set<int> want;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const std::string what = fmt::format("--cells '{}'", list);
    const size_t dash = item.find('-');
    const int a = parse_id(item.substr(0, dash), what);
    const int b = dash == std::string::npos ? a : parse_id(item.substr(dash + 1), what);
    if (b < a || b - a > 1000) fail("{}: bad range '{}'", what, item);
    for (int i = a; i <= b; ++i) {
      if (std::none_of(cells.begin(), cells.end(), [i](const Cell& c) { return c.id == i; })) {
        std::string known;
        for (auto& c : cells) known += fmt::format("{}{}", known.empty() ? "" : ",", c.id);
        fail("{}: there is no cell {} (cells: {})", what, i, known);
      }
      want.insert(i);
    }
  }
  std::vector<Cell> out;
  for (const auto& c : cells)
    if (want.count(c.id)) out.push_back(c);
  return out;
}

bool contains_word(const std::string& text, const std::string& word) {
  if (word.empty() || text.size() < word.size()) return false;
  auto lower = [](unsigned char c) {
    return c < 0x80 ? static_cast<char>(std::tolower(c)) : static_cast<char>(c);
  };
  for (size_t i = 0; i + word.size() <= text.size(); ++i) {
    bool eq = true;
    for (size_t k = 0; k < word.size() && eq; ++k)
      eq = lower(static_cast<unsigned char>(text[i + k])) ==
           lower(static_cast<unsigned char>(word[k]));
    if (!eq) continue;
    const bool left = i == 0 || !word_char(static_cast<unsigned char>(text[i - 1]));
    const size_t j = i + word.size();
    const bool right = j == text.size() || !word_char(static_cast<unsigned char>(text[j]));
    if (left && right) return true;
  }
  return false;
}

}  // namespace vkllm
