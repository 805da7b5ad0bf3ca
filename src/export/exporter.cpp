#include "export/exporter.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>

#include "artifact/writer.h"
#include "artifact/xxh64.h"
#include "core/error.h"
#include "export/lora.h"
#include "hf/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace vkllm {

namespace {

// Drops the mapped checkpoint pages of [p, p+n) from this process (they stay in the page cache);
// a later read simply faults them in again, so rounding the range outwards is harmless.
void release_pages(const uint8_t* p, uint64_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
  ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

int effective_context(const ModelDesc& d, const RecipeOptions& o) {
  if (o.max_context < 1) fail("--max-context must be positive (got {})", o.max_context);
  return d.max_pos > 0 ? std::min(o.max_context, d.max_pos) : o.max_context;
}

std::vector<EmbeddedFile> embedded_files(const std::string& dir, bool need_tokenizer) {
  std::vector<EmbeddedFile> files;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "config.json", "chat_template.jinja"}) {
    const std::string path = dir + "/" + name;
    if (::access(path.c_str(), R_OK) != 0) {
      if (std::string(name) == "tokenizer.json" && need_tokenizer)
        fail("{}: no tokenizer.json: the artifact must embed the tokenizer", dir);
      continue;
    }
    std::string text = read_text_file(path);
    // chat_template.jinja (where transformers saves the chat template) is text; the rest JSON.
    if (std::string(name) != "chat_template.jinja" && !nlohmann::json::accept(text))
      fail("{}: not valid JSON", path);
    // The tokenizer also in its compiled form, which loads faster (artifact/load.cpp). One that
    // does not load has none: the writer's load check then refuses the tokenizer.json itself.
    std::string compiled;
    if (std::string(name) == "tokenizer.json") {
      try {
        compiled = Tokenizer::compile(text, path, xxh64(text.data(), text.size()));
      } catch (const Error&) {
        compiled.clear();
      }
    }
    files.push_back({name, std::move(text)});
    if (!compiled.empty()) files.push_back({"tokenizer.compiled", std::move(compiled)});
  }
  return files;
}

ArtifactContent make_content(const ExportPlan& plan, std::vector<EmbeddedFile> files,
                             const std::string& source, const LoraMerge* lora) {
  ArtifactContent c;
  c.desc = plan.desc;
  c.recipe = plan.recipe;
  c.program = plan.program;
  c.files = std::move(files);
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  c.producer = {{"tool", "vkllm"}, {"version", "0.1.0"}, {"source", source}, {"created_utc", when}};
  if (lora) c.producer["lora"] = lora->metadata();
  return c;
}

std::vector<int32_t> write_order(const ExportPlan& plan) {
  std::vector<int32_t> order;
  for (const WeightJob& j : plan.jobs)
    for (int32_t t : j.outputs()) order.push_back(t);
  return order;
}

}  // namespace

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

nlohmann::json program_summary(const Program& p) {
  std::map<std::string, int> fam;
  std::map<std::string, uint64_t> by_dtype;
  std::map<std::string, int> backends;
  uint64_t weights = 0;
  for (const Op& o : p.ops) {
    fam[o.family]++;
    backends[backend_name(o.backend)]++;
  }
  for (const TensorDecl& t : p.tensors)
    if (t.kind == TensorKind::Weight) {
      by_dtype[dtype_name(t.dtype)] += t.nbytes;
      weights += t.nbytes;
    }
  std::map<std::string, int> kv;
  for (const TensorDecl& t : p.tensors)
    if (t.kind == TensorKind::KVCache) kv[dtype_name(t.dtype)]++;
  std::map<std::string, int> acts;
  for (const TensorDecl& t : p.tensors)
    if (t.kind == TensorKind::Activation) acts[dtype_name(t.dtype)]++;
  return {{"ops", p.ops.size()},
          {"op_families", fam},
          {"backends", backends},
          {"weight_bytes", weights},
          {"weight_bytes_by_dtype", by_dtype},
          {"kv_caches_by_dtype", kv},
          {"activations_by_dtype", acts},
          {"max_context", p.max_ctx}};
}

