// Constrained greedy decoding on the Vulkan backend with several steps a submit (generate()'s run
// ahead: 1 step after a refused argmax, then 2, 4, ... as the allowed run grows): the tokens must
// be those of one step a submit, on several schemas and json_object, with refused argmaxes at
// different steps of a submit (the rest of the submit dropped, the refused step's logits read or
// its step run again); every reply parses and validates with ajv (tests/serve/validate_json.mjs).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/vulkan/vulkan_executor.h"
#include "e2e/process.h"
#include "grammar/grammar.h"
#include "runtime/generate.h"
#include "selftest/toy_model.h"
#include "testutil/tiny_checkpoint.h"
#include "vk_harness.h"

namespace vkllm::test {
namespace {

using toy::build_toy;
using toy::Emb;
using toy::Toy;

// An executor that passes everything to the Vulkan one and records where the constraint's
// refused argmaxes fell: step k of a submit of n (k = n - 1: read with last_logits; else the step
// ran again with its logits read).
class Recording final : public Executor {
 public:
  explicit Recording(std::unique_ptr<Executor> e) : e_(std::move(e)) {}
  int32_t forward(const int32_t* ids, int T, int pos, float* logits) override {
    if (logits && T == 1 && n_ > 0) refusals.insert({pos - at_, n_});
    if (T > 1) n_ = 0;  // the prefill
    return e_->forward(ids, T, pos, logits);
  }
  void last_logits(float* out) override {
    if (n_ > 0) refusals.insert({n_ - 1, n_});
    e_->last_logits(out);
  }
  const char* name() const override { return e_->name(); }
  int greedy_batch() const override { return e_->greedy_batch(); }
  int constrained_ahead() const override { return e_->constrained_ahead(); }
  void decode_greedy(int32_t first, int pos, int n, int32_t* out) override {
    at_ = pos;
    n_ = n;
    e_->decode_greedy(first, pos, n, out);
  }
  std::set<std::pair<int, int>> refusals;  // (k, n)

