#include "backend/vulkan/vk_tuning.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "backend/vulkan/vulkan_options.h"
#include "core/error.h"

namespace vkllm {

namespace {

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// A flag: set and not "0".
bool flag(const char* name) {
  const char* v = get(name);
  return v && std::strcmp(v, "0") != 0;
}

std::optional<int64_t> integer(const char* name) {
  const char* v = get(name);
  if (!v) return std::nullopt;
  int64_t x = 0;
  const char* end = v + std::strlen(v);
  const auto [at, ec] = std::from_chars(v, end, x);
  if (ec != std::errc() || at != end) fail("{}={}: not an integer", name, v);
  return x;
}

void set_u32(const char* name, uint32_t& field, int64_t lo = 0, int64_t hi = 1 << 30) {
  if (const auto x = integer(name)) {
    if (*x < lo || *x > hi) fail("{}={}: must be in [{}, {}]", name, *x, lo, hi);
    field = static_cast<uint32_t>(*x);
  }
}

// A 0|1 switch.
void set_bool(const char* name, bool& field) {
  if (const auto x = integer(name)) {
    if (*x != 0 && *x != 1) fail("{}={}: must be 0 or 1", name, *x);
    field = *x == 1;
  }
}

void set_choice(const char* name, uint32_t& field, std::initializer_list<uint32_t> allowed) {
  if (const auto x = integer(name)) {
    for (uint32_t a : allowed)
      if (*x == a) {
        field = a;
        return;
      }
    fail("{}={}: must be one of {}", name, *x, fmt::format("{}", fmt::join(allowed, "|")));
  }
}

// A measurement switch: refused in a build without them.
bool measure_switch(const char* name) {
  if (!get(name)) return false;
  if (!kMeasureBuild)
    fail(
        "{} is a measurement switch, available only in a measurement build (the device-measure "
        "preset); this is a release build",
        name);
  return true;
}

}  // namespace

void read_environment(VulkanOptions& opt) {
  // Switches that measured no gain and are gone (docs/tuning.md has their figures): refused, so
  // that an old script does not measure the default while believing otherwise.
  for (const char* gone :
       {"VKLLM_ATT_KEYS", "VKLLM_GEMM_KC", "VKLLM_GEMM_W16", "VKLLM_LINEAR_MM", "VKLLM_ATTN_BQ",
        "VKLLM_ATT_ORDER", "VKLLM_FUSED_RPS", "VKLLM_FUSED_GROUPS", "VKLLM_CHAIN_MAXK",
        "VKLLM_CHAIN_PIPE", "VKLLM_CHAIN_DEPTH", "VKLLM_CHAIN_SPECIALIZE", "VKLLM_CHAIN_STAGES"})
    if (get(gone))
      fail("{} is no longer a switch (it measured no gain over the default: docs/tuning.md)", gone);
  opt.validation = opt.validation || flag("VKLLM_VALIDATION");
  opt.sync_validation = opt.validation && (opt.sync_validation || flag("VKLLM_SYNC_VALIDATION"));
  opt.no_int_dot = opt.no_int_dot || flag("VKLLM_NO_INT_DOT");
  opt.no_fp16 = opt.no_fp16 || flag("VKLLM_NO_FP16");
  opt.no_coopmat = opt.no_coopmat || flag("VKLLM_NO_COOPMAT");
  opt.no_fusion = opt.no_fusion || flag("VKLLM_NO_FUSION");
  opt.khr_coopmat = opt.khr_coopmat || flag("VKLLM_KHR_COOPMAT");
  opt.profile = opt.profile || flag("VKLLM_PROFILE");
  if (opt.device.empty())
    if (const char* e = get("VKLLM_DEVICE")) opt.device = e;

  Tuning& t = opt.tuning;
  t.chose_int_dot = t.chose_int_dot || get("VKLLM_NO_INT_DOT");
  t.chose_coopmat = t.chose_coopmat || get("VKLLM_NO_COOPMAT");
  t.chose_fusion = t.chose_fusion || get("VKLLM_NO_FUSION");
  if (const char* v = get("VKLLM_MATVEC_PARTS"))
    t.matvec_parts = std::string(v) == "auto" ? 0 : [&] {
      uint32_t p = 1;
      set_choice("VKLLM_MATVEC_PARTS", p, {1, 2, 4, 8});
      return p;
    }();
  set_u32("VKLLM_MATVEC_WG", t.matvec_wg, 0, 1024);
  if (const auto x = integer("VKLLM_MV")) t.mv = *x == 0 ? 0 : *x == 1 ? 1 : -1;
  set_u32("VKLLM_MV_DEPTH", t.mv_depth, 0, 16);
  set_choice("VKLLM_MV_BATCHES", t.mv_batches, {1, 2});
  set_u32("VKLLM_MV_GROUPS", t.mv_groups, 0, 65535);
  set_bool("VKLLM_MV_WSUM", t.mv_wsum_nibbles);
  set_choice("VKLLM_GEMM_TILE", t.gemm_tile, {32, 64, 128});
  set_choice("VKLLM_GEMM_ROWS", t.gemm_rows, {64, 128});
  set_bool("VKLLM_GEMM_WIDE", t.gemm_wide);
  set_u32("VKLLM_GEMM_FROM", t.gemm_from, 0, 16);
  set_u32("VKLLM_GEMM_ROWS_TO", t.gemm_rows_to, 16, 64);
  set_u32("VKLLM_GEMM_FEW_ROWS_TO", t.gemm_few_rows_to, 0, 64);
  set_bool("VKLLM_LINEAR_VEC8", t.linear_vec8);
  set_choice("VKLLM_ATTN_BK", t.attn_bk, {32, 64});
  set_choice("VKLLM_ATTN_RQ", t.attn_rq, {1, 2});
  set_bool("VKLLM_ATTN_PORTABLE", t.attn_portable);
  set_bool("VKLLM_ATTN_GQA", t.attn_gqa);
  if (const auto x = integer("VKLLM_ATTN_BATCH_GQ"))
    t.attn_batch_gq = *x == 0 ? 0 : *x == 1 ? 1 : -1;
  if (const char* v = get("VKLLM_FUSE")) t.fuse_all = std::string(v) == "all";
  if (const char* v = get("VKLLM_NO_FUSE")) {
    const std::string list = v;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      if (end > at) t.no_fuse.push_back(list.substr(at, end - at));
      at = end + 1;
    }
  }
  if (flag("VKLLM_NO_CHAIN")) t.chain = false;
  if (const auto x = integer("VKLLM_CHAIN_GROUPS")) {
    if (*x < -1 || *x > 65535) fail("VKLLM_CHAIN_GROUPS={}: must be -1 or in [0, 65535]", *x);
    t.chain_groups = static_cast<int>(*x);
  }
  if (const auto x = integer("VKLLM_CHAIN_ATT_UNTIL"))
    t.chain_att_until = static_cast<int>(std::clamp<int64_t>(*x, 0, INT32_MAX));
  set_choice("VKLLM_CHAIN_WG", t.chain_wg, {256, 512});
  if (const auto x = integer("VKLLM_CHAIN_ATT")) t.chain_att = *x == 0 ? 0 : *x == 1 ? 1 : -1;
  set_choice("VKLLM_CHAIN_UB", t.chain_ub, {1, 2});
  set_bool("VKLLM_CHAIN_DEAL", t.chain_deal);
  if (const auto x = integer("VKLLM_CHAIN_SPLIT_SYNC"))
    t.chain_split_sync = *x == 0 ? 0 : *x == 1 ? 1 : -1;
  set_u32("VKLLM_DECODE_BATCH", t.decode_batch, 1, 256);
  set_u32("VKLLM_CONSTRAINED_AHEAD", t.constrained_ahead, 1, 65536);
  if (get("VKLLM_FENCE_SPIN")) {
    uint32_t spin = 0;
    set_choice("VKLLM_FENCE_SPIN", spin, {0, 1});
    t.fence_spin = static_cast<int>(spin);
  }
  t.pipeline_stats = t.pipeline_stats || flag("VKLLM_PIPELINE_STATS");
  if (const auto x = integer("VKLLM_VK_MEMORY_BUDGET")) t.memory_budget = static_cast<uint64_t>(*x);
  if (const char* v = get("VKLLM_IGNORE_SELFTEST")) t.ignore_selftest = std::string(v) == "1";
  if (t.pipeline_cache.empty())
    if (const char* v = get("VKLLM_PIPELINE_CACHE")) t.pipeline_cache = v;

