#include "artifact/verify.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <map>

#include "artifact/load.h"
#include "core/error.h"
#include "core/half.h"
#include "export/exporter.h"
#include "export/recipe.h"

namespace vkllm {

uint64_t parse_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string num = s.substr(0, i);
  std::string unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(num, &used);
    if (used != num.size()) throw std::invalid_argument("");
  } catch (const std::exception&) {
    fail("bad size '{}' (examples: 770MiB, 1.5GiB, 800MB, 123456)", s);
  }
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"B", 1},
                                                      {"K", 1024.0},
                                                      {"KiB", 1024.0},
                                                      {"KB", 1e3},
                                                      {"M", 1048576.0},
                                                      {"MiB", 1048576.0},
                                                      {"MB", 1e6},
                                                      {"G", 1073741824.0},
                                                      {"GiB", 1073741824.0},
                                                      {"GB", 1e9}};
  auto it = units.find(unit);
  if (it == units.end()) fail("bad size unit in '{}' (use B, KiB, MiB, GiB, KB, MB or GB)", s);
  const double b = v * it->second;
  if (!(b >= 0) || b > 1.8e19) fail("size '{}' is out of range", s);
  return static_cast<uint64_t>(std::llround(b));
}

VerifyReport verify_artifact(const ArtifactReader& r, const VerifyOptions& o) {
  VerifyReport rep;
  const Program& p = r.program();
  auto bad = [&](std::string why) {
    rep.ok = false;
    rep.reasons.push_back(std::move(why));
  };
  // Loading: what Model::open does with the artifact beyond the reader (artifact/load.h).
  std::string load_error;
  try {
    load_artifact(r);
  } catch (const Error& e) {
    load_error = e.what();
    const std::string prefix = r.path() + ": ";
    if (load_error.rfind(prefix, 0) == 0) load_error.erase(0, prefix.size());
    bad("the runtime refuses to load it: " + load_error);
  }
  const std::string recorded = r.recipe_name();
  const std::string recipe = o.recipe.empty() ? recorded : o.recipe;
  const RecipeTraits t = recipe_traits(recipe);
  if (recipe != recorded)
    bad(fmt::format("the artifact was exported with recipe {}, not {}", recorded, recipe));

  // Delegation: every op on the GPU.
  int on_cpu = 0;
  for (size_t k = 0; k < p.ops.size(); ++k)
    if (p.ops[k].backend != BackendKind::Vulkan) {
      if (on_cpu++ < 3) {
        const auto& outs = p.ops[k].outputs;
        bad(fmt::format("op {} ({}, output {}) is assigned to the {} backend, not vulkan", k,
                        p.ops[k].family, outs.empty() ? "?" : p.tensors[outs[0]].name,
                        backend_name(p.ops[k].backend)));
      }
    }
  if (on_cpu > 3) bad(fmt::format("{} ops in all are not on the vulkan backend", on_cpu));

  // Op families the recipe needs.
  std::map<std::string, int> fam;
  for (const Op& op : p.ops) fam[op.family]++;
  auto need = [&](const char* family, const char* why) {
    if (!fam.count(family))
      bad(fmt::format("recipe {} needs {} ops ({}), the program has none", recipe, family, why));
  };
  need("attention", "attention with a KV cache");
  if (t.act8) need("linear_8da4w", "int8-activation int4-weight linear");
  if (t.q4w) need("linear_q4w", "int4 weight-only linear");
  if (t.emb_q4) need("embedding_q4", "4-bit embedding");
  if (t.quantized() && fam.count("linear"))
    bad(fmt::format("recipe {} quantizes every linear, but {} linear ops are left in float", recipe,
                    fam["linear"]));
  if (!t.emb_q4 && fam.count("embedding_q4"))
    bad(fmt::format("recipe {} has a float embedding, the program quantizes it", recipe));
  if (!t.quantized() && (fam.count("linear_8da4w") || fam.count("linear_q4w")))
    bad(fmt::format("recipe {} does not quantize linears, the program does", recipe));

  // fp16 storage.
  int f16_acts = 0, f16_kv = 0, f32_kv = 0;
  for (const TensorDecl& d : p.tensors) {
    if (d.kind == TensorKind::Activation && d.dtype == DType::F16) ++f16_acts;
    if (d.kind == TensorKind::KVCache) (d.dtype == DType::F16 ? f16_kv : f32_kv)++;
  }
  if (t.fp16) {
    if (f16_acts == 0)
      bad(fmt::format("recipe {} stores activations in fp16, the program has no f16 activation",
                      recipe));
    if (f32_kv > 0)
      bad(fmt::format("recipe {} keeps the KV cache in fp16, {} caches are f32", recipe, f32_kv));
  } else if (f16_acts > 0 || f16_kv > 0) {
    bad(fmt::format("recipe {} is fp32, the program has f16 activations or caches", recipe));
  }

  // Float weights and quantization scales must be finite (the exporter refuses NaN/Inf sources;
  // a matching hash only proves the file is what was written).
  int non_finite = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorDecl& d = p.tensors[i];
    if (d.kind != TensorKind::Weight || (d.dtype != DType::F32 && d.dtype != DType::F16)) continue;
    const auto bytes = r.weight(p, static_cast<int32_t>(i));
    const uint64_t n = d.dtype == DType::F32 ? bytes.size() / 4 : bytes.size() / 2;
    for (uint64_t k = 0; k < n; ++k) {
      float v;
      if (d.dtype == DType::F32) {
        std::memcpy(&v, bytes.data() + 4 * k, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * k, 2);
        v = f16_to_f32(h);
      }
      if (!std::isfinite(v)) {
        if (non_finite++ == 0)
          bad(fmt::format("weight {} holds {} at element {} (a damaged export)", d.name,
                          std::isnan(v) ? "NaN" : "Inf", k));
        break;
      }
    }
  }
  if (non_finite > 1) bad(fmt::format("{} weights in all hold NaN or Inf", non_finite));

  if (o.max_size > 0 && r.file_size() > o.max_size)
    bad(fmt::format("the file is {} bytes ({:.1f} MiB), over the limit of {} bytes ({:.1f} MiB)",
                    r.file_size(), r.file_size() / 1048576.0, o.max_size, o.max_size / 1048576.0));

  rep.summary = program_summary(p);
  rep.summary["file"] = r.path();
  rep.summary["file_size"] = r.file_size();
  if (o.max_size > 0) rep.summary["max_size"] = o.max_size;
  rep.summary["format_version"] = r.format_version();
  rep.summary["hash_checked"] = r.data_hash_checked();
  rep.summary["recipe"] = r.recipe();
  rep.summary["model"] = {
      {"arch", arch_name(r.desc().arch)}, {"hf_class", r.desc().hf_class},
      {"layers", r.desc().n_layers},      {"hidden", r.desc().hidden},
      {"vocab", r.desc().vocab},          {"tied_embeddings", r.desc().tied_embeddings}};
  rep.summary["embedded_files"] = r.file_names();
  rep.summary["loads"] = load_error.empty();
  if (!load_error.empty()) rep.summary["load_error"] = load_error;
  rep.summary["ok"] = rep.ok;
  rep.summary["reasons"] = rep.reasons;
  return rep;
}

}  // namespace vkllm
