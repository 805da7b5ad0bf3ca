// `vkllm run` as a user's script sees it: a real child process, stdout and stderr apart.
// References: the tokenizer decoding the written ids (streaming == final text), the fp32
// reference engine in-process (greedy ids), the committed chat prompt of e2e/prompts (--chat).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cli_fixture.h"
#include "core/mapped_file.h"
#include "hf/checkpoint.h"
#include "runtime/generate.h"
#include "runtime/reference.h"
#include "tokenizer/tokenizer.h"

using namespace vkllm;
using namespace vkllm::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kPrompt = "What is the capital of France?";

Tokenizer twin_tokenizer() {
  HfCheckpoint ck(shared_twin().dir);
  return Tokenizer::from_files(ck.tokenizer_json_path(), ck.tokenizer_config_path());
}

json stats_of(const Proc& r) {
  const auto lines = r.err_lines();
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) return nullptr;
  const std::string& last = lines.back();
  EXPECT_EQ(last.rfind("vkllm-stats {", 0), 0u) << "last stderr line: " << last;
  return json::parse(last.substr(12), nullptr, false);
}

json ids_of(const std::string& path) {
  return json::parse(read_text_file(path));
}

std::string write_file(const std::string& text) {
  const std::string p = scratch_dir() + "/file.txt";
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// A failing run: the exit code, nothing on stdout, exactly one line on stderr naming the problem.
void expect_one_line_failure(const Proc& r, int code, const std::string& needle) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.out, "");
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("vkllm: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
}

}  // namespace

