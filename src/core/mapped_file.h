// Read-only memory map of a whole file (safetensors shards, artifacts).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace vkllm {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Whole small text file (config.json, tokenizer.json). Throws Error naming the path.
std::string read_text_file(const std::string& path);

// Writes to "<path>.tmp-<pid>" and renames onto path on commit(); removes the temp file if
// destroyed without commit (an interrupted or failed write leaves nothing at path).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void write_zeros(size_t n);
  uint64_t offset() const { return offset_; }
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t offset_ = 0;
  bool committed_ = false;
};

}  // namespace vkllm
