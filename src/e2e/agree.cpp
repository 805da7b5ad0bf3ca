#include "e2e/agree.h"

#include <algorithm>

#include "artifact/reader.h"
#include "core/error.h"
#include "export/recipe.h"
#include "runtime/executor.h"

namespace vkllm {

double GreedyAgreement::worst_gap() const {
  double w = 0;
  for (const auto& d : differing) w = std::max(w, d.gap);
  return w;
}

double greedy_tie_tolerance(const std::string& recipe) {
  const RecipeTraits t = recipe_traits(recipe);
  return t.act8 || t.fp16 ? 1.5 : 0.01;
}

GreedyAgreement check_greedy_agreement(const std::string& artifact,
                                       const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& generated, bool stopped_by_eos,
                                       double tolerance) {
  ArtifactReader r(artifact);
  const Program& p = r.program();
  const int64_t vocab = p.tensors[p.logits].shape.back();
  if (prompt.empty()) fail("{}: no prompt ids to check", artifact);
  if (static_cast<int64_t>(prompt.size() + generated.size()) > p.max_ctx)
    fail("{}: {} ids exceed the context {}", artifact, prompt.size() + generated.size(), p.max_ctx);
  for (int32_t id : generated)
    if (id < 0 || id >= vocab)
      fail("{}: generated id {} is outside the vocabulary [0, {})", artifact, id, vocab);
  auto ex = make_cpu_executor(p, r);
  std::vector<float> logits(static_cast<size_t>(vocab));
  ex->forward(prompt.data(), static_cast<int>(prompt.size()), 0, logits.data());
  int pos = static_cast<int>(prompt.size());
  GreedyAgreement g;
  g.tolerance = tolerance;
  auto top = [&] {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  for (size_t k = 0; k < generated.size(); ++k) {
    const int32_t best = top(), t = generated[k];
    ++g.steps;
    if (t == best)
      ++g.exact;
    else
      g.differing.push_back(
          {static_cast<int>(k), t, best, double(logits[best]) - double(logits[t])});
    if (k + 1 < generated.size() || stopped_by_eos) {
      if (pos >= p.max_ctx) break;
      ex->forward(&generated[k], 1, pos++, logits.data());
    }
  }
  if (stopped_by_eos) {
    const auto& eos = r.desc().eos_ids;
    int32_t best_eos = -1;
    for (int e : eos)
      if (e >= 0 && e < vocab && (best_eos < 0 || logits[e] > logits[best_eos])) best_eos = e;
    if (best_eos < 0) fail("{}: the run stopped at an eos id but the model has none", artifact);
    const int32_t best = top();
    ++g.steps;
    if (std::find(eos.begin(), eos.end(), best) != eos.end())
      ++g.exact;
    else
      g.differing.push_back({static_cast<int>(generated.size()), best_eos, best,
                             double(logits[best]) - double(logits[best_eos])});
  }
  return g;
}

}  // namespace vkllm
