#include "artifact/writer.h"

#include <cstring>

#include "artifact/format.h"
#include "artifact/load.h"
#include "artifact/program_check.h"
#include "core/error.h"

namespace vkllm {

using namespace artifact;

namespace {

struct Layout {
  std::string meta;
  std::vector<uint64_t> file_off;
  uint64_t data_offset = 0, data_size = 0, file_size = 0;
};

// Assigns every weight's offset (in `order`) and builds the metadata text.
Layout make_layout(ArtifactContent& c, const std::vector<int32_t>& order, const std::string& path) {
  Program& p = c.program;
  std::vector<int> seen(p.tensors.size(), 0);
  for (int32_t i : order) {
    if (i < 0 || static_cast<size_t>(i) >= p.tensors.size() ||
        p.tensors[i].kind != TensorKind::Weight || seen[i]++)
      fail("{}: bad weight write order (tensor {})", path, i);
  }
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].kind == TensorKind::Weight && !seen[i])
      fail("{}: weight {} is never written", path, p.tensors[i].name);

  // The data section: embedded files first, then the weights.
  Layout L;
  uint64_t off = 0;
  nlohmann::json files = nlohmann::json::array();
  for (auto& f : c.files) {
    off = align_up(off, kTensorAlignment);
    L.file_off.push_back(off);
    files.push_back({{"name", f.name},
                     {"offset", off},
                     {"nbytes", f.text.size()},
                     {"xxh64", fmt::format("{:016x}", xxh64(f.text.data(), f.text.size()))}});
    off += f.text.size();
  }
  for (int32_t i : order) {
    off = align_up(off, kTensorAlignment);
    p.tensors[i].offset = off;
    off += p.tensors[i].nbytes;
  }
  L.data_size = off;
  check_program_semantics(p);
  nlohmann::json meta = {{"format", "vkllm-artifact"},
                         {"format_version", kFormatVersion},
                         {"producer", c.producer},
                         {"model", c.desc.to_json()},
                         {"recipe", c.recipe},
                         {"tensor_alignment", kTensorAlignment},
                         {"files", files},
                         {"program", p.to_json()}};
  L.meta = meta.dump();
  L.data_offset = align_up(kHeaderSize + L.meta.size(), kDataAlignment);
  L.file_size = L.data_offset + L.data_size + kTrailerSize;
  return L;
}

}  // namespace

uint64_t planned_artifact_size(ArtifactContent content, const std::vector<int32_t>& order) {
  return make_layout(content, order, "(plan)").file_size;
}

ArtifactWriter::ArtifactWriter(const std::string& path, ArtifactContent content,
                               const std::vector<int32_t>& order, LoadCheck check)
    : c_(std::move(content)), order_(order), out_(path), out_path_(path), check_(check) {
  Layout L = make_layout(c_, order_, path);
  if (check_ == LoadCheck::Loads) {
    std::vector<std::pair<std::string, std::string_view>> files;
    for (const EmbeddedFile& f : c_.files) files.emplace_back(f.name, f.text);
    load_artifact_parts(path, c_.desc, files);
  }
  const std::string& text = L.meta;
  data_offset_ = L.data_offset;
  data_size_ = L.data_size;
  file_size_ = L.file_size;
  const auto& file_off = L.file_off;

  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kFormatVersion;
  h.header_size = kHeaderSize;
  h.metadata_offset = kHeaderSize;
  h.metadata_size = text.size();
  h.data_offset = data_offset_;
  h.data_size = data_size_;
  h.metadata_hash = xxh64(text.data(), text.size());
  h.header_hash = xxh64(&h, offsetof(Header, header_hash));
  put(&h, sizeof h);
  put(text.data(), text.size());
  for (size_t i = 0; i < c_.files.size(); ++i) {
    pad_to(data_offset_ + file_off[i]);
    put(c_.files[i].text.data(), c_.files[i].text.size());
  }
}

void ArtifactWriter::put(const void* data, size_t n) {
  hash_.update(data, n);
  out_.write(data, n);
}

void ArtifactWriter::pad_to(uint64_t file_offset) {
  static const char zeros[4096] = {};
  while (out_.offset() < file_offset) {
    const size_t k =
        static_cast<size_t>(std::min<uint64_t>(file_offset - out_.offset(), sizeof zeros));
    put(zeros, k);
  }
}

void ArtifactWriter::append(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (cur_ >= order_.size()) fail("artifact writer: more weight bytes than the program declares");
    const TensorDecl& t = c_.program.tensors[order_[cur_]];
    if (cur_written_ == 0) pad_to(data_offset_ + t.offset);
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, t.nbytes - cur_written_));
    put(p, take);
    p += take;
    n -= take;
    cur_written_ += take;
    if (cur_written_ == t.nbytes) {
      ++cur_;
      cur_written_ = 0;
    }
  }
}

void ArtifactWriter::finish() {
  if (cur_ != order_.size())
    fail("artifact writer: weight {} was not written completely",
         c_.program.tensors[order_[std::min(cur_, order_.size() - 1)]].name);
  pad_to(data_offset_ + data_size_);
  Trailer t{};
  std::memcpy(t.magic, kTrailerMagic, 8);
  t.file_hash = hash_.digest();
  out_.write(&t, sizeof t);
  if (out_.offset() != file_size_)
    fail("artifact writer: wrote {} bytes, planned {}", out_.offset(), file_size_);
  if (check_ == LoadCheck::Loads) {
    // The bytes on disk, named as the output, with the options Model::open reads them with.
    const MappedFile written = out_.map_written();
    ReadOptions ro;
    ro.check_data_hash = false;
    load_artifact(ArtifactReader(MappedFile::view(written.bytes(), out_path_), ro));
  }
  out_.commit();
}

void write_artifact(const std::string& path, ArtifactContent content,
                    const std::vector<std::vector<uint8_t>>& weights, LoadCheck check) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < content.program.tensors.size(); ++i)
    if (content.program.tensors[i].kind == TensorKind::Weight)
      order.push_back(static_cast<int32_t>(i));
  ArtifactWriter w(path, std::move(content), order, check);
  for (int32_t i : order) {
    const auto& b = weights.at(static_cast<size_t>(i));
    if (b.size() != w.program().tensors[i].nbytes)
      fail("{}: weight {} has {} bytes, expected {}", path, w.program().tensors[i].name, b.size(),
           w.program().tensors[i].nbytes);
    w.append(b.data(), b.size());
  }
  w.finish();
}

}  // namespace vkllm
