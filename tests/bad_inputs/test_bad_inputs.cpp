// The bad-input catalogue (docs/robustness.md): each test gives the built `vkllm` binary one
// broken input (a file, a flag, the environment, a fault) and checks the exit code, the one
// stderr line naming the problem, and that no output file (complete, partial or temporary) is
// left. Inputs are made from the tiny Qwen3 twin (its artifact: e2e cell 1's recipe) and from
// the small test checkpoint of tests/testutil.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "artifact/reader.h"
#include "artifact/writer.h"
#include "catalogue_util.h"
#include "core/half.h"

namespace vkllm::catalogue {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- export ------------------------------------------------------------------------------------

// Exports `src` into a fresh folder; the export must be refused with `message` and leave nothing.
void expect_export_refused(const std::string& src, const std::string& message,
                           const std::string& recipe = "quantized-8da4w", RunOptions o = {}) {
  TempDir out;
  const RunResult r =
      run_vkllm({"export", src, "--recipe", recipe, "-o", out / "m.vkllm", "-q"}, o);
  EXPECT_EQ(check_refusal(r, 1, message), "");
  EXPECT_EQ(check_no_output(out.path, "m.vkllm"), "");
}

// The small checkpoint with its model.safetensors header edited as JSON.
std::string with_header(const TempDir& d, const std::function<void(json&)>& edit,
                        const std::function<void(std::string&)>& patch = {}) {
  const std::string ck = tiny_checkpoint(d / "ck");
  rewrite_safetensors(
      ck + "/model.safetensors",
      [&](std::string& h) {
        json j = json::parse(h);
        edit(j);
        h = j.dump();
      },
      patch);
  return ck;
}

// Byte offset (in the data section) of element `i` of a bf16 tensor of the small checkpoint.
size_t bf16_offset(const std::string& ck, const std::string& tensor, size_t i) {
  const std::string b = read_file(ck + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  return json::parse(b.substr(8, n))[tensor]["data_offsets"][0].get<size_t>() + 2 * i;
}

std::string with_bf16_value(const TempDir& d, uint16_t bits) {
  const std::string ck = tiny_checkpoint(d / "ck");
  const size_t at = bf16_offset(ck, "model.layers.0.mlp.down_proj.weight", 5);
  rewrite_safetensors(
      ck + "/model.safetensors", [](std::string&) {},
      [&](std::string& data) { std::memcpy(&data[at], &bits, 2); });
  return ck;
}

std::string with_config(const TempDir& d, const std::function<void(json&)>& edit) {
  const std::string ck = tiny_checkpoint(d / "ck");
  json c = json::parse(read_file(ck + "/config.json"));
  edit(c);
  write_file(ck + "/config.json", c.dump(2));
  return ck;
}

TEST(BadInputs, ExportFolderMissing) {
  expect_export_refused("/nonexistent/model", "/nonexistent/model: not a directory");
}

TEST(BadInputs, ExportSafetensorsTruncated) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::resize_file(ck + "/model.safetensors", fs::file_size(ck + "/model.safetensors") / 2);
  expect_export_refused(ck, "beyond the data section");
}

TEST(BadInputs, ExportSafetensorsTooShortForAHeader) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  write_file(ck + "/model.safetensors", "abcde");
  expect_export_refused(ck, "truncated safetensors file (5 bytes, no header length)");
}

TEST(BadInputs, ExportSafetensorsHeaderLengthOversized) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  std::string b = read_file(ck + "/model.safetensors");
  const uint64_t huge = 1ull << 40;
  std::memcpy(b.data(), &huge, 8);
  write_file(ck + "/model.safetensors", b);
  expect_export_refused(ck, "safetensors header length 1099511627776 is absurd");
}

TEST(BadInputs, ExportSafetensorsHeaderNotJson) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  rewrite_safetensors(ck + "/model.safetensors", [](std::string& h) { h[0] = '#'; });
  expect_export_refused(ck, "safetensors header is not valid JSON");
}

TEST(BadInputs, ExportWrongDtype) {
  TempDir d;
  const std::string ck = with_header(d, [](json& h) { h["model.norm.weight"]["dtype"] = "I64"; });
  expect_export_refused(ck, "tensor model.norm.weight: dtype I64 is not supported");
}

TEST(BadInputs, ExportShapeProductOverflows) {
  TempDir d;
  const std::string ck = with_header(d, [](json& h) {
    h["model.norm.weight"]["shape"] = {1ull << 32, 1ull << 32, 1ull << 32};
  });
  expect_export_refused(ck, "tensor model.norm.weight: shape overflows");
}