  if (measure_switch("VKLLM_GEMM_ABLATE")) set_u32("VKLLM_GEMM_ABLATE", t.gemm_ablate, 0, 63);
  if (measure_switch("VKLLM_ATT_MEASURE")) set_u32("VKLLM_ATT_MEASURE", t.att_measure, 0, 15);
  if (measure_switch("VKLLM_CHAIN_MEASURE"))
    t.chain_noload = std::string(get("VKLLM_CHAIN_MEASURE")) == "noload";
  if (measure_switch("VKLLM_CHAIN_CLOCK")) t.chain_clock = flag("VKLLM_CHAIN_CLOCK");
  if (measure_switch("VKLLM_TEST_CORRUPT_OP")) t.corrupt_op = get("VKLLM_TEST_CORRUPT_OP");
}

std::string Tuning::describe() const {
  const Tuning d;
  std::string s;
  auto add = [&](const char* name, const std::string& v) {
    s += (s.empty() ? "" : " ") + std::string(name) + "=" + v;
  };
  auto num = [&](const char* name, auto v, auto dv) {
    if (v != dv) add(name, fmt::format("{}", v));
  };
  num("matvec_parts", matvec_parts, d.matvec_parts);
  num("matvec_wg", matvec_wg, d.matvec_wg);
  num("mv", mv, d.mv);
  num("mv_depth", mv_depth, d.mv_depth);
  num("mv_batches", mv_batches, d.mv_batches);
  num("mv_groups", mv_groups, d.mv_groups);
  num("mv_wsum_nibbles", mv_wsum_nibbles, d.mv_wsum_nibbles);
  num("gemm_tile", gemm_tile, d.gemm_tile);
  num("gemm_rows", gemm_rows, d.gemm_rows);
  num("gemm_wide", gemm_wide, d.gemm_wide);
  num("gemm_from", gemm_from, d.gemm_from);
  num("gemm_rows_to", gemm_rows_to, d.gemm_rows_to);
  num("gemm_few_rows_to", gemm_few_rows_to, d.gemm_few_rows_to);
  num("linear_vec8", linear_vec8, d.linear_vec8);
  num("attn_bk", attn_bk, d.attn_bk);
  num("attn_rq", attn_rq, d.attn_rq);
  num("attn_portable", attn_portable, d.attn_portable);
  num("attn_gqa", attn_gqa, d.attn_gqa);
  num("attn_batch_gq", attn_batch_gq, d.attn_batch_gq);
  num("fuse_all", fuse_all, d.fuse_all);
  if (!no_fuse.empty()) add("no_fuse", fmt::format("{}", fmt::join(no_fuse, ",")));
  num("chain", chain, d.chain);
  if (chain_groups) add("chain_groups", std::to_string(*chain_groups));
  if (chain_att_until) add("chain_att_until", std::to_string(*chain_att_until));
  num("chain_wg", chain_wg, d.chain_wg);
  num("chain_att", chain_att, d.chain_att);
  num("chain_ub", chain_ub, d.chain_ub);
  num("chain_deal", chain_deal, d.chain_deal);
  num("chain_split_sync", chain_split_sync, d.chain_split_sync);
  num("decode_batch", decode_batch, d.decode_batch);
  num("constrained_ahead", constrained_ahead, d.constrained_ahead);
  if (fence_spin != d.fence_spin) add("fence_spin", std::to_string(fence_spin));
  num("pipeline_stats", pipeline_stats, d.pipeline_stats);
  num("memory_budget", memory_budget, d.memory_budget);
  num("ignore_selftest", ignore_selftest, d.ignore_selftest);
  num("gemm_ablate", gemm_ablate, d.gemm_ablate);
  num("att_measure", att_measure, d.att_measure);
  num("chain_noload", chain_noload, d.chain_noload);
  num("chain_clock", chain_clock, d.chain_clock);
  if (!corrupt_op.empty()) add("corrupt_op", corrupt_op);
  return s.empty() ? "defaults" : s;
}

}  // namespace vkllm
