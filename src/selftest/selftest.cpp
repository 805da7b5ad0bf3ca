#include "selftest/selftest.h"

#include <chrono>
#include <memory>

#include "artifact/reader.h"
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_probe.h"
#include "backend/vulkan/vk_verdict.h"
#include "backend/vulkan/vulkan_executor.h"
#include "core/error.h"
#include "runtime/agreement.h"
#include "selftest/toy_model.h"
#include "tokenizer/tokenizer.h"

namespace vkllm {
namespace {

using toy::Emb;
using toy::Lin;

// The toys, one storage combination each (the recipes' combinations of linears, embedding,
// activations and cache, and the architectures' q/k norms, partial long rope and q/k/v biases).
struct ToyRow {
  const char* name;
  toy::ToyConfig cfg;
};
const ToyRow kToys[] = {
    {"fp32 linears, fp32 embedding", {}},
    {"fp16 linears, q4 embedding, q/k norms, partial long rope",
     {Lin::F16, Emb::Q4, DType::F16, DType::F32, true, true}},
    {"int4 weight-only linears", {Lin::Q4W, Emb::F32}},
    {"8da4w linears, q4 embedding, q/k/v biases",
     {Lin::A8W4, Emb::Q4, DType::F32, DType::F32, false, false, 48, 96, nullptr, 64, 16, true}},
    // (Head dim 32: the cooperative-matrix prefill attention where the device has it.)
    {"8da4w linears, fp16 activations, cache and embedding, head dim 32",
     {Lin::A8W4, Emb::F16, DType::F16, DType::F16, false, false, 48, 96, nullptr, 64, 32}},
};

// A prompt of 20 tokens (the tiled prefill GEMM takes forwards of 16 or more).
constexpr int kPromptTokens = 20;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One variant: the device's greedy decoding judged by the CPU reference on the same program.
SelftestLine run_variant(const std::string& name, const std::string& path, const Program& p,
                         const WeightSource& w, const VulkanOptions& vo,
                         const std::vector<int32_t>& prompt, const AgreementOptions& ao) {
  SelftestLine line{name, path};
  line.max_nmse = ao.bounds.max_nmse;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t msgs = vk::validation_message_count();
  try {
    auto gpu = make_vulkan_executor(p, w, vo);
    auto cpu = make_cpu_executor(p, w), cpu2 = make_cpu_executor(p, w);
    const int64_t vocab = p.tensors[p.logits].shape.back();
    const Agreement g = check_agreement(*gpu, *cpu, cpu2.get(), prompt, vocab, ao);
    line.ok = g.ok;
    line.reason = g.reason;
    line.steps = g.steps;
    line.exact = g.exact;
    line.worst_nmse = g.worst_nmse;
  } catch (const std::exception& e) {
    line.ok = false;
    line.reason = e.what();
  }
  if (line.ok && vk::validation_message_count() != msgs) {
    line.ok = false;
    line.reason = "the Vulkan validation layer reported messages";
  }
  line.seconds = seconds_since(t0);
  return line;
}

}  // namespace

bool SelftestReport::ok() const {
  if (lines.empty()) return false;
  for (const auto& l : lines)
    if (!l.ok) return false;
  return true;
}

nlohmann::json SelftestReport::to_json() const {
  nlohmann::json v = nlohmann::json::array();
  for (const auto& l : lines)
    v.push_back({{"name", l.name},
                 {"path", l.path},
                 {"ok", l.ok},
                 {"steps", l.steps},
                 {"exact", l.exact},
                 {"worst_logits_nmse", l.worst_nmse},
                 {"max_logits_nmse", l.max_nmse},
                 {"reason", l.reason},
                 {"seconds", l.seconds}});
  return {{"ok", ok()},
          {"device", device},
          {"driver", driver},
          {"vkllm", vkllm_version},
          {"subgroup_size", subgroup_size},
          {"int8_dot_product", int_dot},
          {"cooperative_matrix", coopmat},
          {"variants", v},
          {"wrong", wrong},
          {"verdict", verdict_path}};
}

SelftestReport run_selftest(const SelftestOptions& opt) {
  VulkanOptions base;
  base.device = opt.device;
  base.validation = opt.validation;
  base.selftest_verdict = false;  // every variant, whatever an earlier verdict said
  // The optional paths are chosen per variant below, not by the caller's environment.
  {
    VulkanOptions env;
    read_environment(env);
    for (const auto& [chosen, name] : {std::pair{env.tuning.chose_int_dot, "VKLLM_NO_INT_DOT"},
                                       {env.tuning.chose_coopmat, "VKLLM_NO_COOPMAT"},
                                       {env.tuning.chose_fusion, "VKLLM_NO_FUSION"}})
      if (chosen) fail("vkllm selftest: unset {} (the selftest runs each path itself)", name);
  }
  SelftestReport rep;
  vk::DeviceInfo info;
  SelftestLine layout{"subgroup layout", "what the kernels assume"};
  {
    const auto t0 = std::chrono::steady_clock::now();
    vk::Context ctx(base);
    info = ctx.info();
    layout.ok = true;
    for (uint32_t wg : {64u, 256u}) {
      if (wg > info.max_wg_size) continue;
      const vk::SubgroupLayout s = vk::probe_subgroups(ctx, wg);
      if (!s.full() || s.reported_size != info.subgroup_size) {
        layout.ok = false;
        layout.reason = "partial or misnumbered subgroups: " + s.describe();
      }
    }
    layout.seconds = seconds_since(t0);
  }
  rep.device = info.name;
  rep.driver = info.driver;
  rep.vkllm_version = VKLLM_VERSION_STRING;
  rep.subgroup_size = info.subgroup_size;
  rep.int_dot = info.int_dot;
  rep.coopmat = info.coopmat_int8;

  auto add = [&](SelftestLine l) {
    if (opt.on_line) opt.on_line(l);
    rep.lines.push_back(std::move(l));
  };
  add(layout);
  std::vector<int32_t> prompt(kPromptTokens);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 37 + 11) % toy::kVocab);
  bool wrong_int_dot = false, wrong_coopmat = false, wrong_fusion = false;
  unsigned seed = 101;
  for (const ToyRow& row : kToys) {
    const toy::ToyConfig& cfg = row.cfg;
    const bool f16 = cfg.act == DType::F16 || cfg.cache == DType::F16 || cfg.lin == Lin::F16 ||
                     cfg.emb == Emb::F16;
    if (f16 && !info.storage16) continue;  // fp16 recipes cannot run here at all (load says so)
    const toy::Toy t = toy::build_toy(cfg, seed++);
    AgreementOptions ao;
    ao.max_new_tokens = opt.decode_steps;
    ao.bounds = agreement_bounds(toy::toy_recipe(cfg));
    auto variant = [&](const std::string& path, VulkanOptions vo) {
      add(run_variant(row.name, path, t.p, t.w, vo, prompt, ao));
      return rep.lines.back().ok;
    };
    const bool ok = variant("default", base);
    const bool a8 = cfg.lin == Lin::A8W4;
    if (a8 && info.int_dot) {
      VulkanOptions vo = base;
      vo.no_int_dot = true;
      wrong_int_dot = wrong_int_dot || (variant("portable int8 dot", vo) && !ok);
    }
    if ((a8 || (cfg.cache == DType::F16 && info.coopmat_f16)) && info.coopmat_int8) {
      VulkanOptions vo = base;
      vo.no_coopmat = true;
      wrong_coopmat = wrong_coopmat || (variant("prefill without cooperative matrices", vo) && !ok);
    }
    {
      VulkanOptions vo = base;
      vo.no_fusion = true;
      wrong_fusion = wrong_fusion || (variant("unfused", vo) && !ok);
    }
    if (a8 && cfg.emb == Emb::Q4) {
      VulkanOptions vo = base;
      vo.max_tokens = 4;
      variant("prefill in chunks of 4", vo);
    }
  }

  if (!opt.artifact.empty()) {
    const ArtifactReader r(opt.artifact);
    if (!r.has_file("tokenizer.json"))
      fail("{}: the artifact embeds no tokenizer.json", opt.artifact);
    const Tokenizer tok = Tokenizer::from_text(
        std::string(r.file("tokenizer.json")),
        r.has_file("tokenizer_config.json") ? std::string(r.file("tokenizer_config.json")) : "{}",
        opt.artifact);
    const auto ids =
        tok.encode("The quick brown fox jumps over the lazy dog. Once upon a time,", false);
    AgreementOptions ao;
    ao.max_new_tokens = std::min<int>(
        2 * opt.decode_steps, std::max(1, r.program().max_ctx - static_cast<int>(ids.size())));
    ao.bounds = agreement_bounds(r.recipe_name());
    ao.eos_ids.assign(r.desc().eos_ids.begin(), r.desc().eos_ids.end());
    const std::string base_name = opt.artifact.substr(opt.artifact.rfind('/') + 1);
    add(run_variant(base_name + " (" + r.recipe_name() + ")", "verify --agree", r.program(), r,
                    base, ids, ao));
  }

  if (!layout.ok) rep.wrong.push_back("subgroups");
  if (wrong_int_dot) rep.wrong.push_back("int8-dot");
  if (wrong_coopmat) rep.wrong.push_back("coopmat");
  if (wrong_fusion) rep.wrong.push_back("fusion");
  if (opt.write_verdict)
    rep.verdict_path = vk::write_verdict(
        info, {wrong_int_dot, wrong_coopmat, wrong_fusion, !layout.ok}, rep.to_json().dump());
  return rep;
}

}  // namespace vkllm
