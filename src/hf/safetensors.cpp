#include "hf/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace vkllm {

using nlohmann::json;

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::F32:
      return "F32";
    case StDType::F16:
      return "F16";
    case StDType::BF16:
      return "BF16";
  }
  return "?";
}

size_t st_dtype_size(StDType t) {
  return t == StDType::F32 ? 4 : 2;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void TensorView::read_f32(int64_t begin, int64_t n, float* out) const {
  if (begin < 0 || n < 0 || begin + n > numel())
    fail("{}: tensor {}: read out of range", file, name);
  const uint8_t* p = data + begin * static_cast<int64_t>(st_dtype_size(dtype));
  switch (dtype) {
    case StDType::F32:
      std::memcpy(out, p, static_cast<size_t>(n) * 4);
      break;
    case StDType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
  }
  // A NaN or Inf weight is a damaged checkpoint: refuse it here, where every consumer (export,
  // the reference engine) reads weights, rather than quantize it into a silently wrong model.
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]))
      fail("{}: tensor {} holds {} at element {}: the checkpoint is damaged", file, name,
           std::isnan(out[i]) ? "NaN" : "Inf", begin + i);
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  read_f32(0, numel(), out.data());
  return out;
}

static StDType parse_dtype(const std::string& file, const std::string& name, const std::string& s) {
  if (s == "F32") return StDType::F32;
  if (s == "F16") return StDType::F16;
  if (s == "BF16") return StDType::BF16;
  static const char* known[] = {"F64",  "I64",     "I32",     "I16", "I8",  "U8",
                                "BOOL", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64"};
  for (const char* k : known)
    if (s == k)
      fail("{}: tensor {}: dtype {} is not supported (only F32, F16, BF16)", file, name, s);
  fail("{}: tensor {}: unknown dtype '{}'", file, name, s);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : SafetensorsFile(MappedFile(path)) {}

SafetensorsFile::SafetensorsFile(MappedFile file) : file_(std::move(file)) {
  const std::string& path = file_.path();
  const uint64_t size = file_.size();
  if (size < 8) fail("{}: truncated safetensors file ({} bytes, no header length)", path, size);
  uint64_t hlen = 0;
  std::memcpy(&hlen, file_.data(), 8);  // little-endian hosts only (x86-64, arm64)
  if (hlen > 100u * 1024 * 1024)
    fail("{}: safetensors header length {} is absurd (max 100 MiB)", path, hlen);
  if (hlen > size - 8)
    fail("{}: truncated safetensors file: header says {} bytes, file has {}", path, hlen, size - 8);
  const char* hp = reinterpret_cast<const char*>(file_.data() + 8);
  json h;
  try {
    h = json::parse(hp, hp + hlen);
  } catch (const json::exception& e) {
    fail("{}: safetensors header is not valid JSON: {}", path, e.what());
  }
  if (!h.is_object()) fail("{}: safetensors header is not a JSON object", path);
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = size - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> range_names;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object", path);
      for (auto& [k, mv] : v.items()) {
        if (!mv.is_string()) fail("{}: __metadata__ value for '{}' is not a string", path, k);
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor {}: entry is not an object", path, name);
    if (!v.contains("dtype") || !v["dtype"].is_string())
      fail("{}: tensor {}: missing dtype", path, name);
    if (!v.contains("shape") || !v["shape"].is_array())
      fail("{}: tensor {}: missing shape", path, name);
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      fail("{}: tensor {}: data_offsets must be [begin, end]", path, name);
    TensorView t;
    t.name = name;
    t.file = path;
    t.dtype = parse_dtype(path, name, v["dtype"].get<std::string>());
    uint64_t count = 1;
    if (v["shape"].size() > 8)
      fail("{}: tensor {}: too many dimensions ({})", path, name, v["shape"].size());
    for (auto& d : v["shape"]) {
      if (!d.is_number_unsigned())
        fail("{}: tensor {}: shape entries must be non-negative integers", path, name);
      uint64_t dv = d.get<uint64_t>();
      if (dv > (1ull << 40) || mul_overflows(count, dv, &count))
        fail("{}: tensor {}: shape overflows", path, name);
      t.shape.push_back(static_cast<int64_t>(dv));
    }
    uint64_t nbytes;
    if (mul_overflows(count, st_dtype_size(t.dtype), &nbytes))
      fail("{}: tensor {}: size overflows", path, name);
    auto& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor {}: data_offsets must be non-negative integers", path, name);
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) fail("{}: tensor {}: data_offsets begin {} > end {}", path, name, b, e);
    if (e > data_size)
      fail("{}: tensor {}: data ends at {} beyond the data section ({} bytes): file truncated?",
           path, name, e, data_size);
    if (e - b != nbytes)
      fail("{}: tensor {}: data_offsets span {} bytes but dtype {} x shape needs {}", path, name,
           e - b, st_dtype_name(t.dtype), nbytes);
    t.data = file_.data() + data_start + b;
    t.nbytes = nbytes;
    ranges.emplace_back(b, e);
    range_names.push_back(name);
    tensors_.emplace(name, std::move(t));
  }
  std::vector<size_t> idx(ranges.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t i = 1; i < idx.size(); ++i) {
    auto& prev = ranges[idx[i - 1]];
    auto& cur = ranges[idx[i]];
    if (cur.first < prev.second && cur.first != cur.second && prev.first != prev.second)
      fail("{}: tensors {} and {} overlap in the data section", path, range_names[idx[i - 1]],
           range_names[idx[i]]);
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (auto& t : tensors) {
    h[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8 != 0) hs.push_back(' ');  // align data start like the Python writer
  AtomicFile f(path);
  uint64_t n = hs.size();
  f.write(&n, 8);
  f.write(hs.data(), hs.size());
  for (auto& t : tensors) f.write(t.bytes.data(), t.bytes.size());
  f.commit();
}

}  // namespace vkllm
