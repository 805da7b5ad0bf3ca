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
  // A view of bytes the caller keeps alive (fuzz targets, tests): parsers see it exactly like a
  // mapped file named `name`; nothing is unmapped or released.
  static MappedFile view(std::span<const uint8_t> bytes, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // True for a real mapping (its pages may be dropped with madvise), false for a view.
  bool is_mapping() const { return owned_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
};

// Whole small text file (config.json, tokenizer.json). Throws Error naming the path.
std::string read_text_file(const std::string& path);

// Writes an output file atomically: the bytes go to an unnamed file in the target's folder
// (O_TMPFILE) that commit() links in place of `path` (via "<path>.tmp-<pid>" and rename), so a
// process killed at any point before commit() leaves nothing behind, not even a temp file. Where
// the filesystem lacks O_TMPFILE the file is "<path>.tmp-<pid>" from the start, removed when the
// object is destroyed without commit (an error, an exception; not SIGKILL).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void write_zeros(size_t n);
  uint64_t offset() const { return offset_; }
  // Maps the bytes written so far, read-only, before commit() (a check of the output before it
  // is put in place). The mapping's path is the file's /proc/self/fd name or its temp name.
  MappedFile map_written() const;
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool unnamed_ = false;  // O_TMPFILE: tmp_ exists only during commit()
  uint64_t offset_ = 0;
  bool committed_ = false;
};

// The whole of `text` as the file `path`, atomically (an AtomicFile written and committed).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace vkllm
