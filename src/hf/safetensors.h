// Safetensors reader: memory-mapped, every header field validated before use.
// Format: u64 little-endian header length N, N bytes of JSON header, then the data section.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace vkllm {

enum class StDType { F32, F16, BF16 };
const char* st_dtype_name(StDType t);
size_t st_dtype_size(StDType t);

struct TensorView {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped file
  uint64_t nbytes = 0;
  std::string file;  // shard path, for error messages

  int64_t numel() const;
  // Converts to fp32 (copy). Throws Error if the size does not match.
  std::vector<float> to_f32() const;
  // Writes elements [begin, begin+n) converted to fp32 into out.
  void read_f32(int64_t begin, int64_t n, float* out) const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error naming the file and problem
  // Parses a mapping or a view (MappedFile::view: fuzz targets, tests); same checks and errors.
  explicit SafetensorsFile(MappedFile file);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Serialize tensors into a safetensors file (used by synth and tests). Atomic write.
struct TensorToWrite {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace vkllm
