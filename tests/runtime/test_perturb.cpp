// The perturbation table (docs/gates.md): subtly broken kernels, each made by damaging the CPU
// reference executor (a test-only hook after each op, src/backend/cpu/cpu_hook.h, or a patched
// weight), run against the gates that compare a backend with a reference:
//  - op:     the per-op comparison of the Vulkan op tests (testutil/op_tolerance.h), here the
//            damaged op's output against the undamaged one on the same inputs (the prompt's
//            prefill), or exact equality for what the op tests compare exactly (argmax, cache
//            rows);
//  - agree:  `vkllm verify --agree`'s rule (check_agreement with the recipe's bounds);
//  - golden: the e2e golden gate, 32 greedy ids of the fp32 artifact == the transformers golden.
// (The quality gate is left out: int4's own ~3 nats on the twins hide every case, docs/gates.md.)
// Every case must be caught by the gates its row names, and the undamaged executor passes them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "artifact/reader.h"
#include "backend/cpu/cpu_hook.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "export/exporter.h"
#include "hf/synth.h"
#include "runtime/agreement.h"
#include "testutil/op_tolerance.h"
#include "testutil/tiny_checkpoint.h"

using namespace vkllm;
using nlohmann::json;

namespace {

constexpr int kAgreeSteps = 16, kGoldenSteps = 32;  // golden: as the e2e stage

// One weight tensor replaced (a damaged copy); the others read through.
class PatchedWeights final : public WeightSource {
 public:
  explicit PatchedWeights(const WeightSource& base) : base_(base) {}
  std::map<int32_t, std::vector<uint8_t>> over;
  std::span<const uint8_t> weight(const Program& p, int32_t t) const override {
    auto it = over.find(t);
    return it == over.end() ? base_.weight(p, t) : std::span<const uint8_t>(it->second);
  }

