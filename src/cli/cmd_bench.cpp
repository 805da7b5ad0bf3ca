// vkllm bench -m ARTIFACT [-p 512] [-n 128] [-r 5] [--output md|json|csv], in the style of
// llama-bench: load time, then prompt processing (pp: one forward over p tokens) and token
// generation (tg: n tokens decoded one at a time after a one-token prompt, or after a d-token one
// with -d d, like llama-bench's -d) measured separately,
// after one warm-up of each, as the median and spread over r repetitions. Uses only the public
// API (include/vkllm/vkllm.h), so it measures what an embedding application gets.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/load_stages.h"
#include "core/error.h"
#include "runtime/model_impl.h"
#include "vkllm/vkllm.h"
#ifdef VKLLM_WITH_VULKAN
#include "backend/vulkan/vk_context.h"
#include "backend/vulkan/vk_physics.h"
#include "backend/vulkan/vulkan_executor.h"
#endif

namespace vkllm::cli {

namespace {

struct BenchArgs {
  std::string model, backend = "vulkan", device, output = "md";
  int prompt = 512, gen = 128, reps = 5, depth = 0;
  bool physics = false, gemm = false, matvec = false;
  uint32_t groups = 0;
  std::vector<int> parallel;  // --parallel: batch sizes of the aggregate decode measurement
};

struct Series {
  std::vector<double> v;  // tok/s per repetition
  double median() const {
    auto s = v;
    std::sort(s.begin(), s.end());
    return s.empty()      ? 0
           : s.size() % 2 ? s[s.size() / 2]
                          : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
  }
  double stddev() const {
    if (v.size() < 2) return 0;
    double m = 0, q = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    for (double x : v) q += (x - m) * (x - m);
    return std::sqrt(q / static_cast<double>(v.size() - 1));
  }
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// p deterministic prompt tokens: an ordinary English text encoded and repeated.
std::vector<int32_t> prompt_tokens(const Model& m, int p) {
  const auto unit = m.encode(
      "The quick brown fox jumps over the lazy dog while the committee reviews the budget. ");
  if (unit.empty()) fail("the model's tokenizer encodes the benchmark text to nothing");
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < p) ids.insert(ids.end(), unit.begin(), unit.end());
  ids.resize(static_cast<size_t>(p));
  return ids;
}

#ifdef VKLLM_WITH_VULKAN
// --physics: the device's fixed costs and bandwidths (vk_physics.h), no model.
void run_physics(const BenchArgs& a) {
  VulkanOptions vo;
  vo.device = a.device;
  vk::Context ctx(vo);
  vk::PhysicsOptions po;
  po.groups = a.groups;
  po.repeats = a.reps;
  const auto rows = vk::measure_physics(ctx, po);
  nlohmann::json j = {{"device", ctx.info().name},
                      {"driver", ctx.info().driver},
                      {"compute_units", ctx.info().compute_units},
                      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["rows"].push_back({{"what", r.what},
                         {"groups", r.groups},
                         {"threads", r.threads},
                         {"bytes", r.bytes},
                         {"us", r.us},
                         {"gb_s", r.gb_s}});
  if (a.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const bool csv = a.output == "csv";
  std::printf(csv ? "what,groups,threads,bytes,us,gb_s\n"
                  : "device: %s (%s), compute units %u\n\n| what | groups x threads | MiB | us | "
                    "GB/s |\n|---|---|---|---|---|\n",
              ctx.info().name.c_str(), ctx.info().driver.c_str(), ctx.info().compute_units);
  for (const auto& r : rows)
    if (csv)
      std::printf("\"%s\",%u,%u,%llu,%.3f,%.1f\n", r.what.c_str(), r.groups, r.threads,
                  static_cast<unsigned long long>(r.bytes), r.us, r.gb_s);
    else
      std::printf("| %s | %u x %u | %.0f | %.3f | %.0f |\n", r.what.c_str(), r.groups, r.threads,
                  static_cast<double>(r.bytes) / 1048576.0, r.us, r.gb_s);
}

// --gemm: the prefill GEMM's ceiling and linear_8da4w's tiled GEMM at prefill shapes, no model.
void run_gemm(const BenchArgs& a) {
  VulkanOptions vo;
  vo.device = a.device;
  vk::Context ctx(vo);
  const auto rows = vk::measure_gemm(ctx, a.reps);
  // coopmat_khr: whether the KHR ceiling rows ("mma peak (KHR), ...") ran on this device.
  nlohmann::json j = {{"device", ctx.info().name},
                      {"driver", ctx.info().driver},
                      {"coopmat_khr", ctx.use_coopmat_khr()},
                      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["rows"].push_back(
        {{"what", r.what}, {"M", r.M}, {"N", r.N}, {"K", r.K}, {"us", r.us}, {"tops", r.tops}});
  if (a.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const bool csv = a.output == "csv";
  std::printf(csv ? "what,M,N,K,us,tops\n"
                  : "device: %s (%s)\n\n| what | rows M | tokens N | K | us | TOPS |\n"
                    "|---|---|---|---|---|---|\n",
              ctx.info().name.c_str(), ctx.info().driver.c_str());
  for (const auto& r : rows)
    std::printf(csv ? "\"%s\",%u,%u,%u,%.3f,%.2f\n" : "| %s | %u | %u | %u | %.2f | %.1f |\n",
                r.what.c_str(), r.M, r.N, r.K, r.us, r.tops);
}

// --matvec: the decode mat-vec kernels' GB/s at the three models' shapes, no model. `agrees`: a
// streamed linear_8da4w_mv has matvec_decode's bits; linear_q4w_mv's output is within NMSE 1e-10
// of the old linear_q4w's (their sums run in different orders).
void run_matvec(const BenchArgs& a) {
  VulkanOptions vo;
  vo.device = a.device;
  vk::Context ctx(vo);
  const auto rows = vk::measure_matvec(ctx, a.reps);
  nlohmann::json j = {{"device", ctx.info().name},
                      {"driver", ctx.info().driver},
                      {"rows", nlohmann::json::array()}};
  for (const auto& r : rows)
    j["rows"].push_back({{"kernel", r.what},
                         {"shape", r.shape},
                         {"N", r.N},
                         {"K", r.K},
                         {"G", r.G},
                         {"us", r.us},
                         {"gb_s", r.gb_s},
                         {"agrees", r.same}});
  if (a.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const bool csv = a.output == "csv";
  std::printf(csv ? "shape,N,K,G,kernel,us,gb_s,agrees\n"
                  : "device: %s (%s)\n\n| shape | N x K, G | kernel | us | GB/s | agrees |\n"
                    "|---|---|---|---|---|---|\n",
              ctx.info().name.c_str(), ctx.info().driver.c_str());
  for (const auto& r : rows)
    std::printf(csv ? "\"%s\",%u,%u,%u,\"%s\",%.3f,%.1f,%s\n"
                    : "| %s | %u x %u, %u | %s | %.2f | %.0f | %s |\n",
                r.shape.c_str(), r.N, r.K, r.G, r.what.c_str(), r.us, r.gb_s,
                r.same ? "yes" : "no");
}
#endif

// --parallel B...: the aggregate decode throughput of B sequences advanced together (one batched
// forward a step, docs/ir.md "Batched forward"), like llama-batched-bench's S_TG: each sequence
// prefills its own -p prompt, then -n steps decode one token of every sequence; tok/s = B n / the
// steps' time. Each sequence's KV blocks come from one pool of 16-token blocks.
nlohmann::json run_parallel(const BenchArgs& a, const Model& model) {
  const ModelInfo& info = model.info();
  if (a.prompt + a.gen > info.context_length)
    fail("--parallel: -p {} + -n {} do not fit the context length {}", a.prompt, a.gen,
         info.context_length);
  LoadedProgram& loaded = *ModelAccess::of(model).loaded;
  constexpr int kBlockTokens = 16;
  const int per_seq = (a.prompt + a.gen + kBlockTokens - 1) / kBlockTokens;
  const auto prompt = prompt_tokens(model, a.prompt);
  nlohmann::json rows = nlohmann::json::array();
  for (const int B : a.parallel) {
    auto ex = loaded.make_batch_executor(B * per_seq, kBlockTokens, std::max(B, a.prompt));
    std::vector<int32_t> table(static_cast<size_t>(B) * per_seq);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    Series tg;
    for (int r = -1; r < a.reps; ++r) {  // r == -1: warm-up
      std::fprintf(stderr, "\rvkllm bench: parallel %d %s %d/%d", B, r < 0 ? "warm-up" : "run",
                   r + 1, a.reps);
      std::vector<int32_t> next(static_cast<size_t>(B)), pos(static_cast<size_t>(B)),
          seq(static_cast<size_t>(B)), out(static_cast<size_t>(B));
      for (int s = 0; s < B; ++s) {  // the prompts, a forward each
        std::vector<int32_t> p(prompt.size()), q(prompt.size(), s);
        for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i);
        const int32_t last = static_cast<int32_t>(prompt.size()) - 1;
        BatchForward f;
        f.T = static_cast<int>(prompt.size());
        f.ids = prompt.data();
        f.pos = p.data();
        f.seq = q.data();
        f.n_seqs = B;
        f.block_table = table.data();
        f.table_stride = per_seq;
        f.out_rows = &last;
        f.n_out = 1;
        f.next_tokens = &next[static_cast<size_t>(s)];
        ex->forward(f);
      }
      for (int s = 0; s < B; ++s) {
        seq[static_cast<size_t>(s)] = out[static_cast<size_t>(s)] = s;
        pos[static_cast<size_t>(s)] = a.prompt;
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int step = 0; step < a.gen; ++step) {
        std::vector<int32_t> ids = next;
        BatchForward f;
        f.T = B;
        f.ids = ids.data();
        f.pos = pos.data();
        f.seq = seq.data();
        f.n_seqs = B;
        f.block_table = table.data();
        f.table_stride = per_seq;
        f.out_rows = out.data();
        f.n_out = B;
        f.next_tokens = next.data();
        ex->forward(f);
        for (int32_t& p : pos) ++p;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) tg.v.push_back(static_cast<double>(B) * a.gen / s);
    }
    rows.push_back({{"sequences", B},
                    {"prompt_tokens", a.prompt},
                    {"gen_tokens", a.gen},
                    {"median_tok_s", tg.median()},
                    {"stddev_tok_s", tg.stddev()},
                    {"runs_tok_s", tg.v}});
  }
  std::fprintf(stderr, "\n");
  return rows;
}

void run(const BenchArgs& a) {
  if (a.output != "md" && a.output != "json" && a.output != "csv")
    fail("--output must be md, json or csv (got '{}')", a.output);
  if (int(a.physics) + int(a.gemm) + int(a.matvec) > 1)
    fail("--physics, --gemm and --matvec are separate measurements: pass one");
  if (a.physics || a.gemm || a.matvec) {
#ifdef VKLLM_WITH_VULKAN
    if (a.physics) run_physics(a);
    if (a.gemm) run_gemm(a);
    if (a.matvec) run_matvec(a);
    return;
#else
    fail("--physics, --gemm and --matvec need the Vulkan backend (this build has none)");
#endif
  }
  if (a.model.empty()) fail("--model is required (or --physics, --gemm, --matvec)");
  ModelOptions mo;
  mo.backend = a.backend;
  mo.device = a.device;
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::time_point from, clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  const auto t0 = clock::now();
  auto model = Model::open(a.model, mo);
  const auto t_open = clock::now();
  Session s(model);
  const auto t_ready = clock::now();
  const double load_ms = ms(t0, t_ready);
  const ModelInfo& info = model->info();
  // The load's stages (JSON only) and what the pipeline cache did (cli/load_stages.h).
  const nlohmann::json stages = cli::load_stages_json(*model, ms(t0, t_open), ms(t_open, t_ready));
  const nlohmann::json pipeline_cache = cli::pipeline_cache_json(*model);
  if (!a.parallel.empty()) {
    const nlohmann::json rows = run_parallel(a, *model);
    if (a.output == "json") {
      std::printf("%s\n", nlohmann::json({{"model", a.model},
                                          {"architecture", info.architecture},
                                          {"recipe", info.recipe},
                                          {"backend", info.backend},
                                          {"device", info.device_name},
                                          {"parallel", rows}})
                              .dump(2)
                              .c_str());
      return;
    }
    const bool csv = a.output == "csv";
    std::printf(csv ? "model,recipe,sequences,prompt_tokens,gen_tokens,median_tok_s,stddev_tok_s\n"
                    : "| model | backend | device | sequences | test | aggregate t/s (median of "
                      "%d) |\n|---|---|---|---|---|---|\n",
                a.reps);
    for (const auto& r : rows) {
      const int B = r["sequences"].get<int>();
      if (csv)
        std::printf("%s,%s,%d,%d,%d,%.2f,%.2f\n", info.architecture.c_str(), info.recipe.c_str(), B,
                    a.prompt, a.gen, r["median_tok_s"].get<double>(),
                    r["stddev_tok_s"].get<double>());
      else
        std::printf("| %s %s | %s | %s | %d | tg%d after pp%d | %.2f ± %.2f |\n",
                    info.architecture.c_str(), info.recipe.c_str(), info.backend.c_str(),
                    info.device_name.c_str(), B, a.gen, a.prompt, r["median_tok_s"].get<double>(),
                    r["stddev_tok_s"].get<double>());
    }
    return;
  }
  if (a.prompt + 1 > info.context_length || std::max(a.depth, 1) + a.gen + 1 > info.context_length)
    fail("-p {} / -d {} -n {} do not fit the context length {}", a.prompt, a.depth, a.gen,
         info.context_length);
  const auto pp_ids = prompt_tokens(*model, a.prompt);
  const auto tg_ids = prompt_tokens(*model, std::max(a.depth, 1));
  GenerationOptions pp_opt, tg_opt;
  pp_opt.max_new_tokens = 1;
  pp_opt.stop_at_eos = tg_opt.stop_at_eos = false;
  tg_opt.max_new_tokens = a.gen + 1;  // the first token ends the prefill of the -d prompt
  Series pp, tg;
  for (int r = -1; r < a.reps; ++r) {  // r == -1: warm-up
    std::fprintf(stderr, "\rvkllm bench: %s %d/%d", r < 0 ? "warm-up" : "run", r + 1, a.reps);
    s.reset();
    s.generate(pp_ids, pp_opt);
    const double pp_rate = s.stats().prefill_tok_s();
    s.reset();
    s.generate(tg_ids, tg_opt);
    const double tg_rate = s.stats().decode_tok_s();
    if (r >= 0) {
      pp.v.push_back(pp_rate);
      tg.v.push_back(tg_rate);
    }
  }
  std::fprintf(stderr, "\n");
  nlohmann::json j = {{"model", a.model},
                      {"architecture", info.architecture},
                      {"recipe", info.recipe},
                      {"backend", info.backend},
                      {"device", info.device_name},
                      {"weight_mib", static_cast<double>(info.weight_bytes) / 1048576.0},
                      // One session's KV cache at the context (sliding layers' rings included).
                      {"context", info.context_length},
                      {"kv_cache_mib", static_cast<double>(info.kv_cache_bytes) / 1048576.0},
                      {"load_ms", load_ms},
                      {"load_stages_ms", stages},
                      {"repetitions", a.reps},
                      {"pp",
                       {{"tokens", a.prompt},
                        {"median_tok_s", pp.median()},
                        {"stddev_tok_s", pp.stddev()},
                        {"runs_tok_s", pp.v}}},
                      {"tg",
                       {{"tokens", a.gen},
                        {"depth", a.depth},
                        {"median_tok_s", tg.median()},
                        {"stddev_tok_s", tg.stddev()},
                        {"runs_tok_s", tg.v}}},
                      {"peak_host_mb", peak_rss_mb()}};
#ifdef VKLLM_WITH_VULKAN
  if (info.backend == "vulkan") {
    const VulkanUsage vu = vulkan_usage();  // weights, caches, activations, scratch
    j["peak_gpu_mb"] = static_cast<double>(vu.peak_device_bytes) / 1048576.0;
    j["driver"] = vu.driver;
    j["pipeline_cache"] = pipeline_cache;
  }
#endif
  if (a.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const std::string name = info.architecture + " " + info.recipe;
  if (a.output == "csv") {
    std::printf("model,recipe,backend,device,test,tokens,median_tok_s,stddev_tok_s,load_ms\n");
    for (const char* t : {"pp", "tg"})
      std::printf("%s,%s,%s,\"%s\",%s,%d,%.2f,%.2f,%.1f\n", info.architecture.c_str(),
                  info.recipe.c_str(), info.backend.c_str(), info.device_name.c_str(), t,
                  j[t]["tokens"].get<int>(), j[t]["median_tok_s"].get<double>(),
                  j[t]["stddev_tok_s"].get<double>(), load_ms);
    return;
  }
  std::printf(
      "| model | size | backend | device | test | t/s (median of %d) | load ms | peak GPU MiB |\n",
      a.reps);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const char* t : {"pp", "tg"}) {
    const std::string depth =
        std::string(t) == "tg" && a.depth > 0 ? " @ d" + std::to_string(a.depth) : "";
    std::printf("| %s | %.1f MiB | %s | %s | %s%d%s | %.2f ± %.2f | %.0f | %.0f |\n", name.c_str(),
                j["weight_mib"].get<double>(), info.backend.c_str(), info.device_name.c_str(), t,
                j[t]["tokens"].get<int>(), depth.c_str(), j[t]["median_tok_s"].get<double>(),
                j[t]["stddev_tok_s"].get<double>(), load_ms, j.value("peak_gpu_mb", 0.0));
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench", "Measure load time, prompt processing (pp) and token generation (tg) speed");
  cmd->add_option("-m,--model,--model_path", a->model, "The .vkllm artifact (or a HF folder)");
  cmd->add_option("-p,--prompt-tokens", a->prompt, "Prompt length for pp")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-n,--gen-tokens", a->gen, "Generated tokens for tg")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-d,--depth", a->depth,
                  "tg decodes after a prompt of this many tokens (default: one token), so that "
                  "decode runs at positions d .. d + n, like llama-bench's -d")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-r,--repetitions", a->reps, "Measured repetitions (after one warm-up)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("-o,--output", a->output, "Table format: md, json or csv");
  cmd->add_option("--backend", a->backend, "vulkan (default) or cpu");
  cmd->add_option("--device", a->device, "Vulkan device index or name substring");
  cmd->add_flag("--physics", a->physics,
                "No model: the device's dispatch, grid-sync and bandwidth costs (docs/perf.md)");
  cmd->add_flag("--gemm", a->gemm,
                "No model: the cooperative-matrix ceiling and the prefill GEMM's TOPS at prefill "
                "shapes (docs/perf.md)");
  cmd->add_flag("--matvec", a->matvec,
                "No model: the decode mat-vec kernels' time and GB/s at the three models' shapes "
                "(docs/perf.md)");
  cmd->add_option("--parallel", a->parallel,
                  "Aggregate decode of B sequences a step (batched forwards), for each B given "
                  "(e.g. --parallel 1,4,16,64): each prefills its own -p prompt, then -n steps")
      ->delimiter(',')
      ->check(CLI::Range(1, 512));
  cmd->add_option(
         "--groups", a->groups,
         "--physics: workgroups of the resident grid (default: the device's compute units)")
      ->check(CLI::Range(1, 4096));
  cmd->callback([a] { run(*a); });
}

}  // namespace vkllm::cli
