// The artifact format: XXH64 against the reference library, round trips, and damaged files
// (truncated, bad magic / version / hashes, bad offsets and references with valid hashes): one
// clear Error each, never a crash (this suite also runs under the asan preset).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "../export/tiny_ckpt.h"
#include "artifact/reader.h"
#include "artifact/writer.h"
#include "artifact/xxh64.h"
#include "backend/executor.h"
#include "core/error.h"
#include "export/exporter.h"

using namespace vkllm;
using namespace vkllm::testing;
using nlohmann::json;

namespace {

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
uint64_t rd64(const std::vector<uint8_t>& b, size_t off) {
  uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}
void wr64(std::vector<uint8_t>& b, size_t off, uint64_t v) {
  std::memcpy(b.data() + off, &v, 8);
}

// Rebuilds a file per docs/artifact.md with edited metadata and consistent hashes (written here
// from the documented layout, independently of ArtifactWriter).
std::vector<uint8_t> rebuild(const std::vector<uint8_t>& f,
                             const std::function<void(json&)>& edit) {
  const uint64_t msize = rd64(f, 24), doff = rd64(f, 32), dsize = rd64(f, 40);
  json meta = json::parse(f.begin() + 64, f.begin() + 64 + static_cast<long>(msize));
  edit(meta);
  const std::string text = meta.dump();
  const uint64_t ndoff = (64 + text.size() + 4095) / 4096 * 4096;
  std::vector<uint8_t> o(ndoff + dsize + 16, 0);
  std::memcpy(o.data(), f.data(), 24);
  wr64(o, 24, text.size());
  wr64(o, 32, ndoff);
  wr64(o, 40, dsize);
  wr64(o, 48, xxh64(text.data(), text.size()));
  wr64(o, 56, xxh64(o.data(), 56));
  std::memcpy(o.data() + 64, text.data(), text.size());
  std::memcpy(o.data() + ndoff, f.data() + doff, dsize);
  std::memcpy(o.data() + ndoff + dsize, "VKLLMEND", 8);
  wr64(o, ndoff + dsize + 8, xxh64(o.data(), ndoff + dsize));
  return o;
}

class ArtifactFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("artifact");
    TinySpec s;
    make_checkpoint(dir_->path + "/ckpt", s);
    RecipeOptions o;
    o.recipe = "quantized-8da4w-embedding";
    o.max_context = 32;
    export_checkpoint(dir_->path + "/ckpt", good(), o);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string good() { return dir_->path + "/good.vkllm"; }
  static std::string bad() { return dir_->path + "/bad.vkllm"; }
  // Opens `bytes` as an artifact; returns the error message ("" if it opened).
  static std::string open_error(const std::vector<uint8_t>& bytes, bool full_hash = true) {
    write_bytes(bad(), bytes);
    try {
      ArtifactReader r(bad(), ReadOptions{full_hash});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  static inline TempDir* dir_ = nullptr;
};

std::string contains(const std::string& msg, const std::string& what) {
  return msg.find(what) != std::string::npos ? "" : "'" + msg + "' lacks '" + what + "'";
}

}  // namespace

TEST(Xxh64, KnownVectorsAndStreaming) {
  // Reference values from libxxhash 0.8.1 (XXH64).
  struct V {
    const char* s;
    uint64_t h0, h42;
  } vs[] = {
      {"", 0xef46db3751d8e999ull, 0x98b1582b0977e704ull},
      {"a", 0xd24ec4f1a98c6e5bull, 0x88e4fe59adf7b0ccull},
      {"abc", 0x44bc2cf5ad770999ull, 0x13c1d910702770e6ull},
      {"vkllm", 0x41a254423615ec2eull, 0xb9b42c63200fbd49ull},
      {"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bcull, 0xaa9f288a8baa3d3full},
      {"0123456789abcdef0123456789abcdef0123456789", 0xa76190c3acf08a1cull, 0xec3fafab8cf27c18ull}};
  for (auto& v : vs) {
    EXPECT_EQ(xxh64(v.s, std::strlen(v.s)), v.h0) << v.s;
    EXPECT_EQ(xxh64(v.s, std::strlen(v.s), 42), v.h42) << v.s;
  }
  // Against the system library when it is installed (it is on the dev image), many lengths,
  // streamed in uneven pieces.
  std::mt19937 rng(5);
  std::vector<uint8_t> buf(5000);
  for (auto& c : buf) c = static_cast<uint8_t>(rng());
  using Fn = unsigned long long (*)(const void*, size_t, unsigned long long);
  void* lib = dlopen("libxxhash.so.0", RTLD_NOW);
  Fn ref = lib ? reinterpret_cast<Fn>(dlsym(lib, "XXH64")) : nullptr;
  for (size_t n = 0; n < buf.size(); n += 1 + n / 3) {
    const uint64_t one = xxh64(buf.data(), n, 7);
    Xxh64 st(7);
    for (size_t i = 0; i < n;) {
      const size_t k = std::min(n - i, (i * 13) % 41 + 1);
      st.update(buf.data() + i, k);
      i += k;
    }
    EXPECT_EQ(st.digest(), one) << n;
    if (ref) {
      EXPECT_EQ(ref(buf.data(), n, 7), one) << n;
    }
  }
  if (lib) dlclose(lib);
}

TEST_F(ArtifactFiles, OpensAndRuns) {
  ArtifactReader r(good());
  EXPECT_EQ(r.format_version(), 1u);
  EXPECT_EQ(r.recipe_name(), "quantized-8da4w-embedding");
  EXPECT_TRUE(r.data_hash_checked());
  EXPECT_EQ(r.file_size(), std::filesystem::file_size(good()));
  EXPECT_EQ(r.data_offset() % 4096, 0u);
  for (auto& t : r.program().tensors)
    if (t.kind == TensorKind::Weight) {
      EXPECT_EQ((r.data_offset() + t.offset) % 256, 0u) << t.name;
    }
  EXPECT_NE(std::string(r.file("tokenizer.json")).find("BPE"), std::string::npos);
  EXPECT_THROW(r.file("nope.json"), Error);
  auto ex = make_cpu_executor(r.program(), r);
  std::vector<int32_t> ids = {3, 4, 5};
  std::vector<float> logits(static_cast<size_t>(r.desc().vocab));
  const int32_t next = ex->forward(ids.data(), 3, 0, logits.data());
  EXPECT_EQ(next, std::max_element(logits.begin(), logits.end()) - logits.begin());
  // A rebuild with unchanged metadata (the test's own writer of the documented layout) opens.
  EXPECT_EQ(open_error(rebuild(read_bytes(good()), [](json&) {})), "");
}

TEST_F(ArtifactFiles, TruncatedOrExtended) {
  const auto f = read_bytes(good());
  for (size_t n : {size_t(0), size_t(7), size_t(63), size_t(64), size_t(200), size_t(5000),
                   f.size() / 2, f.size() - 1}) {
    std::vector<uint8_t> t(f.begin(), f.begin() + static_cast<long>(n));
    const std::string e = open_error(t);
    EXPECT_FALSE(e.empty()) << n;
    EXPECT_NE(e.find(bad()), std::string::npos) << e;
    if (n >= 64) {
      EXPECT_EQ(contains(e, "truncated"), "") << n;
    }
  }
  auto longer = f;
  longer.push_back(0);
  EXPECT_EQ(contains(open_error(longer), "corrupt"), "");
}

TEST_F(ArtifactFiles, BadMagicVersionAndHashes) {
  const auto f = read_bytes(good());
  auto b = f;
  b[0] = 'X';
  EXPECT_EQ(contains(open_error(b), "not a vkllm artifact"), "");
  b = f;
  b[8] = 2;  // format version 2
  EXPECT_EQ(contains(open_error(b), "format version 2 is not supported"), "");
  b = f;
  b[41] ^= 1;  // data_size, caught by the header hash
  EXPECT_EQ(contains(open_error(b), "header hash"), "");
  b = f;
  b[100] ^= 0x20;  // inside the metadata
  EXPECT_EQ(contains(open_error(b), "metadata hash"), "");
  b = f;
  const uint64_t doff = rd64(f, 32);
  b[doff + 10] ^= 1;  // inside the embedded tokenizer.json
  EXPECT_EQ(contains(open_error(b), "tokenizer.json hash"), "");
  b = f;
  b[f.size() - 40] ^= 1;  // a weight byte near the end
  EXPECT_EQ(contains(open_error(b), "file hash mismatch"), "");
  EXPECT_EQ(open_error(b, false), "");  // the weight hash is skipped on request (documented)
  b = f;
  b[f.size() - 16] = 'X';  // trailer magic
  EXPECT_EQ(contains(open_error(b), "trailer"), "");
}

TEST_F(ArtifactFiles, BadOffsetsAndReferencesWithValidHashes) {
  const auto f = read_bytes(good());
  auto first_weight = [](json& m) -> json& {
    for (auto& t : m["program"]["tensors"])
      if (t["kind"] == "weight") return t;
    throw std::runtime_error("no weight");
  };
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"offset past the end", [&](json& m) { first_weight(m)["offset"] = uint64_t(1) << 40; },
       "outside the data section"},
      {"offset overflow", [&](json& m) { first_weight(m)["offset"] = ~uint64_t(0) - 8; },
       "outside the data section"},
      {"unaligned",
       [&](json& m) { first_weight(m)["offset"] = first_weight(m)["offset"].get<uint64_t>() + 4; },
       "aligned"},
      {"overlap",
       [&](json& m) {
         std::vector<json*> ws;
         for (auto& t : m["program"]["tensors"])
           if (t["kind"] == "weight") ws.push_back(&t);
         (*ws[2])["offset"] = (*ws[1])["offset"];
       },
       "overlapping"},
      {"nbytes vs shape", [&](json& m) { first_weight(m)["nbytes"] = 8; }, "bytes"},
      {"shape",
       [&](json& m) {
         first_weight(m)["shape"] = {3, 3, 3, 3, 3};
       },
       "rank"},
      {"dtype of a q4 weight",
       [&](json& m) {
         for (auto& t : m["program"]["tensors"])
           if (t["dtype"] == "q4") {
             t["dtype"] = "f32";
             t["nbytes"] = t["nbytes"].get<uint64_t>() * 8;
             break;
           }
       },
       ""},
      {"dangling input", [&](json& m) { m["program"]["ops"][3]["inputs"][0] = 99999; },
       "refers to tensor"},
      {"negative input", [&](json& m) { m["program"]["ops"][3]["inputs"][0] = -2; },
       "refers to tensor"},
      {"use before definition",
       [&](json& m) { std::swap(m["program"]["ops"][1], m["program"]["ops"][2]); }, "before"},
      {"unknown family", [&](json& m) { m["program"]["ops"][1]["family"] = "conv2d"; },
       "unknown family"},
      {"attr type", [&](json& m) { m["program"]["ops"][1]["attrs"]["group"] = "big"; },
       "attribute group"},
      {"missing attr", [&](json& m) { m["program"]["ops"][0]["attrs"].erase("group"); },
       "attribute group"},
      {"string where number", [&](json& m) { m["program"]["max_ctx"] = "many"; }, "program"},
      {"huge max_ctx", [&](json& m) { m["program"]["max_ctx"] = 1 << 30; }, "max_ctx"},
      {"vocab mismatch",
       [&](json& m) {
         m["model"]["vocab_size"] = 7;
         m["model"]["vocab"] = 7;
       },
       ""},
      {"file outside", [&](json& m) { m["files"][0]["nbytes"] = uint64_t(1) << 40; },
       "outside the data section"},
      {"format version in metadata", [&](json& m) { m["format_version"] = 9; }, "version"},
      {"no recipe", [&](json& m) { m.erase("recipe"); }, "recipe"},
      {"no program", [&](json& m) { m.erase("program"); }, "metadata"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string e = open_error(rebuild(f, c.edit));
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(contains(e, c.expect), "");
    EXPECT_EQ(contains(e, bad()), "");
    EXPECT_EQ(e.find('\n'), std::string::npos);  // one line
  }
}

TEST_F(ArtifactFiles, RandomMetadataDamageNeverCrashes) {
  // Byte flips in the metadata with the hashes fixed up: every result either opens (and then its
  // program passed every check) or gives an Error; nothing else escapes.
  const auto f = read_bytes(good());
  const uint64_t msize = rd64(f, 24);
  std::mt19937 rng(11);
  int opened = 0;
  for (int it = 0; it < 150; ++it) {
    std::string text(f.begin() + 64, f.begin() + 64 + static_cast<long>(msize));
    for (int k = 0; k < 3; ++k) text[rng() % text.size()] = "0123456789,:{}[]\"-ex "[rng() % 21];
    json edited;
    try {
      edited = json::parse(text);
    } catch (const json::exception&) {
      continue;  // invalid JSON: covered by the metadata hash path; the reader's parse is tested
                 // below
    }
    const std::string e = open_error(rebuild(f, [&](json& m) { m = edited; }));
    opened += e.empty();
  }
  // A syntactically broken metadata with a valid hash.
  auto b = f;
  b[64] = '#';
  wr64(b, 48, xxh64(b.data() + 64, msize));
  wr64(b, 56, xxh64(b.data(), 56));
  const uint64_t end = rd64(b, 32) + rd64(b, 40);
  wr64(b, end + 8, xxh64(b.data(), end));
  EXPECT_EQ(contains(open_error(b), "bad artifact metadata"), "");
  SUCCEED() << opened << " damaged variants still opened";
}

TEST_F(ArtifactFiles, WriterRejectsInconsistentContent) {
  ArtifactReader r(good());
  ArtifactContent c;
  c.desc = r.desc();
  c.recipe = r.recipe();
  c.program = r.program();
  for (const std::string& n : r.file_names()) c.files.push_back({n, std::string(r.file(n))});
  std::vector<std::vector<uint8_t>> w(c.program.tensors.size());
  for (size_t i = 0; i < w.size(); ++i)
    if (c.program.tensors[i].kind == TensorKind::Weight) {
      auto s = r.weight(r.program(), static_cast<int32_t>(i));
      w[i].assign(s.begin(), s.end());
    }
  const std::string out = dir_->path + "/copy.vkllm";
  write_artifact(out, c, w);
  ArtifactReader copy(out);
  // Same program; write_artifact lays the weights out in tensor order, so only offsets differ.
  auto strip = [](Program p) {
    for (auto& t : p.tensors) t.offset = 0;
    return p.to_json();
  };
  EXPECT_EQ(strip(copy.program()), strip(r.program()));
  for (size_t i = 0; i < w.size(); ++i)
    if (!w[i].empty()) {
      auto s = copy.weight(copy.program(), static_cast<int32_t>(i));
      ASSERT_TRUE(std::equal(s.begin(), s.end(), w[i].begin(), w[i].end()));
    }
  // A weight of the wrong size: nothing is left at the target.
  for (size_t i = 0; i < w.size(); ++i)
    if (!w[i].empty()) {
      w[i].pop_back();
      break;
    }
  std::filesystem::remove(out);
  EXPECT_THROW(write_artifact(out, c, w), Error);
  EXPECT_FALSE(std::filesystem::exists(out));
}