TEST(BadInputs, ExportShapeDisagreesWithConfig) {
  TempDir d;
  const std::string ck = with_header(d, [](json& h) { h["model.norm.weight"]["shape"] = {32, 2}; });
  expect_export_refused(ck, "tensor model.norm.weight has shape [32, 2], expected [64]");
}

TEST(BadInputs, ExportTensorsOverlap) {
  TempDir d;
  const std::string ck = with_header(d, [](json& h) {
    h["model.layers.0.input_layernorm.weight"]["data_offsets"] =
        h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"];
  });
  expect_export_refused(ck, "overlap in the data section");
}

// Decision (docs/robustness.md): export refuses NaN/Inf weights; verify flags them in artifacts.
TEST(BadInputs, ExportNaNWeight) {
  TempDir d;
  expect_export_refused(with_bf16_value(d, 0x7fc0),
                        "tensor model.layers.0.mlp.down_proj.weight holds NaN at element 5");
}

TEST(BadInputs, ExportInfWeight) {
  TempDir d;
  expect_export_refused(with_bf16_value(d, 0xff80),
                        "tensor model.layers.0.mlp.down_proj.weight holds Inf at element 5");
}

TEST(BadInputs, ExportWeightBeyondFp16Range) {
  TempDir d;
  // bf16 0x4974 = 999424: finite, but not representable in fp16.
  expect_export_refused(with_bf16_value(d, 0x4974), "is beyond the fp16 range", "fp16");
}

TEST(BadInputs, ExportConfigMissingKey) {
  TempDir d;
  expect_export_refused(with_config(d, [](json& c) { c.erase("hidden_size"); }),
                        "config.json: missing key 'hidden_size'");
}

TEST(BadInputs, ExportConfigAbsurdValue) {
  TempDir d;
  expect_export_refused(with_config(d, [](json& c) { c["num_hidden_layers"] = 1000000; }),
                        "key 'num_hidden_layers' = 1000000 is out of range [1, 1024]");
}

TEST(BadInputs, ExportConfigWrongType) {
  TempDir d;
  expect_export_refused(with_config(d, [](json& c) { c["tie_word_embeddings"] = "yes"; }),
                        "config.json: malformed config");
}

TEST(BadInputs, ExportConfigNotJson) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  write_file(ck + "/config.json", "{\"hidden_size\": 64,");
  expect_export_refused(ck, "config.json: not valid JSON");
}

TEST(BadInputs, ExportUnsupportedArchitecture) {
  TempDir d;
  expect_export_refused(with_config(d, [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; }),
                        "unsupported architecture 'GPT2LMHeadModel'");
}

TEST(BadInputs, ExportPickleCheckpoint) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::remove(ck + "/model.safetensors");
  write_file(ck + "/pytorch_model.bin", "PK\x03\x04");
  expect_export_refused(ck, "pickle files can run code and are refused");
}

TEST(BadInputs, ExportIndexNamesAPathOutsideTheFolder) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::remove(ck + "/model.safetensors");
  write_file(ck + "/model.safetensors.index.json",
             R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
  expect_export_refused(ck, "shard name '../../etc/passwd' is not a plain file name");
}

// Found by fuzz_st_index (fuzz/regressions/st_index/): "." names the folder itself.
TEST(BadInputs, ExportIndexNamesTheFolderItself) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::remove(ck + "/model.safetensors");
  write_file(ck + "/model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "."}})");
  expect_export_refused(ck, "shard name '.' is not a plain file name");
}

TEST(BadInputs, ExportIndexNamesAMissingShard) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::remove(ck + "/model.safetensors");
  write_file(ck + "/model.safetensors.index.json",
             R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  expect_export_refused(ck, "model-00001-of-00002.safetensors: cannot open: No such file");
}

TEST(BadInputs, ExportMissingTokenizer) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  fs::remove(ck + "/tokenizer.json");
  expect_export_refused(ck, "no tokenizer.json: the artifact must embed the tokenizer");
}

TEST(BadInputs, ExportUnknownRecipe) {
  TempDir d;
  expect_export_refused(tiny_checkpoint(d / "ck"), "unknown recipe 'quantized-2bit'",
                        "quantized-2bit");
}