 private:
  const WeightSource& base_;
};

struct Artifact {
  std::unique_ptr<ArtifactReader> r;
  const Program& p() const { return r->program(); }
  // The op in the middle of the program of one of the families (the first if none is later).
  size_t middle_op(const std::vector<std::string>& fams) const {
    std::vector<size_t> k;
    for (size_t i = 0; i < p().ops.size(); ++i)
      for (const auto& f : fams)
        if (p().ops[i].family == f) k.push_back(i);
    EXPECT_FALSE(k.empty());
    return k.empty() ? 0 : k[k.size() / 2];
  }
  bool has(const std::vector<std::string>& fams) const {
    for (const Op& op : p().ops)
      for (const auto& f : fams)
        if (op.family == f) return true;
    return false;
  }
  size_t producer(int32_t tensor) const {
    for (size_t i = 0; i < p().ops.size(); ++i)
      if (p().ops[i].outputs[0] == tensor) return i;
    ADD_FAILURE() << "no producer";
    return 0;
  }
};

const std::vector<std::string> kLinears = {"linear", "linear_q4w", "linear_8da4w"};

// A damage: a hook on one op's result and/or patched weights, and the op whose output shows it.
struct Damage {
  CpuOpHook hook;
  std::map<int32_t, std::vector<uint8_t>> weights;
  size_t op = 0;
  bool exact = false;  // the op tests compare this op's result exactly (argmax, cache rows)
  bool applies = true;
};

float rms(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return static_cast<float>(std::sqrt(s / double(n)));
}

int64_t width(const Program& p, int32_t t) {
  return p.tensors[t].shape.back();
}

// The cases of docs/gates.md, on artifact `a`.
Damage make_damage(const std::string& name, const Artifact& a) {
  const Program& p = a.p();
  Damage d;
  if (name == "mat-vec row offset") {
    d.op = a.middle_op(kLinears);
    d.hook = [k = d.op](CpuOpState& s) {  // output row 7 of the mat-vec += 0.5 x its RMS
      if (s.op_index != k) return;
      const int32_t o = s.program.ops[k].outputs[0];
      const int64_t N = width(s.program, o);
      for (int t = 0; t < s.T; ++t) {
        float* y = s.buffers[o].data() + t * N;
        y[7] += 0.5f * rms(y, N);
      }
    };
  } else if (name == "group scale x (1 + 2^-8)" || name == "int4 code dropped") {
    d.applies = a.has({"linear_q4w", "linear_8da4w"});
    if (!d.applies) return d;
    d.op = a.middle_op({"linear_q4w", "linear_8da4w"});
    const Op& op = p.ops[d.op];
    if (name[0] == 'g') {  // scale of row 7, group 0
      const int32_t ts = op.inputs[2];
      auto b = a.r->weight(p, ts);
      std::vector<uint8_t> w(b.begin(), b.end());
      float s;
      const size_t at = size_t(7 * p.tensors[ts].shape[1]) * 4;
      std::memcpy(&s, w.data() + at, 4);
      s *= 1.0f + std::ldexp(1.0f, -8);
      std::memcpy(w.data() + at, &s, 4);
      d.weights[ts] = std::move(w);
    } else {  // the code of row 7, column 3 zeroed (value 0 = nibble 8); weight sums unchanged
      const int32_t tq = op.inputs[1];
      auto b = a.r->weight(p, tq);
      std::vector<uint8_t> w(b.begin(), b.end());
      const int64_t K = p.tensors[tq].shape[1];
      uint8_t& byte = w[size_t(7 * ((K + 1) / 2) + 1)];
      byte = static_cast<uint8_t>((byte & 0x0f) | 0x80);
      d.weights[tq] = std::move(w);
    }
  } else if (name == "zero point off by one") {
    d.applies = a.has({"linear_8da4w"});
    if (!d.applies) return d;
    d.op = a.middle_op({"linear_8da4w"});
    // The kernel subtracts (zp + 1) * wsum instead of zp * wsum.
    d.hook = [k = d.op](CpuOpState& s) {
      if (s.op_index != k) return;
      const Op& op = s.program.ops[k];
      const int64_t K = width(s.program, op.inputs[0]), N = width(s.program, op.outputs[0]);
      const int64_t G = op.attrs.at("group").get<int64_t>(), ng = K / G;
      const auto* sc =
          reinterpret_cast<const float*>(s.weights.weight(s.program, op.inputs[2]).data());
      const auto* ws =
          reinterpret_cast<const int32_t*>(s.weights.weight(s.program, op.inputs[3]).data());
      std::vector<int8_t> q(static_cast<size_t>(K));
      for (int t = 0; t < s.T; ++t) {
        float sx;
        int32_t zp;
        cpu::quantize_act_int8(s.buffers[op.inputs[0]].data() + t * K, K, q.data(), &sx, &zp);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t g = 0; g < ng; ++g)
            s.buffers[op.outputs[0]][t * N + n] -= sc[n * ng + g] * sx * float(ws[n * ng + g]);
      }
    };
  } else if (name == "rope at position p - 1") {
    d.op = a.middle_op({"rope"});
    d.hook = [k = d.op](CpuOpState& s) {
      if (s.op_index != k) return;
      const Op& op = s.program.ops[k];
      const auto* inv =
          reinterpret_cast<const float*>(s.weights.weight(s.program, op.inputs[1]).data());
      cpu::rope(s.buffers[op.inputs[0]].data(), s.T, int(op.attrs.at("n_heads").get<int64_t>()),
                int(op.attrs.at("head_dim").get<int64_t>()),
                int(op.attrs.at("rotary_dim").get<int64_t>()), inv, s.pos - 1,
                op.attrs.at("attention_factor").get<float>(), s.buffers[op.outputs[0]].data());
    };
  } else if (name == "KV-cache row left unwritten") {
    d.op = a.middle_op({"attention"});
    d.exact = true;
    // Row 2 of this layer's caches is never written (stays 0); attention reads it as it is.
    d.hook = [k = d.op](CpuOpState& s) {
      const int row = 2;
      if (s.op_index != k || row < s.pos || row >= s.pos + s.T) return;
      const Op& op = s.program.ops[k];
      const auto& I = op.inputs;
      const int H = int(op.attrs.at("n_heads").get<int64_t>());
      const int Hkv = int(op.attrs.at("n_kv_heads").get<int64_t>());
      const int hd = int(op.attrs.at("head_dim").get<int64_t>());
      const int64_t kvw = int64_t(Hkv) * hd;
      std::vector<float> kk = s.buffers[I[1]], vv = s.buffers[I[2]];
      std::fill_n(kk.begin() + (row - s.pos) * kvw, kvw, 0.0f);
      std::fill_n(vv.begin() + (row - s.pos) * kvw, kvw, 0.0f);
      cpu::attention(s.buffers[I[0]].data(), kk.data(), vv.data(), s.T, s.pos,
                     s.buffers[I[3]].data(), s.buffers[I[4]].data(),
                     s.program.tensors[I[3]].dtype == DType::F16, H, Hkv, hd,
                     op.attrs.at("scale").get<float>(), s.buffers[op.outputs[0]].data());
    };
  } else if (name == "argmax returns the second best") {
    d.op = a.middle_op({"argmax"});
    d.exact = true;
    d.hook = [k = d.op](CpuOpState& s) {
      if (s.op_index != k) return;
      const Op& op = s.program.ops[k];
      const auto& l = s.buffers[op.inputs[0]];
      const int32_t best = cpu::argmax(l.data(), int64_t(l.size()));
      int64_t second = best == 0 ? 1 : 0;
      for (int64_t i = 0; i < int64_t(l.size()); ++i)
        if (i != best && l[i] > l[second]) second = i;
      s.buffers[op.outputs[0]][0] = float(second);
    };
  } else if (name == "+30 on logit row 1000") {
    d.op = a.producer(p.logits);
    d.hook = [k = d.op](CpuOpState& s) {
      if (s.op_index != k) return;
      auto& y = s.buffers[s.program.ops[k].outputs[0]];
      const int64_t V = width(s.program, s.program.ops[k].outputs[0]);
      for (size_t r = 0; r < y.size() / size_t(V); ++r) y[r * V + 1000] += 30.0f;
    };
  } else {
    ADD_FAILURE() << "unknown case " << name;
  }
  return d;
}

