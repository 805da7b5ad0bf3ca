// The public API (include/vkllm/vkllm.h) on a tiny Qwen3 twin artifact. The session logic is the
// same on every backend, so most tests run on the CPU interpreter (fast); the Vulkan tests
// (lavapipe in CI, Khronos validation layer on) cover what is Vulkan's own: several sessions on one
// upload of the weights, a smaller KV cache, device errors. The references are independent runs:
// the CPU interpreter, a fresh session, one longer call, the tokenizer's own decode.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/vulkan/vk_context.h"
#include "export/exporter.h"
#include "hf/synth.h"
#include "testutil/tiny_checkpoint.h"
#include "vkllm/vkllm.h"

namespace vkllm {
namespace {

const std::string kPrompt = "The capital of France is";

GenerationOptions greedy(int n) {
  GenerationOptions g;
  g.max_new_tokens = n;
  g.stop_at_eos = false;  // a fixed number of tokens whatever the random twin says
  return g;
}

// Two sessions of `m` with their calls interleaved and each continued once (n tokens per call),
// and what a CPU session gives for the same prompts in single calls of 2n tokens (ref_a, ref_b);
// sa is the first session (its stats and model).
struct Interleaved {
  std::vector<int32_t> a, b, ref_a, ref_b;
  std::unique_ptr<Session> sa;
};
Interleaved interleave(const std::shared_ptr<Model>& m, const std::shared_ptr<Model>& cpu, int n) {
  const std::string other = "Once upon a time";
  Interleaved r;
  Session ref(cpu);
  r.ref_a = ref.generate(kPrompt, greedy(2 * n));
  ref.reset();
  r.ref_b = ref.generate(other, greedy(2 * n));
  r.sa = std::make_unique<Session>(m);
  Session b(m);
  r.a = r.sa->generate(kPrompt, greedy(n));
  r.b = b.generate(other, greedy(n));
  const auto a2 = r.sa->generate(std::vector<int32_t>{}, greedy(n));  // continue
  const auto b2 = b.generate(std::vector<int32_t>{}, greedy(n));
  r.a.insert(r.a.end(), a2.begin(), a2.end());
  r.b.insert(r.b.end(), b2.begin(), b2.end());
  return r;
}

class Api : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("VKLLM_VALIDATION", "1", 1);  // every Vulkan model below runs under the validation layer
    messages_ = vk::validation_message_count();
    dir_ = testutil::temp_dir("api");
    SynthOptions so;
    so.preset = "tiny-qwen3";
    so.out_dir = dir_ + "/twin";
    so.threads = 2;
    synth_write(so);
    RecipeOptions ro;
    ro.recipe = "quantized-8da4w-fp16-embedding";
    ro.max_context = 64;
    artifact_ = dir_ + "/twin.vkllm";
    export_checkpoint(so.out_dir, artifact_, ro);
    ModelOptions cpu;
    cpu.backend = "cpu";
    cpu_ = Model::open(artifact_, cpu);
    ModelOptions gpu;
    gpu.context_length = 16;  // fewer KV rows than the artifact's 64
    gpu_ = Model::open(artifact_, gpu);
  }
  static void TearDownTestSuite() {
    gpu_.reset();
    cpu_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void TearDown() override {
    EXPECT_EQ(vk::validation_message_count(), messages_) << "Vulkan validation reported messages";
  }

  static inline std::string dir_, artifact_;
  static inline std::shared_ptr<Model> gpu_, cpu_;
  static inline uint64_t messages_ = 0;
};

TEST_F(Api, ModelInfo) {
  const ModelInfo& i = gpu_->info();
  EXPECT_EQ(i.architecture, "qwen3");
  EXPECT_EQ(i.recipe, "quantized-8da4w-fp16-embedding");
  EXPECT_EQ(i.backend, "vulkan");
  EXPECT_FALSE(i.device_name.empty());
  EXPECT_NE(i.device_name, "vulkan");  // the device's own name
  EXPECT_EQ(cpu_->info().device_name, "cpu");
  EXPECT_EQ(i.context_length, 16);
  EXPECT_EQ(cpu_->info().context_length, 64);
  EXPECT_GT(i.vocab_size, 150000);
  EXPECT_FALSE(i.eos_ids.empty());
  EXPECT_EQ(i.weight_bytes, cpu_->info().weight_bytes);
  EXPECT_GT(i.weight_bytes, 0u);
  // One session's KV cache: K and V, every layer, kv_heads x head_dim values per row, in fp16
  // (this recipe), as many rows as the context (the twin's config.json, not the program).
  std::ifstream f(dir_ + "/twin/config.json");
  const auto cfg = nlohmann::json::parse(f);
  const uint64_t per_row = 2ull * cfg["num_hidden_layers"].get<uint64_t>() *
                           cfg["num_key_value_heads"].get<uint64_t>() *
                           cfg["head_dim"].get<uint64_t>() * 2;
  EXPECT_EQ(i.kv_cache_bytes, per_row * 16);
  EXPECT_EQ(cpu_->info().kv_cache_bytes, per_row * 64);
}

TEST_F(Api, TokenizerAccess) {
  const std::vector<int32_t> ids = cpu_->encode(kPrompt);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(cpu_->decode(ids), kPrompt);
  EXPECT_EQ(gpu_->encode(kPrompt), ids);
  const std::string chat = cpu_->chat_prompt("Hi there");
  EXPECT_EQ(chat, "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  const std::string two = cpu_->chat_prompt({{"system", "Be brief."}, {"user", "Hi"}});
  EXPECT_EQ(two,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Special tokens in the chat text encode as single ids.
  const auto chat_ids = cpu_->encode(chat);
  EXPECT_EQ(cpu_->decode({chat_ids.front()}), "<|im_start|>");
}

// Two sessions on one Vulkan model (one upload of the weights, a KV cache each, 16 rows), their
// calls interleaved and continued, give the CPU interpreter's greedy tokens for each prompt.
TEST_F(Api, VulkanSessionsShareOneModel) {
  const Interleaved r = interleave(gpu_, cpu_, 2);
  EXPECT_EQ(r.a, r.ref_a);
  EXPECT_EQ(r.b, r.ref_b);
  EXPECT_EQ(r.sa->model(), gpu_);
}

TEST_F(Api, CallbackStopsGeneration) {
  Session full(cpu_);
  const auto reference = full.generate(kPrompt, greedy(8));
  ASSERT_EQ(reference.size(), 8u);

  Session s(cpu_);
  std::vector<int32_t> seen;
  std::string text;
  const auto out = s.generate(kPrompt, greedy(8), [&](int32_t id, const std::string& piece) {
    if (id >= 0) seen.push_back(id);
    text += piece;
    return seen.size() < 3;  // stop after the third token
  });
  EXPECT_EQ(out, std::vector<int32_t>(reference.begin(), reference.begin() + 3));
  EXPECT_EQ(seen, out);
  EXPECT_EQ(text, cpu_->decode(out));  // the pieces (and the tail) are the decoded text
  EXPECT_TRUE(s.stats().stopped_by_callback);
  EXPECT_FALSE(s.stats().stopped_by_eos);
  EXPECT_EQ(s.stats().generated_tokens, 3);
}

TEST_F(Api, Stats) {
  Session s(cpu_);
  const auto prompt = cpu_->encode(kPrompt);
  EXPECT_EQ(s.context_tokens(), 0);
  const auto out = s.generate(prompt, greedy(6));
  const GenerationStats& st = s.stats();
  EXPECT_EQ(st.prompt_tokens, static_cast<int>(prompt.size()));
  EXPECT_EQ(st.generated_tokens, 6);
  EXPECT_EQ(out.size(), 6u);
  EXPECT_GT(st.prefill_ms, 0);
  EXPECT_GT(st.decode_ms, 0);
  EXPECT_GT(st.prefill_tok_s(), 0);
  EXPECT_GT(st.decode_tok_s(), 0);
  EXPECT_FALSE(st.stopped_by_callback);
  EXPECT_FALSE(st.stopped_by_eos);
  EXPECT_EQ(s.context_tokens(), static_cast<int>(prompt.size()) + 6);
  // Zero new tokens: only the prompt is fed.
  Session z(cpu_);
  EXPECT_TRUE(z.generate(prompt, greedy(0)).empty());
  EXPECT_EQ(z.stats().generated_tokens, 0);
  EXPECT_EQ(z.context_tokens(), static_cast<int>(prompt.size()));
}

// Two sessions on one model keep separate contexts: interleaved calls give what each prompt gives
// alone, and a session continues across calls exactly as one longer call.
TEST_F(Api, TwoSessionsOnOneModel) {
  const Interleaved r = interleave(cpu_, cpu_, 4);
  EXPECT_EQ(r.a, r.ref_a);
  EXPECT_EQ(r.b, r.ref_b);
  EXPECT_EQ(r.sa->stats().prompt_tokens, 1);  // the last token of the first call
  EXPECT_EQ(r.sa->model(), cpu_);
}

// The continuation with new prompt text equals one call on the concatenated ids.
TEST_F(Api, ContinuationFeedsTheLastToken) {
  const auto p1 = cpu_->encode(kPrompt);
  const auto p2 = cpu_->encode(" and then");
  Session s(cpu_);
  const auto first = s.generate(p1, greedy(3));
  const auto second = s.generate(p2, greedy(4));
  std::vector<int32_t> whole = p1;
  whole.insert(whole.end(), first.begin(), first.end());
  whole.insert(whole.end(), p2.begin(), p2.end());
  Session t(cpu_);
  EXPECT_EQ(t.generate(whole, greedy(4)), second);
}

TEST_F(Api, ResetClearsTheContext) {
  Session s(cpu_);
  const auto first = s.generate(kPrompt, greedy(5));
  s.generate(std::string(" more text"), greedy(3));
  s.reset();
  EXPECT_EQ(s.context_tokens(), 0);
  EXPECT_EQ(s.generate(kPrompt, greedy(5)), first);
  s.reset();
  EXPECT_THROW(s.generate(std::vector<int32_t>{}, greedy(2)), Error);  // nothing to continue
}

TEST_F(Api, ContextLength) {
  ModelOptions o;
  o.backend = "cpu";
  o.context_length = 16;
  auto m = Model::open(artifact_, o);
  EXPECT_EQ(m->info().context_length, 16);
  Session s(m);
  // Fewer KV rows do not change the tokens.
  Session full(cpu_);
  EXPECT_EQ(s.generate(kPrompt, greedy(6)), full.generate(kPrompt, greedy(6)));
  // A prompt longer than the context is an Error naming the sizes; the session stays usable.
  s.reset();
  const std::vector<int32_t> long_prompt(20, cpu_->encode("a").front());
  try {
    s.generate(long_prompt, greedy(1));
    FAIL() << "a 20-token prompt fit a 16-token context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("20 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.generate(kPrompt, greedy(2)).size(), 2u);
  // Generation stops when the context is full: the token after the last row is still returned.
  s.reset();
  const int prompt = static_cast<int>(cpu_->encode(kPrompt).size());
  EXPECT_EQ(static_cast<int>(s.generate(kPrompt, greedy(40)).size()), 16 - prompt + 1);
  EXPECT_THROW(s.generate(std::vector<int32_t>{}, greedy(1)), Error);  // full
  o.context_length = 65;
  EXPECT_THROW(Model::open(artifact_, o), Error);
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no Error (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST_F(Api, ErrorsNameTheCause) {
  const std::string missing = dir_ + "/no-such-model.vkllm";
  expect_error([&] { Model::open(missing); }, missing);
  const std::string junk = dir_ + "/junk.vkllm";
  std::ofstream(junk) << "this is not an artifact";
  expect_error([&] { Model::open(junk); }, junk);
  ModelOptions dev;
  dev.device = "no-such-gpu";
  expect_error([&] { Model::open(artifact_, dev); }, "no-such-gpu");
  ModelOptions be;
  be.backend = "tpu";
  expect_error([&] { Model::open(artifact_, be); }, "tpu");
  Session s(cpu_);
  expect_error([&] { s.generate(std::vector<int32_t>{cpu_->info().vocab_size}, greedy(1)); },
               "outside the vocabulary");
  expect_error([&] { s.generate(kPrompt, greedy(-1)); }, "max_new_tokens");
  expect_error([] { Session(nullptr); }, "model");
}

}  // namespace
}  // namespace vkllm