 private:
  std::unique_ptr<Executor> e_;
  int at_ = 0, n_ = 0;
};

TEST(VulkanConstrained, RunningAheadGivesTheTokensOfOneStepASubmit) {
  toy::ToyConfig cfg{toy::Lin::A8W4, Emb::Q4};
  cfg.max_ctx = 192;
  Toy toy = build_toy(cfg, 21);
  const std::vector<std::vector<int32_t>> prompts = {{3, 14, 15, 92, 65}, {7, 71, 40}};
  // Token i is one byte of kBytes (the last id eos): letters keep strings going, the grammar
  // refuses them where a quote, a comma or a bracket must come.
  auto index = byte_token_index("abcdefghijklmnopqrstuvwxyz0123456789\" {}[]:,.-eEtrufalsn");
  const int32_t eos = static_cast<int32_t>(toy::kVocab - 1);
  const std::vector<nlohmann::json> schemas = {
      nullptr,  // json_object, after each prompt
      nullptr,
      nlohmann::json::parse(R"({"type": "object", "properties": {"text": {"type": "string",
          "minLength": 40, "maxLength": 60}}, "required": ["text"]})"),
      nlohmann::json::parse(R"({"type": "array", "items": {"type": "string", "minLength": 6,
          "maxLength": 14}, "minItems": 3, "maxItems": 5})"),
      nlohmann::json::parse(R"({"type": "object", "properties": {
          "id": {"type": "integer", "minimum": 0, "maximum": 9999},
          "kind": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
          "note": {"type": "string", "minLength": 12, "maxLength": 30}},
          "required": ["id", "kind", "ok", "note"], "additionalProperties": false})"),
      nlohmann::json::parse(R"({"type": "array", "items": {"type": "object", "properties":
          {"k": {"type": "string", "minLength": 10, "maxLength": 12}}, "required": ["k"],
          "additionalProperties": false}, "minItems": 2, "maxItems": 3})"),
  };
  // Greedy steps a submit and the run ahead's ratio (0: the default): one step a submit is the
  // reference; ratio 1 doubles the submit after each one whose argmaxes were all allowed.
  const std::vector<std::pair<uint32_t, uint32_t>> configs = {{1, 0}, {16, 1}, {16, 0}};
  std::map<std::pair<uint32_t, uint32_t>, std::shared_ptr<LoadedProgram>> loaded;
  for (const auto& c : configs) {
    VulkanOptions o = validated();
    o.tuning.decode_batch = c.first;
    o.tuning.constrained_ahead = c.second;
    loaded[c] = load_vulkan_program(toy.p, toy.w, o);
  }
  nlohmann::json replies = nlohmann::json::array();
  std::set<std::pair<int, int>> refusals;  // over the replies run ahead with ratio 1
  int refused = 0, wasted = 0;
  for (size_t s = 0; s < schemas.size(); ++s) {
    const auto grammar = schemas[s].is_null() ? grammar::any_json_object()
                                              : grammar::compile_json_schema(schemas[s]);
    std::vector<int32_t> ref;
    for (const auto& c : configs) {
      Recording ex(loaded[c]->make_executor());
      grammar::Matcher m(grammar, index);
      Sampler sampler{SamplingParams{}};
      GenerateStats st;
      const auto& prompt = prompts[std::min(s, prompts.size() - 1)];
      const auto out = generate(ex, toy.p, prompt, 150, sampler, false, {eos}, 0, nullptr, &st, &m);
      SCOPED_TRACE("schema " + std::to_string(s) + ", " + std::to_string(c.first) +
                   " steps a submit, ratio " + std::to_string(c.second));
      EXPECT_TRUE(m.complete());
      if (c.first == 1) {
        ref = out;
        std::string text;
        for (int32_t t : out) text += index->bytes(t);
        replies.push_back(
            {{"schema", schemas[s].is_null() ? nlohmann::json{{"type", "object"}} : schemas[s]},
             {"text", text}});
        std::printf("schema %zu: %zu tokens, %d refused, %d masked: %s\n", s, out.size(),
                    st.refused_steps, st.masked_steps, text.c_str());
        EXPECT_EQ(st.wasted_steps, 0);
        continue;
      }
      EXPECT_EQ(out, ref);
      EXPECT_LE(st.decode_submits, static_cast<int>(out.size()) + st.wasted_steps);
      std::printf("  %u steps a submit, ratio %u: %d submits, %d wasted steps\n", c.first, c.second,
                  st.decode_submits, st.wasted_steps);
      if (c.second == 1) {
        refusals.insert(ex.refusals.begin(), ex.refusals.end());
        refused += st.refused_steps;
        wasted += st.wasted_steps;
      }
    }
  }
  // Refused argmaxes at the first step of a submit of several, inside one, and at its last (the
  // logits read without running the step again), and steps dropped after them.
  std::string where;
  std::set<int> ks;
  bool first = false, inside = false, last = false;
  for (const auto& [k, n] : refusals) {
    where += " " + std::to_string(k) + "/" + std::to_string(n);
    if (n < 2) continue;
    ks.insert(k);
    first |= k == 0;
    inside |= k > 0 && k < n - 1;
    last |= k == n - 1;
  }
  std::printf("refused at step/of a submit:%s\n", where.c_str());
  EXPECT_GT(refused, 0);
  EXPECT_GT(wasted, 0);
  EXPECT_TRUE(first && inside && last) << where;
  EXPECT_GE(ks.size(), 3u) << where;

  const std::string dir = testutil::temp_dir("vkconstrained"), path = dir + "/replies.json";
  std::ofstream(path) << replies.dump();
  ChildSpec node;
  node.argv = {"/usr/bin/env", "node",
               std::string(VKLLM_SOURCE_DIR) + "/tests/serve/validate_json.mjs", path};
  node.stdout_path = path + ".out";
  node.timeout_s = 60;
  const ChildResult r = run_child(node);
  std::ifstream in(node.stdout_path);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(r.exit_code, 0) << r.describe() << "\n" << log;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vkllm::test