struct Twins {
  std::string dir = testutil::temp_dir("perturb");
  json golden;
  std::vector<int32_t> prompt, cont;
  std::string ckpt;
  std::map<std::string, Artifact> art;
  Twins() {
    golden = json::parse(
        read_text_file(std::string(VKLLM_SOURCE_DIR) + "/tests/goldens/tiny-qwen3.json"));
    prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
    cont = golden["continuation_ids"].get<std::vector<int32_t>>();
    SynthOptions so;
    so.preset = "tiny-qwen3";
    so.out_dir = ckpt = dir + "/tiny-qwen3";
    so.no_tokenizer = true;  // only ids are used: a small tokenizer that loads (export checks)
    synth_write(so);
    std::ofstream(ckpt + "/tokenizer.json") << testutil::tiny_tokenizer_json();
    for (const char* r : {"non-quantized", "quantized-int4-weight-only", "quantized-8da4w"}) {
      RecipeOptions o;
      o.recipe = r;
      o.max_context = 128;
      const std::string path = dir + "/" + r + ".vkllm";
      export_checkpoint(ckpt, path, o);
      art[r].r = std::make_unique<ArtifactReader>(path);
    }
  }
};

// The output of op k (and the KV caches after it) in the first forward (the prompt's prefill).
std::vector<float> op_output(const Program& p, const WeightSource& w, CpuOpHook inner, size_t k,
                             const std::vector<int32_t>& prompt) {
  std::vector<float> got;
  auto ex = make_cpu_executor_with_hook(p, w, [&](CpuOpState& s) {
    if (inner) inner(s);
    if (s.op_index != k) return;
    const Op& op = s.program.ops[k];
    got = s.buffers[op.outputs[0]];
    if (op.family == "attention")
      for (int c : {3, 4})
        got.insert(got.end(), s.buffers[op.inputs[c]].begin(), s.buffers[op.inputs[c]].end());
  });
  ex->forward(prompt.data(), int(prompt.size()), 0, nullptr);
  return got;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return std::isfinite(num) ? (den > 0 ? num / den : num) : INFINITY;
}

struct Caught {
  bool op = false, agree = false, golden = false;
  std::string op_note, agree_note;
};

