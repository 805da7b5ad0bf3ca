// Artifact reader: maps the file and validates everything before use (header, version, hashes,
// metadata, every offset / size / shape / reference of the program). A damaged file throws one
// Error naming the file and the problem. The reader is the WeightSource of the program it holds:
// make_cpu_executor(reader.program(), reader) runs any artifact.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "hf/model_desc.h"
#include "ir/program.h"

namespace vkllm {

struct ReadOptions {
  // Hash every byte of the file (XXH64, ~10 GB/s; tenths of a second for a GB). The header,
  // metadata and embedded files are always hashed; this adds the weights.
  bool check_data_hash = true;
};

class ArtifactReader final : public WeightSource {
 public:
  explicit ArtifactReader(const std::string& path, const ReadOptions& opt = {});
  // Reads a mapping or a view (MappedFile::view: fuzz targets, tests); same checks and errors.
  explicit ArtifactReader(MappedFile file, const ReadOptions& opt = {});

  const std::string& path() const { return file_.path(); }
  uint64_t file_size() const { return file_.size(); }
  uint32_t format_version() const { return version_; }
  const nlohmann::json& metadata() const { return meta_; }
  const ModelDesc& desc() const { return desc_; }
  const Program& program() const { return program_; }
  const nlohmann::json& recipe() const { return meta_.at("recipe"); }
  std::string recipe_name() const;
  uint64_t data_offset() const { return data_offset_; }
  uint64_t data_size() const { return data_size_; }

  // Embedded files (tokenizer.json, tokenizer_config.json, ...), hash-checked at open.
  std::vector<std::string> file_names() const;
  bool has_file(const std::string& name) const;
  std::string_view file(const std::string& name) const;  // throws Error if absent

  // Checks the whole-file hash (done at open unless check_data_hash was false).
  void check_data_hash() const;
  bool data_hash_checked() const { return data_hash_checked_; }

  std::span<const uint8_t> weight(const Program& p, int32_t tensor) const override;

 private:
  struct File {
    std::string name;
    uint64_t offset, nbytes;
  };
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t data_offset_ = 0, data_size_ = 0;
  nlohmann::json meta_;
  ModelDesc desc_;
  Program program_;
  std::vector<File> files_;
  mutable bool data_hash_checked_ = false;
};

}  // namespace vkllm
