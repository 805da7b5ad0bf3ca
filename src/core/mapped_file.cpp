#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace vkllm {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot map: {}", path, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    owned_ = true;
  }
  ::close(fd);
}

MappedFile MappedFile::view(std::span<const uint8_t> bytes, std::string name) {
  MappedFile m;
  m.path_ = std::move(name);
  m.data_ = bytes.data();
  m.size_ = bytes.size();
  return m;
}

MappedFile::~MappedFile() {
  if (owned_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_), owned_(o.owned_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.owned_ = false;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (owned_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    owned_ = o.owned_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owned_ = false;
  }
  return *this;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read error", path);
  return ss.str();
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path_.substr(0, slash);
  // commit() names the unnamed file through /proc/self/fd; without /proc use a named temp.
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    unnamed_ = fd_ >= 0;
  }
  if (fd_ < 0) fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create output: {}", path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !unnamed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path_, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::write_zeros(size_t n) {
  static const std::vector<char> zeros(4096, 0);
  while (n > 0) {
    size_t k = std::min(n, zeros.size());
    write(zeros.data(), k);
    n -= k;
  }
}

MappedFile AtomicFile::map_written() const {
  if (fd_ < 0 || committed_) fail("{}: the output is not open", path_);
  return MappedFile(unnamed_ ? "/proc/self/fd/" + std::to_string(fd_) : tmp_);
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, std::strerror(errno));
  if (unnamed_) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    ::unlink(tmp_.c_str());  // a leftover of an earlier process with our pid
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0)
      fail("{}: cannot link the output into place: {}", path_, std::strerror(errno));
    unnamed_ = false;  // from here on the destructor removes tmp_ if the rename does not happen
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("{}: close failed: {}", path_, std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("{}: rename failed: {}", path_, std::strerror(errno));
  committed_ = true;
}

void write_text_file(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace vkllm
