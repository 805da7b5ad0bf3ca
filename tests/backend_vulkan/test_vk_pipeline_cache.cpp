// The pipeline cache on disk (vk_pipeline_cache.h): a run writes its file, the next Context on the
// device loads it; a file that is empty, truncated, corrupt or another device's is ignored and the
// model still runs right (and the file is rewritten whole); VKLLM_PIPELINE_CACHE=0 writes
// nothing. Every test points the cache at a fresh folder under /tmp, never the user's.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/vk_pipeline_cache.h"
#include "backend/vulkan/vulkan_executor.h"
#include "runtime/agreement.h"
#include "selftest/toy_model.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

namespace fs = std::filesystem;

// A fresh folder under /tmp, removed with its contents at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/vkllm-pcache-XXXXXX";
    if (!::mkdtemp(t)) ADD_FAILURE() << "mkdtemp failed";
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// XDG_CACHE_HOME set for one test, its old value back after.
struct ScopedCacheHome {
  std::string old;
  bool had = false;
  explicit ScopedCacheHome(const std::string& dir) {
    if (const char* v = std::getenv("XDG_CACHE_HOME")) {
      old = v;
      had = true;
    }
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  }
  ~ScopedCacheHome() {
    if (had)
      ::setenv("XDG_CACHE_HOME", old.c_str(), 1);
    else
      ::unsetenv("XDG_CACHE_HOME");
  }
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Every file in `dir` and below.
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    if (it->is_regular_file()) out.push_back(it->path().string());
  return out;
}

// Loads the fp32 toy on Vulkan with `opt` and runs a prefill of 5 tokens and two decode steps
// against the CPU reference (the same greedy tokens, logits within the recipe's bound); returns
// the load's stages as the executor left them (its pipelines made, the cache saved). The program
// and the Context are gone when it returns (the Context wrote the cache again if it changed), and
// the validation layer reported nothing.
VulkanLoadStages run_toy(const VulkanOptions& opt) {
  const toy::Toy toy = toy::build_toy({}, 11);
  const double bound = agreement_bounds(toy::toy_recipe({})).max_nmse;
  const uint64_t msgs = vk::validation_message_count();
  auto loaded = load_vulkan_program(toy.p, toy.w, opt);
  auto gpu = loaded->make_executor();
  auto cpu = make_cpu_executor(toy.p, toy.w);
  std::vector<float> lg(toy::kVocab), lc(toy::kVocab);
  std::vector<int32_t> ids = {3, 14, 15, 92, 65};
  int pos = 0;
  for (int step = 0; step < 3; ++step) {
    const int T = static_cast<int>(ids.size());
    const int32_t g = gpu->forward(ids.data(), T, pos, lg.data());
    const int32_t c = cpu->forward(ids.data(), T, pos, lc.data());
    EXPECT_EQ(g, c) << "step " << step;
    EXPECT_LE(nmse(lg, lc), bound) << "step " << step;
    pos += T;
    ids = {c};
  }
  const VulkanLoadStages stages = vulkan_load_stages(*loaded);
  gpu.reset();
  loaded.reset();
  EXPECT_EQ(vk::validation_message_count(), msgs) << "Vulkan validation reported messages";
  return stages;
}

VulkanOptions cache_in(const std::string& setting) {
  VulkanOptions o = validated();
  o.tuning.pipeline_cache = setting;
  return o;
}

// A made-up device and Vulkan cache data for the file format's checks.
vk::DeviceInfo fake_device() {
  vk::DeviceInfo d;
  d.vendor_id = 0x10de;
  d.device_id = 0x2330;
  d.driver_version = 0x22334455;
  for (size_t i = 0; i < d.cache_uuid.size(); ++i) d.cache_uuid[i] = static_cast<uint8_t>(i * 7);
  return d;
}