ExportResult plan_checkpoint(const std::string& hf_dir, const RecipeOptions& o,
                             const LoraMerge* lora) {
  const std::string cfg = hf_dir + "/config.json", gen = hf_dir + "/generation_config.json";
  const nlohmann::json gj =
      ::access(gen.c_str(), R_OK) == 0 ? read_json_file(gen) : nlohmann::json();
  const ModelDesc d = parse_hf_config(read_json_file(cfg), gj, cfg);
  const ExportPlan plan = plan_export(lower_model(d, effective_context(d, o)), o);
  ExportResult r;
  r.recipe = o.recipe;
  r.file_size = planned_artifact_size(
      make_content(plan, embedded_files(hf_dir, false), hf_dir, lora), write_order(plan));
  r.summary = program_summary(plan.program);
  r.summary["recipe"] = plan.recipe;
  return r;
}

ExportResult export_checkpoint(const std::string& hf_dir, const std::string& out_path,
                               const RecipeOptions& o,
                               const std::function<void(const ExportProgress&)>& progress,
                               int64_t chunk_elems, const LoraMerge* lora) {
  const auto t0 = std::chrono::steady_clock::now();
  HfCheckpoint ck(hf_dir);
  const LoweredModel lowered = lower_model(ck.desc(), effective_context(ck.desc(), o));
  ExportPlan plan = plan_export(lowered, o);
  // Every source tensor must exist with its expected shape before anything is written.
  for (const WeightJob& j : plan.jobs) {
    const WeightOrigin& org = lowered.origin.at(static_cast<size_t>(j.source));
    if (!org.hf_name.empty()) ck.get(org.hf_name, org.hf_shape);
  }
  if (lora) lora->check_base(ck);

  const std::vector<int32_t> order = write_order(plan);
  ArtifactWriter w(out_path, make_content(plan, embedded_files(hf_dir, true), hf_dir, lora), order);

  ExportProgress pr;
  pr.jobs = plan.jobs.size();
  for (int32_t t : order) pr.total_bytes += w.program().tensors[t].nbytes;
  // Source rows are converted to fp32 in chunks of ~chunk_elems values (32 MiB by default).
  std::vector<float> src;
  std::vector<std::vector<uint8_t>> outs, whole;
  for (const WeightJob& j : plan.jobs) {
    const TensorDecl& sd = lowered.program.tensors[j.source];
    const WeightOrigin& org = lowered.origin[j.source];
    const int64_t cols = sd.shape.back();
    const int64_t rows = sd.shape.size() > 1 ? sd.shape[0] : 1;
    const int64_t step = std::max<int64_t>(1, chunk_elems / cols);
    const auto ids = j.outputs();
    pr.tensor = w.program().tensors[j.out].name;
    if (progress) progress(pr);
    // A single-output job streams straight to the file; int4 jobs (data, scales, sums are three
    // consecutive tensors) collect their outputs first: at most ~0.6 byte per weight.
    whole.assign(ids.size(), {});
    if (ids.size() > 1)
      for (size_t k = 0; k < ids.size(); ++k) whole[k].reserve(w.program().tensors[ids[k]].nbytes);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t nr = std::min(step, rows - r0);
      src.resize(static_cast<size_t>(nr * cols));
      if (org.hf_name.empty()) {
        std::copy(org.values.begin() + r0 * cols, org.values.begin() + (r0 + nr) * cols,
                  src.begin());
      } else {
        const TensorView& v = ck.get(org.hf_name, org.hf_shape);
        const int64_t begin = (org.row_begin + r0) * cols;
        v.read_f32(begin, nr * cols, src.data());
        if (lora) lora->add_rows(org.hf_name, org.row_begin + r0, nr, cols, src.data());
        if (org.add != 0)
          for (float& x : src) x += org.add;
        const uint64_t esz = st_dtype_size(v.dtype);
        release_pages(v.data + begin * esz, static_cast<uint64_t>(nr * cols) * esz);
      }
      produce_rows(plan, j, src.data(), nr, cols, outs);
      if (ids.size() == 1) {
        w.append(outs[0].data(), outs[0].size());
        pr.bytes += outs[0].size();
      } else {
        for (size_t k = 0; k < ids.size(); ++k)
          whole[k].insert(whole[k].end(), outs[k].begin(), outs[k].end());
      }
    }
    if (ids.size() > 1)
      for (auto& b : whole) {
        w.append(b.data(), b.size());
        pr.bytes += b.size();
        std::vector<uint8_t>().swap(b);
      }
    ++pr.job;
  }
  if (progress) progress(pr);
  w.finish();

  ExportResult r;
  r.path = out_path;
  r.recipe = o.recipe;
  r.file_size = w.file_size();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_rss = peak_rss_bytes();
  r.summary = program_summary(w.program());
  r.summary["recipe"] = plan.recipe;
  return r;
}

}  // namespace vkllm
