#include "export/recipe.h"

#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include "core/error.h"
#include "core/half.h"
#include "export/quant.h"

namespace vkllm {

const std::vector<std::string>& recipe_names() {
  static const std::vector<std::string> n = {"non-quantized",
                                             "fp16",
                                             "quantized-8da4w",
                                             "quantized-8da4w-fp16",
                                             "quantized-8da4w-embedding",
                                             "quantized-8da4w-fp16-embedding",
                                             "quantized-int4-weight-only"};
  return n;
}

RecipeTraits recipe_traits(const std::string& name) {
  RecipeTraits t;
  if (name == "non-quantized") return t;
  if (name == "fp16") {
    t.fp16 = true;
    return t;
  }
  if (name == "quantized-int4-weight-only") {
    t.q4w = true;
    return t;
  }
  const std::string p = "quantized-8da4w";
  if (name.rfind(p, 0) == 0) {
    const std::string rest = name.substr(p.size());
    t.act8 = true;
    t.fp16 = rest == "-fp16" || rest == "-fp16-embedding";
    t.emb_q4 = rest == "-embedding" || rest == "-fp16-embedding";
    if (rest.empty() || t.fp16 || t.emb_q4) return t;
  }
  std::string all;
  for (auto& r : recipe_names()) all += (all.empty() ? "" : ", ") + r;
  fail("unknown recipe '{}' (known: {})", name, all);
}

std::vector<int32_t> WeightJob::outputs() const {
  std::vector<int32_t> o = {out};
  if (scales >= 0) o.push_back(scales);
  if (sums >= 0) o.push_back(sums);
  return o;
}

int64_t effective_group(int64_t group, int64_t cols) {
  if (group <= 0 || cols <= 0) fail("group size {} and width {} must be positive", group, cols);
  return cols % group == 0 ? group : std::gcd(group, cols);
}

namespace {

class Planner {
 public:
  Planner(const LoweredModel& m, const RecipeOptions& o, ExportPlan& plan)
      : m_(m),
        o_(o),
        t_(recipe_traits(o.recipe)),
        plan_(plan),
        map_(m.program.tensors.size(), -1) {}

  void run() {
    const Program& P = m_.program;
    Program& Q = plan_.program;
    Q.max_ctx = P.max_ctx;
    int32_t embed_src = -1;
    for (const Op& op : P.ops)
      if (op.family == "embedding") embed_src = op.inputs[1];
    for (const Op& op : P.ops) {
      Op n = op;
      n.inputs.clear();
      n.outputs.clear();
      for (auto i : op.outputs) n.outputs.push_back(plain(i));
      if (op.family == "embedding") {
        n.inputs.push_back(plain(op.inputs[0]));
        if (t_.emb_q4) {
          const int64_t D = P.tensors[op.inputs[1]].shape[1];
          const int64_t g = group_for(op.inputs[1], o_.embedding_group, D);
          WeightJob& j = int4(op.inputs[1], g, false);
          n.family = "embedding_q4";
          n.inputs.push_back(j.out);
          n.inputs.push_back(j.scales);
          n.attrs["group"] = g;
        } else {
          n.inputs.push_back(flt(op.inputs[1]));
        }
      } else if (op.family == "linear") {
        n.inputs.push_back(plain(op.inputs[0]));
        const int32_t w = op.inputs[1];
        if (t_.quantized()) {
          const int64_t K = P.tensors[w].shape[1];
          // The tied head shares the int4 embedding table (one stored tensor) when the recipe
          // quantizes the embedding; otherwise it gets its own copy at the linear group size.
          const bool shared = w == embed_src && t_.emb_q4;
          const int64_t g =
              shared ? group_for(w, o_.embedding_group, K) : group_for(w, o_.group_size, K);
          WeightJob& j = int4(w, g, t_.act8);
          n.family = t_.act8 ? "linear_8da4w" : "linear_q4w";
          n.inputs.push_back(j.out);
          n.inputs.push_back(j.scales);
          if (t_.act8) n.inputs.push_back(j.sums);
          n.attrs["group"] = g;
        } else {
          n.inputs.push_back(flt(w));
        }
      } else {
        // rms_norm weights and rope tables stay fp32 (tiny; the kernels read them as fp32).
        for (auto i : op.inputs)
          n.inputs.push_back(P.tensors[i].kind == TensorKind::Weight ? flt(i, DType::F32)
                                                                     : plain(i));
      }
      Q.ops.push_back(std::move(n));
    }
    Q.input_ids = plain(P.input_ids);
    Q.logits = plain(P.logits);
    Q.next_token = plain(P.next_token);
    Q.validate();

    nlohmann::json r = {{"name", o_.recipe},
                        {"group_size", o_.group_size},
                        {"embedding_bits", o_.embedding_bits},
                        {"embedding_group", o_.embedding_group},
                        {"max_context", Q.max_ctx},
                        {"linear", t_.act8 ? "int4 weights, int8 dynamic activations (linear_8da4w)"
                                   : t_.q4w  ? "int4 weights, float activations (linear_q4w)"
                                   : t_.fp16 ? "fp16"
                                             : "fp32"},
                        {"embedding", t_.emb_q4 ? "int4"
                                      : t_.fp16 ? "fp16"
                                                : "fp32"},
                        {"activations", t_.fp16 ? "fp16" : "fp32"},
                        {"kv_cache", t_.fp16 ? "fp16" : "fp32"},
                        {"scale_search", "max-abs"}};
    if (m_.desc.tied_embeddings)
      r["tied_embedding"] =
          t_.emb_q4 ? "one int4 table shared by the embedding and the output projection"
          : t_.quantized()
              ? "float table for the embedding plus an int4 copy for the output projection"
              : "one float table shared by the embedding and the output projection";
    r["group_adjustments"] = adjust_;
    plan_.recipe = r;
  }