// Root ignores directory permissions: the child drops to nobody (or, when that is impossible,
// gets a read-only bind mount of the folder in its own mount namespace).
TEST(BadInputs, ExportIntoReadOnlyFolder) {
  TempDir d;
  const std::string ck = tiny_checkpoint(d / "ck");
  const std::string ro = d / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(d.path, fs::perms::all);
  fs::permissions(ck, fs::perms::all);
  RunOptions o;
  o.in_child = [ro] {
    if (::geteuid() != 0) return;
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) return;
    if (::unshare(CLONE_NEWNS) == 0 &&
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        ::mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) == 0)
      ::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
  };
  const RunResult r =
      run_vkllm({"export", ck, "--recipe", "quantized-8da4w", "-o", ro + "/m.vkllm", "-q"}, o);
  EXPECT_EQ(check_refusal(r, 1, ro + "/m.vkllm: cannot create output:"), "");
  EXPECT_EQ(check_no_output(ro, "m.vkllm"), "");
}

// A full disk: the file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes write() fail like
// ENOSPC does, on the real filesystem, so that the test can see what is left behind.
TEST(BadInputs, ExportDiskFull) {
  TempDir d;
  RunOptions o;
  o.file_size_limit = 20000;
  expect_export_refused(tiny_checkpoint(d / "ck"), "m.vkllm: write failed: File too large",
                        "quantized-8da4w", o);
}

// SIGKILL while the artifact is being written: the output is an unnamed file (O_TMPFILE) until
// the final rename, so nothing at all is left in the folder.
TEST(BadInputs, ExportKilledMidway) {
  TempDir out, io;
  const pid_t pid = spawn_vkllm(
      {"export", fixtures().twin, "--recipe", "quantized-8da4w", "-o", out / "m.vkllm", "-q"}, {},
      io.path);
  bool writing = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!writing && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
      const std::string target = fs::read_symlink(e.path(), ec).string();
      if (target.rfind(out.path + "/", 0) == 0) writing = true;
    }
    if (::waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(writing) << "the export ended (or never opened its output) before it could be "
                          "killed midway";
  ::kill(pid, SIGKILL);
  const RunResult r = wait_vkllm(pid, io.path, 60);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_TRUE(fs::is_empty(out.path))
      << "left behind: " << fs::directory_iterator(out.path)->path();
}

// ---- verify ------------------------------------------------------------------------------------

std::string artifact_copy(const TempDir& d) {
  fs::copy_file(fixtures().artifact, d / "m.vkllm");
  return d / "m.vkllm";
}

void expect_verify_refused(const std::string& path, const std::string& message,
                           std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"verify", path};
  args.insert(args.end(), extra.begin(), extra.end());
  EXPECT_EQ(check_refusal(run_vkllm(args), 1, message), "");
}

TEST(BadInputs, VerifyTruncatedArtifact) {
  TempDir d;
  const std::string a = artifact_copy(d);
  fs::resize_file(a, fs::file_size(a) / 2);
  expect_verify_refused(a, "truncated artifact: the header promises");
}

TEST(BadInputs, VerifyOversizedArtifact) {
  TempDir d;
  const std::string a = artifact_copy(d);
  write_file(a, read_file(a) + std::string(4096, 'x'));
  expect_verify_refused(a, "corrupt artifact: the header promises");
}

std::string future_version(const TempDir& d) {
  const std::string a = artifact_copy(d);
  std::string b = read_file(a);
  b[8] = 2;  // the header's u32 format version
  write_file(a, b);
  return a;
}

TEST(BadInputs, VerifyArtifactFromAFutureVersion) {
  TempDir d;
  expect_verify_refused(future_version(d),
                        "artifact format version 2 is not supported (this vkllm reads version "
                        "1); it was written by a newer vkllm: upgrade vkllm");
}

TEST(BadInputs, VerifyNotAnArtifact) {
  TempDir d;
  expect_verify_refused(fixtures().twin + "/model.safetensors", "not a vkllm artifact (bad magic)");
}

TEST(BadInputs, VerifyEmptyFile) {
  TempDir d;
  write_file(d / "m.vkllm", "");
  expect_verify_refused(d / "m.vkllm", "not a vkllm artifact (only 0 bytes)");
}

TEST(BadInputs, VerifyDirectory) {
  TempDir d;
  expect_verify_refused(d.path, d.path + ": not a regular file");
}

TEST(BadInputs, VerifyDamagedWeights) {
  TempDir d;
  const std::string a = artifact_copy(d);
  std::string b = read_file(a);
  b[b.size() - 100] ^= 0x40;  // a weight byte; header, metadata and files are intact
  write_file(a, b);
  expect_verify_refused(a, "corrupt artifact: file hash mismatch (the weights are damaged)");
}

