// fuzz_artifact_meta: the artifact's metadata JSON (model description, recipe, embedded files,
// program), a NUL, then the data section. The harness lays out a well-formed file around them
// (header, 4096-aligned data section, trailer, every hash and the embedded files' hashes made
// right), so each mutation of the metadata reaches the model, program and recipe checks.
#include <nlohmann/json.hpp>

#include "artifact_exercise.h"

using namespace vkllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace artifact;
  const auto parts = fuzz::split_parts(data, size, 2);
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
  fuzz::fix_hashes(b);
  fuzz::exercise_artifact(b.data(), b.size(), static_cast<uint32_t>(size));
  return 0;
}
