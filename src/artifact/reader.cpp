#include "artifact/reader.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "artifact/format.h"
#include "artifact/program_check.h"
#include "artifact/xxh64.h"
#include "core/error.h"
#include "core/json_int.h"

namespace vkllm {

using namespace artifact;

ArtifactReader::ArtifactReader(const std::string& path, const ReadOptions& opt)
    : ArtifactReader(MappedFile(path), opt) {}

ArtifactReader::ArtifactReader(MappedFile file, const ReadOptions& opt) : file_(std::move(file)) {
  const std::string& path = file_.path();
  const uint64_t size = file_.size();
  if (size < kHeaderSize) fail("{}: not a vkllm artifact (only {} bytes)", path, size);
  Header h;
  std::memcpy(&h, file_.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0) fail("{}: not a vkllm artifact (bad magic)", path);
  if (h.version != kFormatVersion)
    fail("{}: artifact format version {} is not supported (this vkllm reads version {}); {}", path,
         h.version, kFormatVersion,
         h.version > kFormatVersion ? "it was written by a newer vkllm: upgrade vkllm"
                                    : "re-export the model");
  if (xxh64(&h, offsetof(Header, header_hash)) != h.header_hash)
    fail("{}: corrupt artifact: header hash mismatch", path);
  version_ = h.version;
  uint64_t meta_end, data_end, total;
  if (h.header_size != kHeaderSize || h.metadata_offset != kHeaderSize ||
      h.metadata_size > kMaxMetadata ||
      add_overflows(h.metadata_offset, h.metadata_size, &meta_end) ||
      h.data_offset % kDataAlignment != 0 || h.data_offset < meta_end ||
      add_overflows(h.data_offset, h.data_size, &data_end) ||
      add_overflows(data_end, kTrailerSize, &total))
    fail("{}: corrupt artifact: inconsistent header", path);
  if (size != total)
    fail("{}: {} artifact: the header promises {} bytes, the file has {}", path,
         size < total ? "truncated" : "corrupt", total, size);
  data_offset_ = h.data_offset;
  data_size_ = h.data_size;
  Trailer tr;
  std::memcpy(&tr, file_.data() + data_end, sizeof tr);
  if (std::memcmp(tr.magic, kTrailerMagic, 8) != 0) fail("{}: corrupt artifact: bad trailer", path);

  const char* mp = reinterpret_cast<const char*>(file_.data() + h.metadata_offset);
  if (xxh64(mp, h.metadata_size) != h.metadata_hash)
    fail("{}: corrupt artifact: metadata hash mismatch", path);
  try {
    meta_ = nlohmann::json::parse(mp, mp + h.metadata_size);
    if (meta_.at("format").get<std::string>() != "vkllm-artifact" ||
        json_int<uint32_t>(meta_.at("format_version"), "metadata format_version") != kFormatVersion)
      fail("{}: metadata does not describe a version {} vkllm artifact", path, kFormatVersion);
    if (!meta_.at("recipe").is_object() || !meta_.at("recipe").at("name").is_string())
      fail("{}: metadata has no recipe name", path);
    for (auto& jf : meta_.at("files")) {
      File f{jf.at("name").get<std::string>(),
             json_int<uint64_t>(jf.at("offset"), "embedded file offset"),
             json_int<uint64_t>(jf.at("nbytes"), "embedded file nbytes")};
      uint64_t end;
      if (add_overflows(f.offset, f.nbytes, &end) || end > data_size_)
        fail("{}: embedded file {} lies outside the data section", path, f.name);
      const uint64_t hh = xxh64(file_.data() + data_offset_ + f.offset, f.nbytes);
      if (jf.at("xxh64").get<std::string>() != fmt::format("{:016x}", hh))
        fail("{}: corrupt artifact: embedded file {} hash mismatch", path, f.name);
      files_.push_back(std::move(f));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad artifact metadata: {}", path, e.what());
  }
  try {
    desc_ = ModelDesc::from_json(meta_.at("model"));
    program_ = Program::from_json(meta_.at("program"));
    check_program_semantics(program_);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad artifact metadata: {}", path, e.what());
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  // Every weight inside the data section, aligned, no two overlapping.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const TensorDecl& t : program_.tensors) {
    if (t.kind != TensorKind::Weight) continue;
    uint64_t end;
    if (add_overflows(t.offset, t.nbytes, &end) || end > data_size_)
      fail("{}: weight {} (offset {}, {} bytes) lies outside the data section ({} bytes)", path,
           t.name, t.offset, t.nbytes, data_size_);
    if (t.offset % kTensorAlignment != 0) fail("{}: weight {} is not aligned", path, t.name);
    ranges.emplace_back(t.offset, end);
  }
  for (const File& f : files_) ranges.emplace_back(f.offset, f.offset + f.nbytes);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      fail("{}: corrupt artifact: overlapping data ranges", path);
  if (program_.tensors[program_.logits].shape[1] != desc_.vocab)
    fail("{}: the program's logits width does not match the model's vocab {}", path, desc_.vocab);
  if (opt.check_data_hash) check_data_hash();
}

void ArtifactReader::check_data_hash() const {
  Trailer tr;
  const uint64_t end = data_offset_ + data_size_;
  std::memcpy(&tr, file_.data() + end, sizeof tr);
  // Hash in 64 MiB pieces and drop each piece's pages from this process afterwards (they stay in
  // the page cache), so checking a multi-GB file does not inflate the resident set.
  Xxh64 h;
  const uint64_t piece = 64ull << 20;  // a multiple of the page size
  for (uint64_t off = 0; off < end; off += piece) {
    const uint64_t n = std::min(piece, end - off);
    h.update(file_.data() + off, static_cast<size_t>(n));
    if (n == piece && file_.is_mapping())
      ::madvise(const_cast<uint8_t*>(file_.data() + off), static_cast<size_t>(n), MADV_DONTNEED);
  }
  if (h.digest() != tr.file_hash)
    fail("{}: corrupt artifact: file hash mismatch (the weights are damaged)", file_.path());
  data_hash_checked_ = true;
}

std::string ArtifactReader::recipe_name() const {
  return meta_.at("recipe").at("name").get<std::string>();
}

std::vector<std::string> ArtifactReader::file_names() const {
  std::vector<std::string> n;
  for (auto& f : files_) n.push_back(f.name);
  return n;
}

bool ArtifactReader::has_file(const std::string& name) const {
  return std::any_of(files_.begin(), files_.end(), [&](const File& f) { return f.name == name; });
}

std::string_view ArtifactReader::file(const std::string& name) const {
  for (auto& f : files_)
    if (f.name == name)
      return {reinterpret_cast<const char*>(file_.data() + data_offset_ + f.offset),
              static_cast<size_t>(f.nbytes)};
  fail("{}: the artifact embeds no {}", file_.path(), name);
}

std::span<const uint8_t> ArtifactReader::weight(const Program& p, int32_t tensor) const {
  if (tensor < 0 || static_cast<size_t>(tensor) >= p.tensors.size() ||
      p.tensors[tensor].kind != TensorKind::Weight)
    fail("{}: tensor {} is not a weight", file_.path(), tensor);
  const TensorDecl& t = p.tensors[tensor];
  uint64_t end;
  if (add_overflows(t.offset, t.nbytes, &end) || end > data_size_)
    fail("{}: weight {} lies outside the data section", file_.path(), t.name);
  return {file_.data() + data_offset_ + t.offset, static_cast<size_t>(t.nbytes)};
}

}  // namespace vkllm