// An artifact whose hashes all match but whose float weights hold NaN: verify must say so.
TEST(BadInputs, VerifyNaNWeightWithValidHashes) {
  TempDir d;
  ArtifactReader r(fixtures().artifact);
  ArtifactContent c;
  c.desc = r.desc();
  c.recipe = r.recipe();
  c.program = r.program();
  for (const std::string& n : r.file_names()) c.files.push_back({n, std::string(r.file(n))});
  std::vector<std::vector<uint8_t>> w(c.program.tensors.size());
  std::string poisoned;
  for (size_t i = 0; i < w.size(); ++i) {
    const TensorDecl& t = c.program.tensors[i];
    if (t.kind != TensorKind::Weight) continue;
    const auto s = r.weight(r.program(), static_cast<int32_t>(i));
    w[i].assign(s.begin(), s.end());
    if (poisoned.empty() && t.dtype == DType::F32 && w[i].size() >= 8) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(w[i].data() + 4, &nan, 4);
      poisoned = t.name;
    }
  }
  ASSERT_FALSE(poisoned.empty());
  write_artifact(d / "nan.vkllm", c, w);
  expect_verify_refused(d / "nan.vkllm", "weight " + poisoned + " holds NaN at element 1");
}

TEST(BadInputs, VerifyOverTheSizeLimit) {
  expect_verify_refused(fixtures().artifact, "over the limit of 1024 bytes",
                        {"--max-size", "1KiB"});
}

TEST(BadInputs, VerifyBadSizeLimit) {
  expect_verify_refused(fixtures().artifact, "bad size unit in '12XB'", {"--max-size", "12XB"});
}

// ---- run ---------------------------------------------------------------------------------------

std::vector<std::string> run_args(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run", "-m", model, "-n", "4", "--temperature", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A refused `vkllm run` also prints nothing on stdout (no partial text a caller could take).
std::string check_run_refusal(const RunResult& r, int exit_code, const std::string& message) {
  std::string why = check_refusal(r, exit_code, message);
  if (!r.out.empty()) why += (why.empty() ? "" : "; ") + ("stdout not empty: '" + r.out + "'");
  return why;
}

TEST(BadInputs, RunEmptyPrompt) {
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", ""})), 2,
                              "no prompt: give --prompt TEXT or --prompt_file FILE"),
            "");
}

TEST(BadInputs, RunTenMegabytePrompt) {
  TempDir d;
  std::string p;
  while (p.size() < (10u << 20)) p += "The capital of France is Paris. ";
  write_file(d / "p.txt", p);
  EXPECT_EQ(check_run_refusal(
                run_vkllm(run_args(fixtures().artifact, {"-f", d / "p.txt", "--backend", "cpu"})),
                5, "tokens but the context holds 2048"),
            "");
}

// Decision: invalid UTF-8 in a prompt is replaced by U+FFFD (one per maximal invalid subpart, as
// Hugging Face tokenizers do), never rejected; the run must see exactly the tokens of the
// replaced text.
TEST(BadInputs, RunInvalidUtf8Prompt) {
  TempDir d;
  write_file(d / "bad.txt", "caf\xc3 au \xff\xfe lait \xe2\x82");
  write_file(d / "fixed.txt", "caf\xef\xbf\xbd au \xef\xbf\xbd\xef\xbf\xbd lait \xef\xbf\xbd");
  const RunResult bad =
      run_vkllm(run_args(fixtures().artifact, {"-f", d / "bad.txt", "--backend", "cpu"}));
  const RunResult fixed =
      run_vkllm(run_args(fixtures().artifact, {"-f", d / "fixed.txt", "--backend", "cpu"}));
  EXPECT_EQ(bad.exit_code, 0) << bad.err;
  EXPECT_EQ(bad.out, fixed.out);
  EXPECT_NE(bad.err.find("\"prompt_tokens\":"), std::string::npos) << bad.err;
  const auto tokens = [](const std::string& err) {
    const size_t at = err.find("\"prompt_tokens\":");
    return at == std::string::npos ? std::string() : err.substr(at, 24);
  };
  EXPECT_EQ(tokens(bad.err), tokens(fixed.err));
}

TEST(BadInputs, RunNoVulkanDriver) {
  RunOptions o;
  o.env = {{"VK_DRIVER_FILES", "/nonexistent/icd.json"},
           {"VK_ICD_FILENAMES", "/nonexistent/icd.json"}};
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi"}), o), 4,
                              "cannot create a Vulkan instance: VK_ERROR_INCOMPATIBLE_DRIVER"),
            "");
}

