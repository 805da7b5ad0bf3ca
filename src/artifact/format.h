// The single-file artifact (docs/artifact.md): a fixed header, JSON metadata, an aligned data
// section (embedded files, then weights), and a trailer holding the whole-file hash.
#pragma once
#include <cstdint>

namespace vkllm::artifact {

inline constexpr char kMagic[8] = {'V', 'K', 'L', 'L', 'M', 'A', 'R', 'T'};
inline constexpr char kTrailerMagic[8] = {'V', 'K', 'L', 'L', 'M', 'E', 'N', 'D'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kHeaderSize = 64;
inline constexpr uint64_t kTrailerSize = 16;
inline constexpr uint64_t kDataAlignment = 4096;   // data section start: a page, for mmap
inline constexpr uint64_t kTensorAlignment = 256;  // each weight / file inside the data section
inline constexpr uint64_t kMaxMetadata = 256ull << 20;

// Little-endian header at offset 0 (64 bytes).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_size;      // 64
  uint64_t metadata_offset;  // 64
  uint64_t metadata_size;
  uint64_t data_offset;  // multiple of kDataAlignment
  uint64_t data_size;
  uint64_t metadata_hash;  // XXH64 (seed 0) of the metadata bytes
  uint64_t header_hash;    // XXH64 (seed 0) of the 56 bytes above
};
static_assert(sizeof(Header) == kHeaderSize);

// At data_offset + data_size (16 bytes): magic, then XXH64 of every byte before the trailer.
struct Trailer {
  char magic[8];
  uint64_t file_hash;
};
static_assert(sizeof(Trailer) == kTrailerSize);

inline uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace vkllm::artifact