std::vector<uint8_t> vulkan_data(const vk::DeviceInfo& d, size_t payload) {
  std::vector<uint8_t> v(32 + payload);
  auto put = [&](size_t at, uint32_t x) {
    for (int k = 0; k < 4; ++k) v[at + k] = static_cast<uint8_t>(x >> (8 * k));
  };
  put(0, 32);
  put(4, VK_PIPELINE_CACHE_HEADER_VERSION_ONE);
  put(8, d.vendor_id);
  put(12, d.device_id);
  std::copy(d.cache_uuid.begin(), d.cache_uuid.end(), v.begin() + 16);
  for (size_t i = 0; i < payload; ++i) v[32 + i] = static_cast<uint8_t>(i * 31 + 5);
  return v;
}

// The file's checks alone: a packed file passes; every truncation, every flipped byte, another
// device, UUID, driver version or header version fails with a reason. (No device needed.)
TEST(VulkanPipelineCache, FileChecksRejectEveryDamage) {
  const vk::DeviceInfo d = fake_device();
  const std::vector<uint8_t> data = vulkan_data(d, 61);
  const std::vector<uint8_t> file = vk::pack_pipeline_cache(d, data);
  ASSERT_EQ(file.size(), vk::kPipelineCacheHeaderBytes + data.size());
  EXPECT_EQ(vk::check_pipeline_cache(file, d), "");
  for (size_t n = 0; n < file.size(); ++n)
    EXPECT_NE(vk::check_pipeline_cache(std::span(file).first(n), d), "") << "truncated to " << n;
  for (size_t i = 0; i < file.size(); ++i) {
    std::vector<uint8_t> bad = file;
    bad[i] ^= 0x40;
    EXPECT_NE(vk::check_pipeline_cache(bad, d), "") << "byte " << i << " flipped";
  }
  std::vector<uint8_t> longer = file;
  longer.push_back(0);
  EXPECT_NE(vk::check_pipeline_cache(longer, d), "");

  vk::DeviceInfo other = d;
  other.device_id += 1;
  EXPECT_NE(vk::check_pipeline_cache(vk::pack_pipeline_cache(d, vulkan_data(other, 8)), d)
                .find("another device"),
            std::string::npos);
  other = d;
  other.cache_uuid[5] ^= 1;
  EXPECT_EQ(vk::check_pipeline_cache(vk::pack_pipeline_cache(d, vulkan_data(other, 8)), d),
            "another pipelineCacheUUID");
  other = d;
  other.driver_version += 1;
  EXPECT_EQ(vk::check_pipeline_cache(vk::pack_pipeline_cache(other, data), d),
            "written by another driver version");
  std::vector<uint8_t> v2 = data;
  v2[4] = 2;  // a header version other than VK_PIPELINE_CACHE_HEADER_VERSION_ONE
  EXPECT_NE(vk::check_pipeline_cache(vk::pack_pipeline_cache(d, v2), d), "");
  std::vector<uint8_t> big = data;
  big[1] = 1;  // a Vulkan header size larger than the data
  EXPECT_NE(vk::check_pipeline_cache(vk::pack_pipeline_cache(d, big), d), "");
  // The name carries the device, the driver and this build's SPIR-V.
  const std::string name = vk::pipeline_cache_name(d);
  EXPECT_EQ(name.rfind("10de-2330-22334455-", 0), 0u) << name;
  EXPECT_NE(name.find(fmt::format("{:016x}", vk::spirv_hash())), std::string::npos) << name;
}

