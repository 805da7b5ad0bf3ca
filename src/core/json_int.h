// Integers read from untrusted JSON. nlohmann's get<int>() converts a JSON float with a plain
// static_cast, which is undefined behaviour when the value does not fit (1e300 as an int; found by
// fuzz_artifact_meta). These accept only JSON integers that fit T and throw Error otherwise;
// `what` names the value in the message ("model description: hidden").
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"

namespace vkllm {

template <typename T>
T json_int(const nlohmann::json& v, std::string_view what) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (std::in_range<T>(x)) return static_cast<T>(x);
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (std::in_range<T>(x)) return static_cast<T>(x);
  } else {
    fail("{} must be an integer (got {})", what, v.dump());
  }
  fail("{} = {} is out of range", what, v.dump());
}

template <typename T>
std::vector<T> json_ints(const nlohmann::json& v, std::string_view what) {
  if (!v.is_array()) fail("{} must be an array of integers", what);
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& e : v) out.push_back(json_int<T>(e, what));
  return out;
}

}  // namespace vkllm
