// LoRA merge at export: the deltas planned against the base, added row range by row range.
#include "export/lora.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "hf/checkpoint.h"
#include "hub/hub.h"

namespace vkllm {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

constexpr const char* kPrefix = "base_model.model.";

}  // namespace

LoraMerge::~LoraMerge() = default;

LoraMerge::LoraMerge(const std::string& adapter_dir, const ModelDesc& base, double scale,
                     LoraProvenance prov)
    : adapter_(std::make_unique<LoraAdapter>(adapter_dir)) {
  const LoraConfig& c = adapter_->config();
  const std::string where = adapter_dir + "/adapter_config.json";
  if (!std::isfinite(scale)) fail("--lora-scale must be a finite number");
  const std::string arch = fmt::format("{} with {} layers", base.hf_class, base.n_layers);

  // The adapter's tensors by module: base_model.model.<module>.lora_{A,B}.weight.
  std::map<std::string, std::pair<const TensorView*, const TensorView*>> by_module;
  for (const auto& [name, t] : adapter_->tensors()) {
    const bool is_a = name.size() > 14 && name.compare(name.size() - 14, 14, ".lora_A.weight") == 0;
    const bool is_b = name.size() > 14 && name.compare(name.size() - 14, 14, ".lora_B.weight") == 0;
    if (name.rfind(kPrefix, 0) != 0 || !(is_a || is_b))
      fail(
          "{}/adapter_model.safetensors: tensor {} is not a LoRA weight vkllm can merge "
          "(expected base_model.model.<module>.lora_A.weight or .lora_B.weight)",
          adapter_dir, name);
    const size_t p = std::string(kPrefix).size();
    const std::string module = name.substr(p, name.size() - 14 - p);
    auto& slot = by_module[module];
    (is_a ? slot.first : slot.second) = &t;
  }

  const std::vector<BaseModule> modules = lora_base_modules(base);
  std::set<std::string> base_names;
  for (const auto& m : modules) base_names.insert(m.name);
  const bool all_linear = lora_all_linear(c);
  std::vector<const BaseModule*> selected;
  for (const auto& m : modules) {
    if (m.split_of_fused && !by_module.count(m.name)) continue;
    const bool hit = all_linear ? (m.linear && !m.split_of_fused) : lora_targets(c, m.name);
    if (!hit) continue;
    if (m.name == "lm_head" || m.name == "model.embed_tokens")
      fail(
          "{}: target_modules selects {}: LoRA on the embedding or the output head is not "
          "supported (docs/lora.md)",
          where, m.name);
    if (!m.linear)
      fail(
          "{}: target_modules selects {}, which is not a Linear layer of {} (LoRA merges into "
          "Linear weights only)",
          where, m.name, arch);
    selected.push_back(&m);
  }
  // Every listed target names a module of the base (peft would skip a name that matches
  // nothing as long as another one matches; that is a wrong adapter far more often).
  if (!c.target_is_regex)
    for (const auto& n : c.target_names) {
      bool any = false;
      for (const auto& m : modules) any = any || lora_name_matches(m.name, n);
      if (!any)
        fail(
            "{}: target module '{}' is not a module of the base ({}): an adapter for another "
            "model?",
            where, n, arch);
    }
  if (selected.empty())
    fail("{}: target_modules selects no module of the base ({}): an adapter for another model?",
         where, arch);

  std::set<std::string> chosen;
  for (const BaseModule* m : selected) chosen.insert(m->name);
  for (const auto& [module, ab] : by_module) {
    if (chosen.count(module)) continue;
    if (!base_names.count(module))
      fail(
          "{}/adapter_model.safetensors: the adapter has weights for {}, which the base ({}) "
          "does not have: an adapter for another model?",
          adapter_dir, module, arch);
    fail(
        "{}/adapter_model.safetensors: the adapter has weights for {}, which its "
        "target_modules / layers_to_transform do not select (peft would not apply them)",
        adapter_dir, module);
  }

  for (const BaseModule* m : selected) {
    auto it = by_module.find(m->name);
    if (it == by_module.end() || !it->second.first || !it->second.second)
      fail(
          "{}/adapter_model.safetensors: target_modules selects {} but the file has no {}.{} for "
          "it",
          adapter_dir, m->name, kPrefix + m->name,
          it == by_module.end() || !it->second.first ? "lora_A.weight" : "lora_B.weight");
    LoraDelta d;
    d.module = m->name;
    d.hf_tensor = m->hf_tensor;
    d.row_begin = m->row_begin;
    d.out = m->out;
    d.in = m->in;
    bool rp = false;
    d.r = lora_module_rank(c, m->name, &rp);
    d.alpha = lora_module_alpha(c, m->name);
    d.scaling = scale * d.alpha / (c.use_rslora ? std::sqrt(double(d.r)) : double(d.r));
    d.a = it->second.first;
    d.b = it->second.second;
    const std::vector<int64_t> ea = {d.r, d.in}, eb = {d.out, d.r};
    if (d.a->shape != ea || d.b->shape != eb)
      fail(
          "{}/adapter_model.safetensors: {} has lora_A {} and lora_B {}; the base's {} is "
          "[{}, {}] and its rank is {}{}, so expected lora_A {} and lora_B {}",
          adapter_dir, m->name, shape_str(d.a->shape), shape_str(d.b->shape), m->name, d.out, d.in,
          d.r, rp ? " from rank_pattern" : "", shape_str(ea), shape_str(eb));
    deltas_.push_back(d);
  }

  nlohmann::json files = nlohmann::json::object();
  for (const auto& f : LoraAdapter::file_names()) {
    const std::string h = sha256_file_hex(adapter_dir + "/" + f);
    files[f] = h.empty() ? nlohmann::json() : nlohmann::json(h);
  }
  meta_ = {{"source", prov.source},
           {"repo", prov.repo},
           {"revision", prov.revision},
           {"commit", prov.commit},
           {"sha256", files},
           {"scale", scale},
           {"r", c.r},
           {"lora_alpha", c.lora_alpha},
           {"use_rslora", c.use_rslora},
           {"base_model_name_or_path", c.base_model},
           {"modules", deltas_.size()}};
}