TEST(BadInputs, RunNoSuchDevice) {
  RunOptions o;
  o.env = {{"VKLLM_DEVICE", "no-such"}};
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi"}), o), 4,
                              "no Vulkan device name contains 'no-such' (devices: 0: "),
            "");
}

TEST(BadInputs, RunDeviceIndexOutOfRange) {
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi", "--device",
                                                                       "123456789012345678901"})),
                              4, "Vulkan device index 123456789012345678901 does not exist"),
            "");
}

// The backend does not fall back to fp32 for an fp16 program: it refuses with what is missing.
TEST(BadInputs, RunFp16RecipeOnADeviceWithoutFp16) {
  RunOptions o;
  o.env = {{"VKLLM_NO_FP16", "1"}};
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi"}), o), 4,
                              "has no 16-bit storage (VKLLM_NO_FP16 is set); choose another device "
                              "(--device) or a recipe without fp16"),
            "");
}

TEST(BadInputs, RunGpuMemoryExhausted) {
  RunOptions o;
  o.env = {{"VKLLM_VK_MEMORY_BUDGET", "1048576"}};
  EXPECT_EQ(
      check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi"}), o), 3,
                        "out of GPU memory; choose another device with --device or VKLLM_DEVICE"),
      "");
}

TEST(BadInputs, RunArtifactFromAFutureVersion) {
  TempDir d;
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(future_version(d), {"-p", "Hi"})), 3,
                              "artifact format version 2 is not supported"),
            "");
}

TEST(BadInputs, RunTruncatedArtifact) {
  TempDir d;
  const std::string a = artifact_copy(d);
  fs::resize_file(a, 10000);
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(a, {"-p", "Hi"})), 3, "truncated artifact"), "");
}

TEST(BadInputs, RunContextLongerThanTheArtifacts) {
  EXPECT_EQ(
      check_run_refusal(run_vkllm(run_args(fixtures().artifact, {"-p", "Hi", "--seq_len", "9999"})),
                        3, "context length 9999 exceeds the artifact's 2048"),
      "");
}

// A path longer than the system accepts (ENAMETOOLONG) where a folder or artifact is expected.
TEST(BadInputs, RunModelPathTooLong) {
  const std::string p = "/tmp/" + std::string(300, 'x') + "/" + std::string(5000, 'y');
  EXPECT_EQ(check_run_refusal(run_vkllm(run_args(p, {"-p", "Hi"})), 1, ": File name too long"), "");
}

// ---- tokenize, pull ----------------------------------------------------------------------------

TEST(BadInputs, TokenizeInvalidUtf8IsReplacedNotRejected) {
  TempDir d;
  write_file(d / "bad.txt",
             "\xff\xfe"
             "abc\xe2\x82");
  write_file(d / "fixed.txt",
             "\xef\xbf\xbd\xef\xbf\xbd"
             "abc\xef\xbf\xbd");
  RunOptions bad, fixed;
  bad.stdin_path = d / "bad.txt";
  fixed.stdin_path = d / "fixed.txt";
  const RunResult a = run_vkllm({"tokenize", "--tokenizer", fixtures().twin, "--ids"}, bad);
  const RunResult b = run_vkllm({"tokenize", "--tokenizer", fixtures().twin, "--ids"}, fixed);
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out, b.out);
}

TEST(BadInputs, TokenizeBrokenTokenizerJson) {
  TempDir d;
  const std::string t = read_file(fixtures().twin + "/tokenizer.json");
  write_file(d / "tokenizer.json", t.substr(0, t.size() / 3));
  EXPECT_EQ(check_refusal(run_vkllm({"tokenize", "--tokenizer", d / "tokenizer.json", "x"}), 1,
                          "tokenizer.json: not valid JSON"),
            "");
}

TEST(BadInputs, PullNotAModelId) {
  EXPECT_EQ(check_refusal(run_vkllm({"pull", "../../etc@main"}), 1,
                          "'../../etc@main': not a Hugging Face model id"),
            "");
}

TEST(BadInputs, PullOfflineNotInTheCache) {
  TempDir d;
  RunOptions o;
  o.env = {{"HF_HUB_CACHE", d.path}};
  EXPECT_EQ(check_refusal(run_vkllm({"pull", "org/name", "--offline"}, o), 1,
                          "org/name@main: not in the cache"),
            "");
}

}  // namespace
}  // namespace vkllm::catalogue
