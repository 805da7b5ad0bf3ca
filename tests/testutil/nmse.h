// The normalized mean squared error of a result against its reference, in double:
// sum (got - ref)^2 / sum ref^2 (the measure docs/gates.md's bounds are stated in).
#pragma once
#include <cstddef>
#include <vector>

namespace vkllm::testutil {

inline double nmse(const float* ref, const float* got, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(ref[i]) - got[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return num / den;
}

// ref and got of the same size.
inline double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  return nmse(ref.data(), got.data(), ref.size());
}

}  // namespace vkllm::testutil
