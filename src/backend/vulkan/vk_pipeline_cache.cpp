#include "backend/vulkan/vk_pipeline_cache.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "backend/vulkan/vk_cache_dir.h"
#include "backend/vulkan/vk_shaders.h"
#include "core/mapped_file.h"

namespace vkllm::vk {
namespace {
namespace pcache {  // (named: the unity build compiles this file with others)

constexpr char kMagic[8] = {'v', 'k', 'l', 'l', 'm', '-', 'p', 'c'};
constexpr uint32_t kFormat = 1;
// Files past this size are ignored unread (drivers' caches of a few hundred pipelines take MiBs).
constexpr uint64_t kMaxFileBytes = 256ull << 20;
constexpr size_t kVkHeaderBytes = 32;  // sizeof(VkPipelineCacheHeaderVersionOne)

// A 64-bit hash of bytes, eight at a time (a multiply-xorshift mix per word): it tells a file's
// data from a damaged copy and one build's SPIR-V from another's; it is not cryptographic.
uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

uint64_t hash_bytes(std::span<const uint8_t> b, uint64_t h = 0xCBF29CE484222325ull) {
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = mix(h, w);
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < b.size(); ++k) tail |= uint64_t(b[i + k]) << (8 * k);
  return mix(mix(h, tail), b.size());
}

// Little-endian fields (the Vulkan cache header is written least significant byte first).
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t get_u64(const uint8_t* p) {
  return get_u32(p) | uint64_t(get_u32(p + 4)) << 32;
}
void put_u32(std::vector<uint8_t>& v, uint32_t x) {
  for (int k = 0; k < 4; ++k) v.push_back(static_cast<uint8_t>(x >> (8 * k)));
}
void put_u64(std::vector<uint8_t>& v, uint64_t x) {
  put_u32(v, static_cast<uint32_t>(x));
  put_u32(v, static_cast<uint32_t>(x >> 32));
}

// The whole file at `path` into `out`: "" when read, "absent" when there is none, else why not.
std::string read_file(const std::string& path, std::vector<uint8_t>& out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return errno == ENOENT ? "absent" : fmt::format("cannot open: {}", std::strerror(errno));
  struct stat st {};
  std::string why;
  if (::fstat(::fileno(f), &st) != 0)
    why = fmt::format("cannot stat: {}", std::strerror(errno));
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes)
    why = fmt::format("{} bytes, over the {} MiB limit", st.st_size, kMaxFileBytes >> 20);
  if (why.empty()) {
    out.resize(static_cast<size_t>(st.st_size));
    const size_t n = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), f);
    if (n != out.size()) why = "short read";
  }
  std::fclose(f);
  return why;
}

}  // namespace pcache
}  // namespace

uint64_t spirv_hash() {
  using namespace pcache;
  static const uint64_t h = [] {
    uint64_t x = mix(0, all_shaders().size());
    for (const ShaderBlob& b : all_shaders()) {
      x = hash_bytes({reinterpret_cast<const uint8_t*>(b.name), std::strlen(b.name) + 1}, x);
      x = hash_bytes({reinterpret_cast<const uint8_t*>(b.code), b.words * 4}, x);
    }
    return x;
  }();
  return h;
}

std::string pipeline_cache_name(const DeviceInfo& d) {
  std::string uuid;
  for (uint8_t b : d.cache_uuid) uuid += fmt::format("{:02x}", b);
  return fmt::format("{:04x}-{:04x}-{:08x}-{}-{:016x}.bin", d.vendor_id, d.device_id,
                     d.driver_version, uuid, spirv_hash());
}

