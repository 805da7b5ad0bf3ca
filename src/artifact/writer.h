// Streaming artifact writer: lays out the data section up front (offsets follow from shapes and
// dtypes), writes header + metadata + embedded files, then takes the weights' bytes in the planned
// order, chunk by chunk, hashing as it goes. The file appears at its path only on finish(), and
// only when it loads: the load check of artifact/load.h runs on the content before anything is
// written (a tokenizer that does not load fails in a second, not after the weights), and
// finish() reads the written file back as Model::open does (ArtifactReader, then the load check)
// before the rename. Whatever the runtime would refuse is refused here with the message the
// runtime gives (naming the output path), and nothing is left at the path.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "artifact/xxh64.h"
#include "core/mapped_file.h"
#include "hf/model_desc.h"
#include "ir/program.h"

namespace vkllm {

struct EmbeddedFile {
  std::string name;  // "tokenizer.json", "tokenizer_config.json", ...
  std::string text;
};

struct ArtifactContent {
  ModelDesc desc;
  nlohmann::json recipe = nlohmann::json::object();    // name + parameters
  nlohmann::json producer = nlohmann::json::object();  // tool, version, source, time
  Program program;                                     // weight offsets are assigned here
  std::vector<EmbeddedFile> files;
};

// Whether the writer checks that the artifact loads (the default), or not (tests that write
// damaged artifacts on purpose).
enum class LoadCheck { Loads, None };

class ArtifactWriter {
 public:
  // `order`: every weight of the program exactly once, in the order their bytes will be given.
  ArtifactWriter(const std::string& path, ArtifactContent content,
                 const std::vector<int32_t>& order, LoadCheck check = LoadCheck::Loads);
  const Program& program() const { return c_.program; }
  uint64_t file_size() const { return file_size_; }  // the final size, known up front
  // The next bytes of the current weight (a weight may arrive in several calls).
  void append(const void* data, size_t n);
  // Checks that every weight was complete, writes the trailer, checks that the file loads and
  // renames it into place.
  void finish();

 private:
  void put(const void* data, size_t n);
  void pad_to(uint64_t file_offset);

  ArtifactContent c_;
  std::vector<int32_t> order_;
  AtomicFile out_;
  std::string out_path_;
  LoadCheck check_;
  Xxh64 hash_;
  uint64_t data_offset_ = 0, data_size_ = 0, file_size_ = 0;
  size_t cur_ = 0;
  uint64_t cur_written_ = 0;
};

// The exact size of the file ArtifactWriter would write (the layout without the data).
uint64_t planned_artifact_size(ArtifactContent content, const std::vector<int32_t>& order);

// Convenience: writes a whole artifact whose weights are in memory (tests, small models).
// weights[i] holds the bytes of program tensor i (ignored for non-weights).
void write_artifact(const std::string& path, ArtifactContent content,
                    const std::vector<std::vector<uint8_t>>& weights,
                    LoadCheck check = LoadCheck::Loads);

}  // namespace vkllm
