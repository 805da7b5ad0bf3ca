// fuzz_safetensors: a whole .safetensors file (u64 header length, JSON header, data section).
// Accepted files must describe tensors that lie inside the bytes and convert to fp32.
#include "hf/safetensors.h"

#include <algorithm>
#include <cmath>

#include "fuzz_util.h"

using namespace vkllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    SafetensorsFile f(MappedFile::view({data, size}, "fuzz.safetensors"));
    for (const auto& [name, t] : f.tensors()) {
      VKLLM_FUZZ_CHECK(t.data >= data && t.nbytes <= size && t.data + t.nbytes <= data + size);
      VKLLM_FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * st_dtype_size(t.dtype) == t.nbytes);
      // Read the first and last few elements (every byte of a small tensor).
      const int64_t n = t.numel(), k = std::min<int64_t>(n, 16);
      float out[16];
      t.read_f32(0, k, out);
      t.read_f32(n - k, k, out);
    }
  } catch (const Error&) {
  }
  return 0;
}
