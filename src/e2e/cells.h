// e2e/cells.tsv: the seven cells of docs/design.md section 1 (model, pinned revision, recipe,
// prompt, expected answer, size limit, tiny twin) and the adapter cell (a LoRA adapter the matrix
// generates for the pulled base and publishes under the `lora` hub id). The file is input like
// any other: every field is checked and a bad one is one error line naming the file, the line and
// the problem.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vkllm {

struct Cell {
  int id = 0;
  std::string model;        // org/name
  std::string revision;     // 40-hex commit
  std::string recipe;       // one of recipe_names()
  std::string prompt_file;  // as written in the file (relative to the file's folder)
  std::string prompt_path;  // resolved path
  std::string expected;     // the answer the real model must print ("Paris")
  std::string max_size;     // "-" or a size such as 770MiB
  uint64_t max_size_bytes = 0;
  std::string twin;  // a `vkllm synth` preset mirroring the model
  // "-" in the file: empty. Else the hub id (org/name) under which the matrix publishes the LoRA
  // adapter it generates for the pulled base (`vkllm synth --lora-for`), pulled by `vkllm export
  // --lora <id>` (e2e/README.md).
  std::string lora;
  std::string spec() const { return model + "@" + revision; }
};

// The columns, in order, of the header line.
const std::vector<std::string>& cell_columns();

// Reads and checks the whole file (blank lines and lines starting with '#' are skipped).
std::vector<Cell> read_cells(const std::string& path);

// "1,3-5,7" (or "all" / empty) -> those cells in file order. Throws Error on an unknown id.
std::vector<Cell> select_cells(const std::vector<Cell>& cells, const std::string& list);

// Literal, case-insensitive (ASCII), whole-word search: the answer gate of every real cell.
// A word boundary is the text's start or end or a character that is not [A-Za-z0-9_] (UTF-8
// bytes >= 0x80 count as word characters, so "Parisien" and "Parisé" do not match "Paris").
bool contains_word(const std::string& text, const std::string& word);

}  // namespace vkllm