void LoraMerge::check_base(const HfCheckpoint& ck) const {
  for (const LoraDelta& d : deltas_) {
    const auto it = ck.tensors().find(d.hf_tensor);
    if (it == ck.tensors().end())
      fail("{}: the adapter changes {} but the base has no tensor {}", ck.dir(), d.module,
           d.hf_tensor);
    const auto& s = it->second->shape;
    if (s.size() != 2 || s[1] != d.in || s[0] < d.row_begin + d.out)
      fail("{}: tensor {} has shape {}, which does not hold the adapter's {} ([{}, {}] at row {})",
           ck.dir(), d.hf_tensor, shape_str(s), d.module, d.out, d.in, d.row_begin);
  }
}

void LoraMerge::add_rows(const std::string& hf_tensor, int64_t row0, int64_t rows, int64_t cols,
                         float* dst) const {
  std::vector<float> a, b, acc;
  for (const LoraDelta& d : deltas_) {
    if (d.hf_tensor != hf_tensor) continue;
    const int64_t lo = std::max(row0, d.row_begin), hi = std::min(row0 + rows, d.row_begin + d.out);
    if (lo >= hi) continue;
    if (cols != d.in)
      fail("internal: {} merged with {} columns, expected {}", d.module, cols, d.in);
    // lora_A whole (r x in) and the rows of lora_B this range needs, as fp32.
    a.resize(static_cast<size_t>(d.r * d.in));
    d.a->read_f32(0, d.r * d.in, a.data());
    b.resize(static_cast<size_t>((hi - lo) * d.r));
    d.b->read_f32((lo - d.row_begin) * d.r, (hi - lo) * d.r, b.data());
    acc.resize(static_cast<size_t>(cols));
    const float s = static_cast<float>(d.scaling);
    for (int64_t i = lo; i < hi; ++i) {
      // (B A)[i, :] first, then scaled and added: the order peft's merge computes in.
      std::fill(acc.begin(), acc.end(), 0.0f);
      const float* brow = b.data() + (i - lo) * d.r;
      for (int k = 0; k < d.r; ++k) {
        const float bk = brow[k];
        const float* arow = a.data() + int64_t(k) * cols;
        for (int64_t j = 0; j < cols; ++j) acc[j] += bk * arow[j];
      }
      float* row = dst + (i - row0) * cols;
      for (int64_t j = 0; j < cols; ++j) {
        row[j] += acc[j] * s;
        if (!std::isfinite(row[j]))
          fail("{}: the merged weight of {} is not finite at row {} (is --lora-scale too large?)",
               adapter_->dir(), d.module, i - d.row_begin);
      }
    }
  }
}

}  // namespace vkllm

namespace vkllm {

LoraSource resolve_lora_source(const std::string& arg, PullOptions po) {
  LoraSource s;
  s.prov.source = arg;
  if (!looks_like_repo_id(arg)) {
    s.dir = arg;
    return s;
  }
  po.adapter = true;
  const PullResult r = hub_pull(arg, po);
  s.dir = r.snapshot_dir;
  s.prov.repo = r.repo;
  s.prov.revision = r.revision;
  s.prov.commit = r.commit;
  return s;
}

std::string lora_base_of(const std::string& adapter_dir) {
  const LoraAdapter a(adapter_dir);
  const std::string& b = a.config().base_model;
  if (b.empty())
    fail(
        "{}/adapter_config.json: no base_model_name_or_path, so the base must be given "
        "(vkllm export BASE --lora ADAPTER)",
        adapter_dir);
  std::error_code ec;
  if (std::filesystem::is_directory(b, ec)) return b;
  if (!looks_like_repo_id(b))
    fail(
        "{}/adapter_config.json: base_model_name_or_path '{}' is neither a model id nor a folder "
        "here; give the base (vkllm export BASE --lora ADAPTER)",
        adapter_dir, b);
  return a.config().revision.empty() ? b : b + "@" + a.config().revision;
}

std::unique_ptr<LoraMerge> open_lora_merge(const LoraSource& src, const std::string& base_dir,
                                           double scale) {
  const std::string cfg = base_dir + "/config.json", gen = base_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(cfg, ec)) fail("{}: missing config.json", base_dir);
  const nlohmann::json gj =
      std::filesystem::exists(gen, ec) ? read_json_file(gen) : nlohmann::json();
  const ModelDesc d = parse_hf_config(read_json_file(cfg), gj, cfg);
  return std::make_unique<LoraMerge>(src.dir, d, scale, src.prov);
}

std::string lora_summary_line(const nlohmann::json& m) {
  if (!m.is_object()) return m.dump();
  auto str = [&](const char* k) {
    return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string();
  };
  std::string s = str("source");
  if (!str("commit").empty()) s += fmt::format(" @ {} ({})", str("revision"), str("commit"));
  if (m.contains("modules") && m["modules"].is_number())
    s += fmt::format(", {} modules", m["modules"].dump());
  if (m.contains("scale") && m["scale"].is_number()) s += ", scale " + m["scale"].dump();
  if (m.contains("sha256") && m["sha256"].is_object() &&
      m["sha256"].contains("adapter_model.safetensors") &&
      m["sha256"]["adapter_model.safetensors"].is_string())
    s += ", sha256 " + m["sha256"]["adapter_model.safetensors"].get<std::string>();
  return s;
}

}  // namespace vkllm
