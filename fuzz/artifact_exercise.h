// What the artifact targets do with the bytes of a candidate .vkllm file: read it as `verify` and
// `run` do (ArtifactReader, whole-file hash included), verify it against its recipe, and, when the
// program's buffers are small, run one forward on the CPU reference interpreter. The claims under
// test: after the reader's checks an interpreter indexes every buffer safely, and when `verify`
// says the artifact loads, Model::open on the CPU backend opens it (docs/robustness.md).
// tests/artifact/test_load_check.cpp runs the same functions over the corpora and a generated
// set of damaged artifacts.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "artifact/format.h"
#include "artifact/reader.h"
#include "artifact/verify.h"
#include "artifact/xxh64.h"
#include "backend/executor.h"
#include "fuzz_util.h"
#include "vkllm/vkllm.h"

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

// Model::open on the CPU backend of these bytes (through a memfd: the public API takes a path).
// Returns "" when it opens, else its Error's message.
inline std::string model_open_error(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.vkllm", MFD_CLOEXEC);
  VKLLM_FUZZ_CHECK(fd >= 0);
  for (size_t done = 0; done < size;) {
    const ssize_t w = ::write(fd, data + done, size - done);
    VKLLM_FUZZ_CHECK(w > 0);
    done += static_cast<size_t>(w);
  }
  std::string err;
  try {
    ModelOptions o;
    o.backend = "cpu";
    Model::open("/proc/self/fd/" + std::to_string(fd), o);
  } catch (const Error& e) {
    err = e.what();
  }
  ::close(fd);
  return err;
}

// Runs verify; returns whether it found that the artifact loads (its reader and the load check of
// artifact/load.h passed: a `verify` OK implies it), or false when the reader refused it.
inline bool exercise_artifact(const uint8_t* data, size_t size, uint32_t token) {
  bool loads = false;
  try {
    ArtifactReader r(MappedFile::view({data, size}, "fuzz.vkllm"));
    VKLLM_FUZZ_CHECK(r.data_offset() + r.data_size() <= size);
    const VerifyReport rep = verify_artifact(r, {});
    loads = rep.summary.at("loads").get<bool>();
    VKLLM_FUZZ_CHECK(loads || !rep.ok);
    const Program& p = r.program();
    if (p.ops.size() > 4096 || scratch_bytes(p) > (64u << 20)) return loads;
    auto ex = make_cpu_executor(p, r);
    const int32_t id = static_cast<int32_t>(token % (static_cast<uint32_t>(r.desc().vocab) + 1));
    std::vector<float> logits(static_cast<size_t>(p.tensors[p.logits].shape.back()));
    ex->forward(&id, 1, 0, logits.data());
  } catch (const Error&) {
  }
  return loads;
}

// The property of issue 19: what verify passes, Model::open opens.
inline void exercise_artifact_and_open(const uint8_t* data, size_t size, uint32_t token) {
  if (!exercise_artifact(data, size, token)) return;
  const std::string err = model_open_error(data, size);
  if (!err.empty()) std::fprintf(stderr, "verify: loads; Model::open: %s\n", err.c_str());
  VKLLM_FUZZ_CHECK(err.empty());
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

// The file an artifact_meta input describes: its metadata JSON, a NUL, then the data section.
// Lays out a well-formed file around them (header, 4096-aligned data section, trailer, every hash
// and the embedded files' hashes made right), so that each mutation of the metadata reaches the
// model, program and recipe checks.
inline std::vector<uint8_t> layout_meta_input(const uint8_t* data, size_t size) {
  using namespace artifact;
  const auto parts = split_parts(data, size, 2);
  std::string meta = parts[0];
  const std::string& body = parts[1];
  nlohmann::json j = nlohmann::json::parse(meta, nullptr, false);
  if (j.is_object() && j.contains("files") && j["files"].is_array()) {
    for (auto& f : j["files"]) {
      if (!f.is_object() || !f.contains("offset") || !f["offset"].is_number_unsigned() ||
          !f.contains("nbytes") || !f["nbytes"].is_number_unsigned())
        continue;
      const uint64_t off = f["offset"], n = f["nbytes"];
      if (off <= body.size() && n <= body.size() - off)
        f["xxh64"] = fmt::format("{:016x}", xxh64(body.data() + off, n));
    }
    meta = j.dump();
  }
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFormatVersion;
  h.header_size = kHeaderSize;
  h.metadata_offset = kHeaderSize;
  h.metadata_size = meta.size();
  h.data_offset = align_up(kHeaderSize + meta.size(), kDataAlignment);
  h.data_size = body.size();
  std::vector<uint8_t> b(h.data_offset + h.data_size + kTrailerSize, 0);
  std::memcpy(b.data(), &h, sizeof h);
  std::memcpy(b.data() + kHeaderSize, meta.data(), meta.size());
  std::memcpy(b.data() + h.data_offset, body.data(), body.size());
  std::memcpy(b.data() + h.data_offset + h.data_size, kTrailerMagic, 8);
  fix_hashes(b);
  return b;
}

}  // namespace vkllm::fuzz