TEST(Run, StdoutIsExactlyTheStreamedTextAndStderrEndsWithTheStatsLine) {
  const std::string ids_file = scratch_dir() + "/ids.json";
  const Proc r = run_vkllm({"run", "-m", shared_twin().artifact, "-p", kPrompt, "--chat", "-n", "5",
                            "--temperature", "0", "--ids_file", ids_file},
                           validated_env());
  ASSERT_EQ(r.code, 0) << r.err;
  const json ids = ids_of(ids_file);
  const auto gen = ids["generated_ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(gen.empty());
  // stdout holds the text of the generated ids and nothing else (no newline when not a tty).
  EXPECT_EQ(r.out, twin_tokenizer().decode(gen));
  const json s = stats_of(r);
  ASSERT_TRUE(s.is_object());
  for (const char* k : {"prompt_tokens", "generated_tokens", "load_ms", "ttft_ms", "prefill_tok_s",
                        "decode_tok_s", "peak_host_mb", "peak_gpu_mb", "validation_messages"})
    EXPECT_TRUE(s.contains(k) && s[k].is_number()) << k;
  for (const char* k : {"backend", "device", "recipe"})
    EXPECT_TRUE(s.contains(k) && s[k].is_string()) << k;
  EXPECT_EQ(s["generated_tokens"].get<size_t>(), gen.size());
  EXPECT_EQ(s["prompt_tokens"].get<size_t>(), ids["prompt_ids"].size());
  EXPECT_EQ(s["backend"], "vulkan");
  EXPECT_EQ(s["recipe"], "non-quantized");
  EXPECT_GT(s["peak_gpu_mb"].get<double>(), 70.0);  // at least the 78 MB of fp32 weights
  EXPECT_GT(s["peak_host_mb"].get<double>(), 1.0);
  EXPECT_EQ(s["validation_messages"].get<int>(), 0) << r.err;
  // The load in stages: the open's parts add up to it (the rest is the artifact's; the tokenizer's
  // part is what the open waited for it after the backend, its parse running beside the device
  // and the weights), the tokenizer's parse takes time, the session follows the open.
  const json& st = s["load_stages_ms"];
  ASSERT_TRUE(st.is_object()) << s.dump();
  for (const char* k : {"open", "session", "tokenizer", "tokenizer_parse", "artifact", "device",
                        "weights", "pipelines"}) {
    ASSERT_TRUE(st.contains(k) && st[k].is_number()) << k;
    EXPECT_GE(st[k].get<double>(), 0.0) << k;
  }
  EXPECT_DOUBLE_EQ(st["open"].get<double>(), s["load_ms"].get<double>());
  EXPECT_GT(st["tokenizer_parse"].get<double>(), 0.0);
  EXPECT_LE(st["tokenizer"].get<double>(), st["tokenizer_parse"].get<double>());
  EXPECT_LE(
      st["tokenizer"].get<double>() + st["device"].get<double>() + st["weights"].get<double>(),
      st["open"].get<double>());
  EXPECT_NEAR(st["tokenizer"].get<double>() + st["device"].get<double>() +
                  st["weights"].get<double>() + st["artifact"].get<double>(),
              st["open"].get<double>(), 1e-6);
  // Diagnostics never reach stdout; the stats line is the last thing on stderr.
  EXPECT_EQ(r.out.find("vkllm"), std::string::npos);
}

TEST(Run, GreedyIdsEqualTheReferenceEngineAndChatEqualsTheCommittedPrompt) {
  // --chat on the plain question must give the committed chat-formatted prompt of cell 1.
  const std::string prompt_file = std::string(VKLLM_SOURCE_DIR) + "/e2e/prompts/qwen3.txt";
  const std::string a = scratch_dir() + "/a.json", b = scratch_dir() + "/b.json";
  const Proc chat = run_vkllm({"run", "-m", shared_twin().artifact, "--backend", "cpu", "-p",
                               kPrompt, "--chat", "-n", "16", "--ids_file", a});
  const Proc file =
      run_vkllm({"run", "-m", shared_twin().artifact, "--backend", "cpu", "-p", "ignored",
                 "--prompt_file", prompt_file, "-n", "16", "--ids_file", b});
  ASSERT_EQ(chat.code, 0) << chat.err;
  ASSERT_EQ(file.code, 0) << file.err;
  EXPECT_EQ(ids_of(a), ids_of(b));  // --prompt_file overrides --prompt; same prompt, same ids
  EXPECT_EQ(chat.out, file.out);
  // The fp32 reference engine, in this process, from the Hugging Face folder.
  HfCheckpoint ck(shared_twin().dir);
  auto ref = load_reference_model(ck, 64);
  auto ex = ref->make_executor();
  const auto prompt = ids_of(b)["prompt_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(prompt, twin_tokenizer().encode(read_text_file(prompt_file)));
  GenerateStats st;
  const auto want = generate(*ex, ref->lowered.program, prompt, 16, SamplingParams{},
                             {151645, 151643}, 0, nullptr, &st);
  EXPECT_EQ(ids_of(b)["generated_ids"].get<std::vector<int32_t>>(), want);
}

TEST(Run, StopsAtAnyEosIdOfTheModel) {
  // A copy of the twin whose generation_config.json names, as its second eos id, the k-th greedy
  // token of the unmodified twin: generation must stop right before it.
  const std::string ids0 = scratch_dir() + "/ids0.json";
  const Proc r0 = run_vkllm({"run", "-m", shared_twin().dir, "--backend", "cpu", "-p", kPrompt,
                             "--chat", "-n", "10", "--ids_file", ids0});
  ASSERT_EQ(r0.code, 0) << r0.err;
  const auto g = ids_of(ids0)["generated_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(g.size(), 10u);
  size_t k = 3;
  while (k < g.size() && std::find(g.begin(), g.begin() + static_cast<long>(k), g[k]) !=
                             g.begin() + static_cast<long>(k))
    ++k;
  ASSERT_LT(k, g.size()) << "no fresh token to use as eos";
  const std::string dir = scratch_dir() + "/twin-eos";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(shared_twin().dir))
    fs::copy(e.path(), dir + "/" + e.path().filename().string());
  json gc = json::parse(read_text_file(dir + "/generation_config.json"));
  gc["eos_token_id"] = {151645, g[k]};
  std::ofstream(dir + "/generation_config.json") << gc.dump(2);
  for (const std::string backend : {"cpu", "vulkan"}) {
    const std::string ids1 = scratch_dir() + "/ids1.json";
    const Proc r1 = run_vkllm({"run", "-m", dir, "--backend", backend, "-p", kPrompt, "--chat",
                               "-n", "10", "--ids_file", ids1},
                              validated_env());
    ASSERT_EQ(r1.code, 0) << r1.err;
    const auto got = ids_of(ids1)["generated_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(got, std::vector<int32_t>(g.begin(), g.begin() + static_cast<long>(k))) << backend;
    EXPECT_EQ(r1.out, twin_tokenizer().decode(got)) << backend;  // the eos token prints nothing
    const json s = stats_of(r1);
    EXPECT_TRUE(s["stopped_by_eos"].get<bool>()) << backend;
    EXPECT_EQ(s["generated_tokens"].get<size_t>(), k) << backend;
  }
}

TEST(Run, NoStatsLineWithNoStats) {
  const Proc r = run_vkllm({"run", "-m", shared_twin().artifact, "--backend", "cpu", "-p", "Hello",
                            "-n", "3", "--no-stats"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(r.out.empty());
}

TEST(Run, ExitCodesForEachFailure) {
  const std::string art = shared_twin().artifact;
  // 2: no prompt, an unreadable prompt file, an empty one.
  expect_one_line_failure(run_vkllm({"run", "-m", art}), 2, "no prompt");
  expect_one_line_failure(run_vkllm({"run", "-m", art, "-f", "/nonexistent/prompt.txt"}), 2,
                          "/nonexistent/prompt.txt");
  expect_one_line_failure(run_vkllm({"run", "-m", art, "-f", write_file("")}), 2, "is empty");
  // 3: an unreadable model, a file that is not an artifact, a truncated artifact.
  expect_one_line_failure(run_vkllm({"run", "-m", "/nonexistent/m.vkllm", "-p", "Hi"}), 3,
                          "/nonexistent/m.vkllm");
  const std::string junk = write_file(std::string(4096, 'x'));
  expect_one_line_failure(run_vkllm({"run", "-m", junk, "-p", "Hi"}), 3, junk);
  const std::string cut = scratch_dir() + "/cut.vkllm";
  {
    const std::string bytes = read_text_file(art);
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  expect_one_line_failure(run_vkllm({"run", "-m", cut, "-p", "Hi"}), 3, cut);
  // 4: no usable Vulkan device (an index that does not exist; a name that matches nothing).
  expect_one_line_failure(run_vkllm({"run", "-m", art, "-p", "Hi", "--device", "97"}), 4, "97");
  expect_one_line_failure(
      run_vkllm({"run", "-m", art, "-p", "Hi"}, {{"VKLLM_DEVICE", "no-such-gpu"}}), 4,
      "no-such-gpu");
  // 5: a prompt longer than the context (the artifact's 64, or a smaller --seq_len).
  std::string longp;
  for (int i = 0; i < 80; ++i) longp += " word";
  expect_one_line_failure(run_vkllm({"run", "-m", art, "-p", longp}), 5, "context holds 64");
  expect_one_line_failure(run_vkllm({"run", "-m", art, "-p", kPrompt, "--chat", "--seq_len", "8"}),
                          5, "context holds 8");
  // A usage error (missing -m) is CLI11's non-zero code, not a crash.
  const Proc u = run_vkllm({"run", "-p", "Hi"});
  EXPECT_NE(u.code, 0);
  EXPECT_NE(u.code, -1);
  EXPECT_EQ(u.out.find("vkllm-stats"), std::string::npos);
}

TEST(Run, SeqLenCapsPromptPlusNewTokens) {
  const std::string ids = scratch_dir() + "/ids.json";
  const Proc r = run_vkllm({"run", "-m", shared_twin().artifact, "--backend", "cpu", "-p", kPrompt,
                            "--chat", "--seq_len", "20", "-n", "50", "--ids_file", ids});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = ids_of(ids);
  EXPECT_EQ(j["prompt_ids"].size() + j["generated_ids"].size(), 20u);
}

// The generation flags end to end: --stop cuts the printed text before the stop string (the
// tokenizer's decoding of the greedy ids is the reference), --top_k 1 at any temperature is the
// greedy reply, a seed reproduces a sampled reply, --num_eos appends eos ids to the prompt.
TEST(Run, GenerationFlags) {
  const std::string art = shared_twin().artifact;
  const auto run_ids = [&](std::vector<std::string> extra, Proc* proc = nullptr) {
    const std::string ids = scratch_dir() + "/ids.json";
    std::vector<std::string> args = {"run",   "-m",     art,  "--backend", "cpu",        "-p",
                                     kPrompt, "--chat", "-n", "12",        "--ids_file", ids};
    args.insert(args.end(), extra.begin(), extra.end());
    const Proc r = run_vkllm(args);
    EXPECT_EQ(r.code, 0) << r.err;
    if (proc) *proc = r;
    return r.code == 0 ? ids_of(ids) : json();
  };
  Proc g;
  const json greedy = run_ids({"--ignore_eos"}, &g);
  const auto gen = greedy["generated_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(gen.size(), 12u);
  const std::string text = twin_tokenizer().decode(gen);
  EXPECT_EQ(g.out, text);
  // --stop: the text of tokens 4 and 5 (across their boundary).
  const std::string stop = twin_tokenizer().decode(std::vector<int32_t>{gen[4], gen[5]});
  Proc s;
  const json stopped = run_ids({"--ignore_eos", "--stop", "\x01unused", "--stop", stop}, &s);
  EXPECT_EQ(s.out, text.substr(0, text.find(stop)));
  EXPECT_TRUE(stats_of(s)["stopped_by_stop"].get<bool>());
  EXPECT_LE(stopped["generated_ids"].size(), 6u);
  // --top_k 1 / --min_p 1: greedy at any temperature; a seed reproduces a sampled reply.
  EXPECT_EQ(run_ids({"--ignore_eos", "--temperature", "5", "--top_k", "1"})["generated_ids"],
            greedy["generated_ids"]);
  EXPECT_EQ(run_ids({"--ignore_eos", "--temperature", "5", "--min_p", "1"})["generated_ids"],
            greedy["generated_ids"]);
  const json a = run_ids({"--ignore_eos", "--temperature", "1.5", "--seed", "77"});
  const json b = run_ids({"--ignore_eos", "--temperature", "1.5", "--seed", "77"});
  EXPECT_EQ(a["generated_ids"], b["generated_ids"]);
  EXPECT_NE(a["generated_ids"], greedy["generated_ids"]);
  // Penalties change the greedy reply; --repeat_penalty is llama.cpp's name for the same flag.
  EXPECT_NE(run_ids({"--ignore_eos", "--frequency_penalty", "5", "--presence_penalty", "5",
                     "--repeat_penalty", "2"})["generated_ids"],
            greedy["generated_ids"]);
  // --num_eos 2: the prompt ends with two of the model's eos id; --num_bos 0 is a no-op.
  const auto p =
      run_ids({"--num_eos", "2", "--num_bos", "0"})["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(p.size(), 3u);
  EXPECT_EQ(p[p.size() - 1], 151645);
  EXPECT_EQ(p[p.size() - 2], 151645);
  EXPECT_EQ(p.size(), greedy["prompt_ids"].size() + 2);
  // llama_main's defaults are accepted.
  run_ids({"--cpu_threads", "-1", "--method_name", "forward"});
}

// llama_main's flags that mean nothing here are refused, each with one line naming it and why.
TEST(Run, LlamaMainFlagsRefusedWithTheReason) {
  const std::string art = shared_twin().artifact;
  for (const auto& [flag, value, why, code] :
       std::vector<std::tuple<std::string, std::string, std::string, int>>{
           {"--cpu_threads", "4", "single-threaded", 1},
           {"--data_paths", "/tmp/w.ptd", "holds its weights", 1},
           {"--method_name", "prefill", "one program", 1},
           {"--etdump_path", "/tmp/t.etdp", "VKLLM_PROFILE", 1},
           {"--num_bos", "1", "no BOS token", 2}}) {  // Qwen3's tokenizer adds no BOS
    const Proc r = run_vkllm({"run", "-m", art, "-p", "Hi", flag, value});
    expect_one_line_failure(r, code, why);
    EXPECT_NE(r.err.find(flag + " " + value), std::string::npos) << r.err;
  }
}

namespace {
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
}  // namespace

// --json-schema / --json-object: the reply is JSON the schema accepts, from a random model that
// would not write JSON by itself; an unreadable file or an unsupported schema is one line and
// exit 1.
TEST(Run, JsonSchemaConstrainsTheReply) {
  const std::string art = shared_twin().artifact;
  const std::string schema = scratch_dir() + "/schema.json";
  write_text(schema,
             R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                 "n": {"type": "integer", "minimum": 0, "maximum": 99}},
                 "required": ["name", "n"], "additionalProperties": false})");
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "-m",    art,  "--backend", "cpu",
                                     "-p",  kPrompt, "-n", "40"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_vkllm(args);
  };
  const Proc r = run({"--json-schema", schema});
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.size(), 2u) << r.out;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << r.out;
  EXPECT_LE(j["name"].get<std::string>().size(), 6u) << r.out;
  ASSERT_TRUE(j.contains("n") && j["n"].is_number_integer()) << r.out;
  EXPECT_GE(j["n"].get<int>(), 0);
  EXPECT_LE(j["n"].get<int>(), 99);
  const Proc o = run({"--json-object"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(json::parse(o.out, nullptr, false).is_object()) << o.out;
  const Proc plain = run({});
  EXPECT_FALSE(json::parse(plain.out, nullptr, false).is_object()) << plain.out;
  const Proc missing = run({"--json-schema", scratch_dir() + "/absent.json"});
  EXPECT_EQ(missing.code, 1);
  ASSERT_EQ(missing.err_lines().size(), 1u) << missing.err;
  EXPECT_NE(missing.err.find("cannot read"), std::string::npos) << missing.err;
  write_text(schema, R"({"type": "string", "pattern": "(a|b)*c{2,}\\1"})");
  const Proc bad = run({"--json-schema", schema});
  EXPECT_EQ(bad.code, 1);
  ASSERT_EQ(bad.err_lines().size(), 1u) << bad.err;
  EXPECT_NE(bad.err.find("--json-schema"), std::string::npos) << bad.err;
}
