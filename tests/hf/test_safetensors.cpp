#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/half.h"
#include "hf/safetensors.h"

using namespace vkllm;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  auto d = fs::temp_directory_path() / ("vkllm_st_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

std::string expect_error(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, RoundTripsEachDtype) {
  std::vector<TensorToWrite> ts;
  std::vector<float> vals = {1.0f, -2.5f, 3.140625f, 0.0f, -0.0009765625f, 65504.0f};
  TensorToWrite a{"a", StDType::F32, {2, 3}, {}};
  a.bytes.resize(24);
  std::memcpy(a.bytes.data(), vals.data(), 24);
  TensorToWrite b{"b", StDType::F16, {6}, std::vector<uint8_t>(12)};
  TensorToWrite c{"c", StDType::BF16, {3, 2}, std::vector<uint8_t>(12)};
  for (int i = 0; i < 6; ++i) {
    uint16_t h = f32_to_f16(vals[i]), g = f32_to_bf16(vals[i]);
    std::memcpy(b.bytes.data() + 2 * i, &h, 2);
    std::memcpy(c.bytes.data() + 2 * i, &g, 2);
  }
  ts = {a, b, c};
  std::string p = tmp_path("rt.safetensors");
  write_safetensors(p, ts, {{"format", "pt"}});
  SafetensorsFile f(p);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  auto fa = f.tensors().at("a").to_f32();
  auto fb = f.tensors().at("b").to_f32();
  auto fc = f.tensors().at("c").to_f32();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(fa[i], vals[i]);
    EXPECT_EQ(fb[i], vals[i]);  // all values are exact in fp16
    EXPECT_EQ(fc[i], bf16_to_f32(f32_to_bf16(vals[i])));
  }
  EXPECT_EQ(f.tensors().at("c").shape, (std::vector<int64_t>{3, 2}));
}

TEST(Safetensors, RejectsTruncatedAndCorruptHeaders) {
  std::string p = tmp_path("bad.safetensors");
  { std::ofstream(p, std::ios::binary) << "abc"; }
  EXPECT_NE(expect_error(p).find("truncated"), std::string::npos);

  write_raw(p, "{\"a\":", "");
  EXPECT_NE(expect_error(p).find("not valid JSON"), std::string::npos);

  {  // header length larger than the file
    std::ofstream f(p, std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  EXPECT_NE(expect_error(p).find("truncated"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  EXPECT_NE(expect_error(p).find("beyond the data section"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("needs 12"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("not supported"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("unknown dtype"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("begin"), std::string::npos);

  write_raw(
      p,
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("overlap"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
            std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("overflow"), std::string::npos);

  write_raw(p, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(16, '\0'));
  EXPECT_NE(expect_error(p).find("non-negative"), std::string::npos);

  write_raw(p, R"([1,2])", "");
  EXPECT_NE(expect_error(p).find("not a JSON object"), std::string::npos);

  EXPECT_NE(expect_error(tmp_path("missing.safetensors")).find("cannot open"), std::string::npos);
}

TEST(Half, ConversionsRoundToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(5.9604645e-08f), 0x0001);
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604645e-08f);
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  for (uint32_t h = 0; h < 0x7c00; ++h)
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
}