// A run writes the cache under $XDG_CACHE_HOME/vkllm/pipelines (no temp file left beside it); the
// next Context loads all of it, and with nothing new does not write it again. (The driver and the
// validation layer keep caches of their own under $XDG_CACHE_HOME: only vkllm/ is looked at.)
TEST(VulkanPipelineCache, ARunWritesItAndTheNextLoadsIt) {
  TempDir tmp;
  ScopedCacheHome home(tmp.path);
  const VulkanLoadStages first = run_toy(cache_in("1"));
  EXPECT_TRUE(first.pipelines.enabled);
  EXPECT_EQ(first.pipelines.loaded_bytes, 0u);
  EXPECT_EQ(first.pipelines.ignored, "");
  EXPECT_GT(first.pipelines.pipelines, 0u);
  EXPECT_GE(first.pipelines.saves, 1u);
  EXPECT_GT(first.pipelines.saved_bytes, 0u);
  const std::string path = first.pipelines.path;
  EXPECT_EQ(path.rfind(tmp.path + "/vkllm/pipelines/", 0), 0u) << path;
  EXPECT_EQ(files_under(tmp.path + "/vkllm"), std::vector<std::string>{path});
  const std::vector<uint8_t> file = read_bytes(path);
  ASSERT_GT(file.size(), vk::kPipelineCacheHeaderBytes);

  const VulkanLoadStages second = run_toy(cache_in("1"));
  EXPECT_EQ(second.pipelines.path, path);
  EXPECT_EQ(second.pipelines.ignored, "");
  EXPECT_EQ(second.pipelines.loaded_bytes, file.size() - vk::kPipelineCacheHeaderBytes);
  EXPECT_EQ(second.pipelines.saves, 0u) << "the same pipelines: nothing new to write";
  std::printf(
      "pipeline cache: %zu bytes; first run %u pipelines in %.0f ms, second %u in %.0f ms "
      "(%u found in the cache)\n",
      file.size(), first.pipelines.pipelines, first.pipelines.pipeline_ms,
      second.pipelines.pipelines, second.pipelines.pipeline_ms, second.pipelines.hits);
  EXPECT_EQ(files_under(tmp.path + "/vkllm"), std::vector<std::string>{path});
}

// An empty file, random bytes, a truncated file and another device's header (with a valid vkllm
// header around it): each is ignored with a reason, the model still runs right, and the run writes
// a good file in its place.
TEST(VulkanPipelineCache, ABadFileIsIgnoredAndReplaced) {
  TempDir tmp;
  const VulkanLoadStages good = run_toy(cache_in(tmp.path));
  const std::string path = good.pipelines.path;
  const std::vector<uint8_t> file = read_bytes(path);
  ASSERT_GT(file.size(), vk::kPipelineCacheHeaderBytes) << path;
  const vk::DeviceInfo info = vk::Context(cache_in("0")).info();
  ASSERT_EQ(vk::check_pipeline_cache(file, info), "");

  std::mt19937 rng(5);
  std::vector<uint8_t> noise(4096);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> foreign(file.begin() + vk::kPipelineCacheHeaderBytes, file.end());
  foreign[8] ^= 0x01;  // the Vulkan header's vendorID
  struct Bad {
    const char* what;
    std::vector<uint8_t> bytes;
  };
  const std::vector<Bad> bad = {
      {"empty", {}},
      {"random bytes", noise},
      {"truncated", std::vector<uint8_t>(file.begin(), file.end() - 1)},  // a write cut short
      {"another device's header", vk::pack_pipeline_cache(info, foreign)},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    write_bytes(path, b.bytes);
    const VulkanLoadStages s = run_toy(cache_in(tmp.path));
    EXPECT_EQ(s.pipelines.path, path);
    EXPECT_EQ(s.pipelines.loaded_bytes, 0u);
    EXPECT_NE(s.pipelines.ignored, "");
    std::printf("%s: ignored (%s)\n", b.what, s.pipelines.ignored.c_str());
    EXPECT_GE(s.pipelines.saves, 1u);
    EXPECT_EQ(vk::check_pipeline_cache(read_bytes(path), info), "") << "rewritten whole";
  }
  // A folder where the file should be: ignored, not written, the run unharmed.
  fs::remove(path);
  fs::create_directory(path);
  const VulkanLoadStages s = run_toy(cache_in(tmp.path));
  EXPECT_NE(s.pipelines.ignored, "");
  EXPECT_EQ(s.pipelines.saves, 0u);
}

// VKLLM_PIPELINE_CACHE=0: no cache, and no file under the default folder.
TEST(VulkanPipelineCache, OffWritesNothing) {
  TempDir tmp;
  ScopedCacheHome home(tmp.path);
  const VulkanLoadStages s = run_toy(cache_in("0"));
  EXPECT_FALSE(s.pipelines.enabled);
  EXPECT_EQ(s.pipelines.path, "");
  EXPECT_EQ(s.pipelines.saves, 0u);
  EXPECT_GT(s.pipelines.pipelines, 0u);  // still counted
  EXPECT_TRUE(files_under(tmp.path + "/vkllm").empty());
}

}  // namespace
}  // namespace vkllm::test