Caught run_gates(const Twins& st, const std::string& recipe, const Damage& d) {
  const Artifact& a = st.art.at(recipe);
  const Program& p = a.p();
  PatchedWeights w(*a.r);
  w.over = d.weights;
  Caught c;
  // op gate
  const auto want = op_output(p, *a.r, {}, d.op, st.prompt);
  const auto got = op_output(p, w, d.hook, d.op, st.prompt);
  const Op& op = p.ops[d.op];
  const double e = nmse(got, want);
  const double bound = testutil::op_nmse_bound(op.family, p.tensors[op.outputs[0]].dtype);
  c.op = d.exact ? got != want : !(e <= bound);
  c.op_note = fmt::format("{} NMSE {:.2g} (bound {:g})", op.family, e, bound);
  // agree gate
  const int64_t V = width(p, p.logits);
  {
    auto test = make_cpu_executor_with_hook(p, w, d.hook);
    auto ref = make_cpu_executor(p, *a.r);
    AgreementOptions o;
    o.max_new_tokens = kAgreeSteps;
    o.bounds = agreement_bounds(recipe);
    const Agreement g = check_agreement(*test, *ref, nullptr, st.prompt, V, o);
    c.agree = !g.ok;
    c.agree_note = g.ok ? fmt::format("{} near ties, top-k {:.2g}, NMSE {:.2g}", g.near_ties,
                                      g.worst_topk_diff, g.worst_nmse)
                        : g.reason;
  }
  // golden gate (the fp32 artifact only)
  if (recipe == "non-quantized") {
    auto ex = make_cpu_executor_with_hook(p, w, d.hook);
    std::vector<int32_t> ids = st.prompt;
    int pos = 0;
    for (int i = 0; i < kGoldenSteps; ++i) {
      const int32_t t = ex->forward(ids.data(), int(ids.size()), pos, nullptr);
      pos += int(ids.size());
      if (t != st.cont.at(size_t(i))) {
        c.golden = true;
        break;
      }
      ids.assign(1, t);
    }
  }
  return c;
}

struct Row {
  std::string name;
  // The gates that must catch it (o: op, a: agree, g: golden), on the exact recipes (fp32
  // arithmetic: non-quantized, int4-weight-only) and on 8da4w; docs/gates.md explains the blanks.
  std::string must_exact, must_8da4w;
};

const std::vector<Row> kTable = {
    {"mat-vec row offset", "oa", "o"},
    {"group scale x (1 + 2^-8)", "o", "o"},
    {"int4 code dropped", "oa", "o"},
    {"zero point off by one", "", "o"},
    {"rope at position p - 1", "oag", "o"},
    {"KV-cache row left unwritten", "oag", "o"},
    {"argmax returns the second best", "oag", "oa"},
    {"+30 on logit row 1000", "oag", "oa"},
};

}  // namespace

TEST(Perturbations, EveryCaseIsCaughtByTheGatesThatMustCatchIt) {
  const Twins st;
  std::printf(
      "| case | recipe | op | agree | golden | op measure | agree: first failure or worst |\n");
  // The undamaged executor passes every gate.
  for (const auto& [recipe, a] : st.art) {
    Damage none;
    none.op = a.middle_op(kLinears);
    const Caught c = run_gates(st, recipe, none);
    EXPECT_FALSE(c.op || c.agree || c.golden)
        << recipe << ": " << c.op_note << "; " << c.agree_note;
    std::printf("| (undamaged) | %s | %s | %s | %s | %s | %s |\n", recipe.c_str(),
                c.op ? "FAIL" : "pass", c.agree ? "FAIL" : "pass",
                recipe == "non-quantized" ? (c.golden ? "FAIL" : "pass") : "-", c.op_note.c_str(),
                c.agree_note.c_str());
  }
  for (const Row& row : kTable)
    for (const auto& [recipe, a] : st.art) {
      const Damage d = make_damage(row.name, a);
      if (!d.applies) continue;
      const Caught c = run_gates(st, recipe, d);
      std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", row.name.c_str(), recipe.c_str(),
                  c.op ? "yes" : "no", c.agree ? "yes" : "no",
                  recipe == "non-quantized" ? (c.golden ? "yes" : "no") : "-", c.op_note.c_str(),
                  c.agree_note.c_str());
      std::fflush(stdout);
      const std::string& must = recipe == "quantized-8da4w" ? row.must_8da4w : row.must_exact;
      if (must.find('o') != std::string::npos) {
        EXPECT_TRUE(c.op) << row.name << " " << recipe;
      }
      if (must.find('a') != std::string::npos) {
        EXPECT_TRUE(c.agree) << row.name << " " << recipe << ": " << c.agree_note;
      }
      if (must.find('g') != std::string::npos && recipe == "non-quantized") {
        EXPECT_TRUE(c.golden) << row.name;
      }
    }
}
