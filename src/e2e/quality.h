// Quantization quality (docs/quality.md): a recipe's next-token distributions against the fp32
// reference's, on the CPU backend, over a fixed teacher-forced token sequence. Used by the
// exporter's quality test (tests/export/test_quality.cpp) and by the twin matrix's quality gate.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/executor.h"

namespace vkllm {

// The fixed probe: n token ids from an LCG (seed 12345), each < vocab.
std::vector<int32_t> quality_probe_ids(int64_t vocab, int n = 32);

// The logits after each id, feeding one id per forward at positions 0, 1, ...
std::vector<std::vector<float>> teacher_forced_logits(Executor& ex, const std::vector<int32_t>& ids,
                                                      int64_t vocab);

struct QualityStats {
  double kl_mean = 0, kl_max = 0;  // KL(reference || candidate) in nats, per position
  double top1 = 0;                 // fraction of positions whose argmax agrees
  int positions = 0;
};

// Compares two sequences of logits of equal shape; throws Error when the shapes differ.
QualityStats compare_logits(const std::vector<std::vector<float>>& reference,
                            const std::vector<std::vector<float>>& candidate);

// The per-recipe gate (docs/quality.md explains how it was set from the measured values).
struct QualityGate {
  double kl_mean_max = 0, top1_min = 0;
  bool passes(const QualityStats& q) const {
    return q.kl_mean <= kl_mean_max && q.top1 >= top1_min;
  }
};
QualityGate quality_gate_for(const std::string& recipe);

// An artifact against the fp32 reference (a Hugging Face folder, lowered in fp32, or a
// non-quantized artifact), both on the CPU backend, over quality_probe_ids(vocab).
QualityStats measure_artifact_quality(const std::string& artifact, const std::string& reference);

}  // namespace vkllm