std::vector<uint8_t> pack_pipeline_cache(const DeviceInfo& d, std::span<const uint8_t> data) {
  using namespace pcache;
  std::vector<uint8_t> v(kMagic, kMagic + sizeof kMagic);
  put_u32(v, kFormat);
  put_u32(v, d.driver_version);
  put_u64(v, spirv_hash());
  put_u64(v, data.size());
  put_u64(v, hash_bytes(data));
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

std::string check_pipeline_cache(std::span<const uint8_t> file, const DeviceInfo& d) {
  using namespace pcache;
  if (file.empty()) return "empty";
  if (file.size() < kPipelineCacheHeaderBytes)
    return fmt::format("{} bytes, shorter than its header", file.size());
  const uint8_t* h = file.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return "not a vkllm pipeline cache";
  if (get_u32(h + 8) != kFormat) return fmt::format("format {}, not {}", get_u32(h + 8), kFormat);
  if (get_u32(h + 12) != d.driver_version) return "written by another driver version";
  if (get_u64(h + 16) != spirv_hash()) return "written by another vkllm build";
  const std::span<const uint8_t> data = file.subspan(kPipelineCacheHeaderBytes);
  if (get_u64(h + 24) != data.size())
    return fmt::format("{} bytes of data where its header says {}", data.size(), get_u64(h + 24));
  if (get_u64(h + 32) != hash_bytes(data)) return "its data does not match its hash";
  // VkPipelineCacheHeaderVersionOne: headerSize, headerVersion, vendorID, deviceID, UUID.
  if (data.size() < kVkHeaderBytes) return "its data is shorter than a Vulkan cache header";
  const uint8_t* v = data.data();
  if (get_u32(v) < kVkHeaderBytes || get_u32(v) > data.size())
    return fmt::format("a Vulkan cache header of {} bytes", get_u32(v));
  if (get_u32(v + 4) != VK_PIPELINE_CACHE_HEADER_VERSION_ONE)
    return fmt::format("Vulkan cache header version {}", get_u32(v + 4));
  if (get_u32(v + 8) != d.vendor_id || get_u32(v + 12) != d.device_id)
    return fmt::format("another device's cache (vendor {:04x}, device {:04x})", get_u32(v + 8),
                       get_u32(v + 12));
  if (std::memcmp(v + 16, d.cache_uuid.data(), VK_UUID_SIZE) != 0)
    return "another pipelineCacheUUID";
  return "";
}

PipelineCache::PipelineCache(VkDevice dev, const DeviceInfo& d, const std::string& setting,
                             bool verbose)
    : dev_(dev), info_(d), verbose_(verbose) {
  using namespace pcache;
  if (setting == "0") return;  // off: pipelines are created without a cache
  const std::string dir = setting.empty() || setting == "1" ? cache_root() + "/pipelines" : setting;
  path_ = dir + "/" + pipeline_cache_name(d);
  std::vector<uint8_t> file;
  std::string why;
  try {
    why = read_file(path_, file);
    if (why.empty()) why = check_pipeline_cache(file, d);
  } catch (const std::exception& e) {  // (out of memory for the file's bytes)
    why = e.what();
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  if (why.empty()) {
    ci.initialDataSize = file.size() - kPipelineCacheHeaderBytes;
    ci.pInitialData = file.data() + kPipelineCacheHeaderBytes;
  }
  VkResult r = vkCreatePipelineCache(dev_, &ci, nullptr, &cache_);
  if (r != VK_SUCCESS && ci.initialDataSize) {  // the driver refused the data: start empty
    why = fmt::format("the driver refused it ({})", static_cast<int>(r));
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    r = vkCreatePipelineCache(dev_, &ci, nullptr, &cache_);
  }
  if (r != VK_SUCCESS) {
    cache_ = VK_NULL_HANDLE;
    note(fmt::format("vkllm: pipeline cache: vkCreatePipelineCache failed ({}): running without",
                     static_cast<int>(r)));
    path_.clear();
    return;
  }
  stats_.enabled = true;
  stats_.path = path_;
  if (why.empty()) {
    stats_.loaded_bytes = ci.initialDataSize;
    known_size_ = ci.initialDataSize;
    known_hash_ = hash_bytes({static_cast<const uint8_t*>(ci.pInitialData), ci.initialDataSize});
    note(fmt::format("vkllm: pipeline cache: loaded {} bytes from {}", known_size_, path_));
  } else if (why != "absent") {
    stats_.ignored = why;
    note(fmt::format("vkllm: pipeline cache: ignored {}: {}", path_, why));
  }
}

PipelineCache::~PipelineCache() {
  if (cache_) vkDestroyPipelineCache(dev_, cache_, nullptr);
}

void PipelineCache::note(const std::string& line) const {
  if (verbose_) std::fprintf(stderr, "%s\n", line.c_str());
}

void PipelineCache::save() noexcept {
  using namespace pcache;
  if (!cache_) return;
  std::lock_guard<std::mutex> lock(m_);
  try {
    size_t n = 0;
    if (vkGetPipelineCacheData(dev_, cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
    std::vector<uint8_t> data(n);
    // VK_INCOMPLETE: the cache grew between the calls (another thread's pipeline); the next
    // save writes it whole.
    if (vkGetPipelineCacheData(dev_, cache_, &n, data.data()) != VK_SUCCESS) return;
    data.resize(n);
    const uint64_t h = hash_bytes(data);
    if (n == known_size_ && h == known_hash_) return;  // unchanged since loaded or tried
    // These contents are dealt with whether the write below succeeds or not: a failed write is
    // not tried again until the cache changes.
    known_size_ = n;
    known_hash_ = h;
    const std::string dir = path_.substr(0, path_.rfind('/'));
    if (const std::string why = make_dirs(dir); !why.empty()) {
      note("vkllm: pipeline cache: not written: " + why);
      return;
    }
    const std::vector<uint8_t> bytes = pack_pipeline_cache(info_, data);
    AtomicFile f(path_);  // a temp file in the same folder, fsync, rename
    f.write(bytes.data(), bytes.size());
    f.commit();
    stats_.saved_bytes = n;
    ++stats_.saves;
    note(fmt::format("vkllm: pipeline cache: wrote {} bytes to {}", n, path_));
  } catch (const std::exception& e) {
    note(fmt::format("vkllm: pipeline cache: not written: {}", e.what()));
  } catch (...) {
    note("vkllm: pipeline cache: not written");
  }
}

void PipelineCache::count(double ms, bool hit) {
  std::lock_guard<std::mutex> lock(m_);
  ++stats_.pipelines;
  stats_.hits += hit ? 1 : 0;
  stats_.pipeline_ms += ms;
}

PipelineCacheStats PipelineCache::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  return stats_;
}

}  // namespace vkllm::vk
