// vkllm verify: the positive case for every recipe, and the negative cases (an op left on the CPU,
// a missing op family, fp16 missing, an oversize file), through the library and the CLI.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "../export/tiny_ckpt.h"
#include "artifact/verify.h"
#include "artifact/writer.h"
#include "core/error.h"
#include "export/exporter.h"

using namespace vkllm;
using namespace vkllm::testing;

namespace {

struct CliRun {
  int code;
  std::string out;
};
CliRun run_cli(const std::string& args) {
  const std::string cmd = std::string(VKLLM_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class Verify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("verify");
    TinySpec s;
    make_checkpoint(dir_->path + "/ckpt", s);
    for (const auto& r : recipe_names()) {
      RecipeOptions o;
      o.recipe = r;
      o.max_context = 32;
      export_checkpoint(dir_->path + "/ckpt", path(r), o);
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const std::string& recipe) {
    return dir_->path + "/" + recipe + ".vkllm";
  }
  // Rewrites an artifact through the library writer after editing its content.
  static std::string rewrite(const std::string& recipe,
                             const std::function<void(ArtifactContent&)>& edit) {
    ArtifactReader r(path(recipe));
    ArtifactContent c;
    c.desc = r.desc();
    c.recipe = r.recipe();
    c.program = r.program();
    for (auto& n : r.file_names()) c.files.push_back({n, std::string(r.file(n))});
    std::vector<std::vector<uint8_t>> w(c.program.tensors.size());
    for (size_t i = 0; i < w.size(); ++i)
      if (c.program.tensors[i].kind == TensorKind::Weight) {
        auto s = r.weight(r.program(), static_cast<int32_t>(i));
        w[i].assign(s.begin(), s.end());
      }
    edit(c);
    const std::string out = dir_->path + "/edited.vkllm";
    write_artifact(out, c, w);
    return out;
  }
  static inline TempDir* dir_ = nullptr;
};

bool has_reason(const VerifyReport& r, const std::string& what) {
  for (auto& s : r.reasons)
    if (s.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(VerifySize, Parse) {
  EXPECT_EQ(parse_size("770MiB"), 770ull << 20);
  EXPECT_EQ(parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_size("800MB"), 800000000ull);
  EXPECT_EQ(parse_size("123"), 123ull);
  EXPECT_EQ(parse_size("2K"), 2048ull);
  EXPECT_THROW(parse_size("lots"), Error);
  EXPECT_THROW(parse_size("12XB"), Error);
  EXPECT_THROW(parse_size(""), Error);
}

TEST_F(Verify, EveryRecipePasses) {
  for (const auto& r : recipe_names()) {
    ArtifactReader a(path(r));
    VerifyReport rep = verify_artifact(a, {r, 0});
    EXPECT_TRUE(rep.ok) << r << ": " << (rep.reasons.empty() ? "" : rep.reasons[0]);
    EXPECT_EQ(rep.summary["backends"]["vulkan"].get<size_t>(), a.program().ops.size());
  }
}

TEST_F(Verify, OpLeftOnCpu) {
  const std::string p = rewrite("quantized-8da4w", [](ArtifactContent& c) {
    for (auto& op : c.program.ops)
      if (op.family == "linear_8da4w") {
        op.backend = BackendKind::Cpu;
        break;
      }
  });
  ArtifactReader a(p);
  VerifyReport rep = verify_artifact(a, {});
  EXPECT_FALSE(rep.ok);
  EXPECT_TRUE(has_reason(rep, "linear_8da4w, output l0.q) is assigned to the cpu backend"));
  CliRun r = run_cli("verify " + p);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cpu backend"), std::string::npos) << r.out;
}

TEST_F(Verify, MissingFamilies) {
  // A float program that claims the 8da4w recipe.
  std::string p =
      rewrite("non-quantized", [](ArtifactContent& c) { c.recipe["name"] = "quantized-8da4w"; });
  VerifyReport rep = verify_artifact(ArtifactReader(p), {});
  EXPECT_FALSE(rep.ok);
  EXPECT_TRUE(has_reason(rep, "needs linear_8da4w"));
  EXPECT_TRUE(has_reason(rep, "left in float"));
  // An 8da4w program checked as -embedding: no embedding_q4.
  rep = verify_artifact(ArtifactReader(path("quantized-8da4w")), {"quantized-8da4w-embedding", 0});
  EXPECT_TRUE(has_reason(rep, "needs embedding_q4"));
  EXPECT_TRUE(
      has_reason(rep, "exported with recipe quantized-8da4w, not quantized-8da4w-embedding"));
  // Checked as int4-weight-only: no linear_q4w.
  rep = verify_artifact(ArtifactReader(path("quantized-8da4w")), {"quantized-int4-weight-only", 0});
  EXPECT_TRUE(has_reason(rep, "needs linear_q4w"));
  // Checked as -fp16: no f16 tensors.
  rep = verify_artifact(ArtifactReader(path("quantized-8da4w")), {"quantized-8da4w-fp16", 0});
  EXPECT_TRUE(has_reason(rep, "no f16 activation"));
  EXPECT_TRUE(has_reason(rep, "caches are f32"));
  EXPECT_THROW(verify_artifact(ArtifactReader(path("quantized-8da4w")), {"bogus", 0}), Error);
  CliRun r =
      run_cli("verify " + path("quantized-8da4w") + " --recipe quantized-8da4w-embedding --json");
  EXPECT_EQ(r.code, 1);
  const auto j =
      nlohmann::json::parse(r.out.substr(r.out.find('{'), r.out.rfind('}') + 1 - r.out.find('{')));
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_FALSE(j["reasons"].empty());
}

TEST_F(Verify, NoAttention) {
  // A runnable program without attention (embedding -> norm -> head): verify names the family.
  ArtifactReader a(path("non-quantized"));
  ArtifactContent c;
  c.desc = a.desc();
  c.recipe = a.recipe();
  for (const std::string& n : a.file_names()) c.files.push_back({n, std::string(a.file(n))});
  Program& p = c.program;
  p.max_ctx = 8;
  const int64_t V = a.desc().vocab, D = a.desc().hidden;
  p.input_ids = p.add_tensor({"ids", DType::I32, TensorKind::Input, {-1}, 0, 0});
  const int32_t tab = p.add_tensor(
      {"table", DType::F32, TensorKind::Weight, {V, D}, 0, dtype_nbytes(DType::F32, {V, D})});
  const int32_t nw =
      p.add_tensor({"norm", DType::F32, TensorKind::Weight, {D}, 0, dtype_nbytes(DType::F32, {D})});
  const int32_t x = p.add_tensor({"x", DType::F32, TensorKind::Activation, {-1, D}, 0, 0});
  const int32_t last = p.add_tensor({"last", DType::F32, TensorKind::Activation, {1, D}, 0, 0});
  const int32_t n = p.add_tensor({"n", DType::F32, TensorKind::Activation, {1, D}, 0, 0});
  p.logits = p.add_tensor({"logits", DType::F32, TensorKind::Activation, {1, V}, 0, 0});
  p.next_token = p.add_tensor({"next", DType::I32, TensorKind::Activation, {1, 1}, 0, 0});
  p.ops = {{"embedding", {p.input_ids, tab}, {x}, nlohmann::json::object(), BackendKind::Vulkan},
           {"last_row", {x}, {last}, nlohmann::json::object(), BackendKind::Vulkan},
           {"rms_norm", {last, nw}, {n}, {{"eps", 1e-5}, {"group", D}}, BackendKind::Vulkan},
           {"linear", {n, tab}, {p.logits}, nlohmann::json::object(), BackendKind::Vulkan},
           {"argmax", {p.logits}, {p.next_token}, nlohmann::json::object(), BackendKind::Vulkan}};
  std::vector<std::vector<uint8_t>> w(p.tensors.size());
  w[tab].assign(dtype_nbytes(DType::F32, {V, D}), 0);
  w[nw].assign(dtype_nbytes(DType::F32, {D}), 0);
  const std::string out = dir_->path + "/noattn.vkllm";
  write_artifact(out, c, w);
  VerifyReport rep = verify_artifact(ArtifactReader(out), {});
  EXPECT_FALSE(rep.ok);
  EXPECT_TRUE(has_reason(rep, "needs attention ops"));
  CliRun r = run_cli("verify " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("needs attention"), std::string::npos) << r.out;
}

TEST_F(Verify, Oversize) {
  ArtifactReader a(path("quantized-8da4w-embedding"));
  EXPECT_TRUE(verify_artifact(a, {"", a.file_size()}).ok);
  VerifyReport rep = verify_artifact(a, {"", a.file_size() - 1});
  EXPECT_FALSE(rep.ok);
  EXPECT_TRUE(has_reason(rep, "over the limit"));
  CliRun r = run_cli("verify " + a.path() + " --max-size " + std::to_string(a.file_size() - 1));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("over the limit"), std::string::npos) << r.out;
  r = run_cli("verify " + a.path() + " --max-size 770MiB --recipe quantized-8da4w-embedding");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("embedding_q4 1"), std::string::npos) << r.out;
  r = run_cli("verify " + a.path() + " --json");
  EXPECT_EQ(r.code, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["op_families"]["linear_8da4w"].get<int>(), 15);
}

TEST_F(Verify, DamagedFileIsOneClearError) {
  std::filesystem::copy_file(path("fp16"), dir_->path + "/trunc.vkllm");
  std::filesystem::resize_file(dir_->path + "/trunc.vkllm", 1000);
  CliRun r = run_cli("verify " + dir_->path + "/trunc.vkllm");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("truncated artifact"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST_F(Verify, ExportCli) {
  const std::string out = dir_->path + "/cli.vkllm";
  CliRun r = run_cli("export " + dir_->path + "/ckpt --recipe quantized-int4-weight-only -o " +
                     out + " --group-size 32 --max-context 16 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file_size"].get<uint64_t>(), std::filesystem::file_size(out));
  EXPECT_EQ(j["recipe"]["group_size"], 32);
  EXPECT_EQ(j["max_context"], 16);
  r = run_cli("export " + dir_->path + "/ckpt --recipe quantized-int4-weight-only --plan --json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_cli("export " + dir_->path + "/ckpt --recipe nope -o " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown recipe 'nope'"), std::string::npos) << r.out;
  r = run_cli("export " + dir_->path + "/nothing --recipe fp16 -o " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("nothing"), std::string::npos) << r.out;
}
