// What the artifact targets do with the bytes of a candidate .vkllm file: read it as `verify` and
// `run` do (ArtifactReader, whole-file hash included), verify it against its recipe, and, when the
// program's buffers are small, run one forward on the CPU reference interpreter. The reader's
// claim under test: after its checks an interpreter indexes every buffer safely.
#pragma once
#include <cstddef>
#include <cstring>
#include <vector>

#include "artifact/format.h"
#include "artifact/reader.h"
#include "artifact/verify.h"
#include "artifact/xxh64.h"
#include "fuzz_util.h"
#include "runtime/executor.h"

namespace vkllm::fuzz {

// Bytes the interpreter would allocate for activations (one token) and KV caches.
inline uint64_t scratch_bytes(const Program& p) {
  uint64_t total = 0;
  for (const TensorDecl& t : p.tensors) {
    if (t.kind == TensorKind::KVCache) total += uint64_t(t.shape[0]) * uint64_t(t.shape[1]) * 4;
    if (t.kind == TensorKind::Activation)
      total += uint64_t(t.shape[0] < 0 ? 1 : t.shape[0]) * uint64_t(t.shape.back()) * 4;
  }
  return total;
}

inline void exercise_artifact(const uint8_t* data, size_t size, uint32_t token) {
  try {
    ArtifactReader r(MappedFile::view({data, size}, "fuzz.vkllm"));
    VKLLM_FUZZ_CHECK(r.data_offset() + r.data_size() <= size);
    verify_artifact(r, {});
    const Program& p = r.program();
    if (p.ops.size() > 4096 || scratch_bytes(p) > (64u << 20)) return;
    auto ex = make_cpu_executor(p, r);
    const int32_t id = static_cast<int32_t>(token % (static_cast<uint32_t>(r.desc().vocab) + 1));
    std::vector<float> logits(static_cast<size_t>(p.tensors[p.logits].shape.back()));
    ex->forward(&id, 1, 0, logits.data());
  } catch (const Error&) {
  }
}

// Recomputes the header hash, and the metadata and whole-file hashes where the header's fields
// make them checkable, so that mutations reach the checks behind the hashes.
inline void fix_hashes(std::vector<uint8_t>& b) {
  using namespace artifact;
  if (b.size() < kHeaderSize) return;
  Header h;
  std::memcpy(&h, b.data(), sizeof h);
  if (h.metadata_offset == kHeaderSize && h.metadata_size <= b.size() - kHeaderSize)
    h.metadata_hash = xxh64(b.data() + kHeaderSize, h.metadata_size);
  h.header_hash = xxh64(&h, offsetof(Header, header_hash));
  std::memcpy(b.data(), &h, sizeof h);
  uint64_t end;
  if (!add_overflows(h.data_offset, h.data_size, &end) && end <= b.size() &&
      b.size() - end == kTrailerSize) {
    const uint64_t fh = xxh64(b.data(), end);
    std::memcpy(b.data() + end + 8, &fh, 8);
  }
}

}  // namespace vkllm::fuzz
