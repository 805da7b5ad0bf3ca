// fuzz_artifact: a whole .vkllm file (header, metadata, data section, trailer). The harness
// recomputes the three hashes (fix_hashes) so that mutated headers and metadata are checked by the
// reader rather than stopped by a hash mismatch; the last input byte picks the token of the
// forward pass. Whatever verify finds loadable, Model::open must open.
#include "artifact_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  vkllm::fuzz::fix_hashes(b);
  vkllm::fuzz::exercise_artifact_and_open(b.data(), b.size(), size ? data[size - 1] : 0);
  return 0;
}