 private:
  int32_t add(TensorDecl t) {
    std::string base = t.name;
    for (int k = 2; plan_.program.find(t.name) >= 0; ++k) t.name = base + "#" + std::to_string(k);
    return plan_.program.add_tensor(std::move(t));
  }
  // Non-weight tensors: same declaration; fp16 recipes store activations and KV caches in fp16
  // (the logits stay fp32, ids and next_token int32).
  int32_t plain(int32_t i) {
    if (map_[i] >= 0) return map_[i];
    TensorDecl t = m_.program.tensors[i];
    if (t.kind == TensorKind::Weight)
      fail("recipe: {} is a weight where an activation was expected", t.name);
    if (t_.fp16 && t.dtype == DType::F32 && i != m_.program.logits &&
        (t.kind == TensorKind::Activation || t.kind == TensorKind::KVCache))
      t.dtype = DType::F16;
    return map_[i] = add(std::move(t));
  }
  int32_t flt(int32_t src) { return flt(src, t_.fp16 ? DType::F16 : DType::F32); }
  int32_t flt(int32_t src, DType dt) {
    auto key = std::make_tuple(src, 0, static_cast<int64_t>(dt), false);
    if (auto it = jobs_.find(key); it != jobs_.end()) return plan_.jobs[it->second].out;
    const TensorDecl& s = m_.program.tensors[src];
    WeightJob j;
    j.source = src;
    j.kind = WeightJob::Kind::Float;
    j.dtype = dt;
    j.out = add({s.name, dt, TensorKind::Weight, s.shape, 0, dtype_nbytes(dt, s.shape)});
    jobs_[key] = plan_.jobs.size();
    plan_.jobs.push_back(j);
    return j.out;
  }
  WeightJob& int4(int32_t src, int64_t group, bool sums) {
    auto key = std::make_tuple(src, 1, group, false);
    const TensorDecl& s = m_.program.tensors[src];
    const std::vector<int64_t> gshape = {s.shape[0], s.shape[1] / group};
    auto it = jobs_.find(key);
    if (it == jobs_.end()) {
      WeightJob j;
      j.source = src;
      j.kind = WeightJob::Kind::Int4;
      j.group = group;
      j.out = add({s.name + ".q4", DType::Q4, TensorKind::Weight, s.shape, 0,
                   dtype_nbytes(DType::Q4, s.shape)});
      j.scales = add({s.name + ".scales", DType::F32, TensorKind::Weight, gshape, 0,
                      dtype_nbytes(DType::F32, gshape)});
      it = jobs_.emplace(key, plan_.jobs.size()).first;
      plan_.jobs.push_back(j);
    }
    WeightJob& j = plan_.jobs[it->second];
    if (sums && j.sums < 0)
      j.sums = add({s.name + ".wsum", DType::I32, TensorKind::Weight, gshape, 0,
                    dtype_nbytes(DType::I32, gshape)});
    return j;
  }
  int64_t group_for(int32_t w, int64_t want, int64_t cols) {
    const int64_t g = effective_group(want, cols);
    if (g != want)
      adjust_.push_back({{"tensor", m_.program.tensors[w].name}, {"width", cols}, {"group", g}});
    return g;
  }

  const LoweredModel& m_;
  const RecipeOptions& o_;
  RecipeTraits t_;
  ExportPlan& plan_;
  std::vector<int32_t> map_;
  std::map<std::tuple<int32_t, int, int64_t, bool>, size_t> jobs_;
  nlohmann::json adjust_ = nlohmann::json::array();
};

}  // namespace

ExportPlan plan_export(const LoweredModel& m, const RecipeOptions& o) {
  recipe_traits(o.recipe);
  if (o.group_size < 1) fail("--group-size must be positive (got {})", o.group_size);
  if (o.embedding_bits != 4)
    fail("--embedding-bits {} is not supported (only 4-bit embeddings)", o.embedding_bits);
  if (o.embedding_group < 1) fail("--embedding-group must be positive (got {})", o.embedding_group);
  ExportPlan plan;
  plan.desc = m.desc;
  Planner(m, o, plan).run();
  return plan;
}

void produce_rows(const ExportPlan& plan, const WeightJob& job, const float* src, int64_t rows,
                  int64_t cols, std::vector<std::vector<uint8_t>>& out) {
  const auto outs = job.outputs();
  out.resize(outs.size());
  if (job.kind == WeightJob::Kind::Float) {
    const size_t n = static_cast<size_t>(rows * cols);
    if (job.dtype == DType::F32) {
      out[0].resize(n * 4);
      std::memcpy(out[0].data(), src, n * 4);
    } else {
      out[0].resize(n * 2);
      auto* h = reinterpret_cast<uint16_t*>(out[0].data());
      for (size_t i = 0; i < n; ++i) {
        h[i] = f32_to_f16(src[i]);
        if ((h[i] & 0x7fff) == 0x7c00)  // finite in fp32, infinite in fp16
          fail("weight {}: value {} is beyond the fp16 range (+-65504); use a recipe without fp16",
               plan.program.tensors[job.out].name, src[i]);
      }
    }
    return;
  }
  const int64_t ng = cols / job.group;
  out[0].resize(static_cast<size_t>(rows * ((cols + 1) / 2)));
  out[1].resize(static_cast<size_t>(rows * ng * 4));
  int32_t* sums = nullptr;
  if (job.sums >= 0) {
    out[2].resize(static_cast<size_t>(rows * ng * 4));
    sums = reinterpret_cast<int32_t*>(out[2].data());
  }
  quantize_int4_rows(src, rows, cols, job.group, out[0].data(),
                     reinterpret_cast<float*>(out[1].data()), sums);
}

}  // namespace vkllm
