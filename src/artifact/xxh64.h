// XXH64 (the xxHash 64-bit algorithm, written from its public specification), one-shot and
// streaming. Used for the artifact's integrity hashes: fast enough (several GB/s) to check a
// multi-GB file on every load; it detects accidental corruption, not deliberate tampering.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vkllm {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint64_t seed_, total_ = 0;
  unsigned char buf_[32];
  size_t buf_len_ = 0;
};

uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

}  // namespace vkllm
