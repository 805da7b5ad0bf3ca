// fuzz_artifact_meta: the artifact's metadata JSON (model description, recipe, embedded files,
// program), a NUL, then the data section. The harness lays out a well-formed file around them
// (layout_meta_input), so each mutation of the metadata reaches the model, program and recipe
// checks, and the load check of verify; whatever verify finds loadable, Model::open must open.
#include "artifact_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> b = vkllm::fuzz::layout_meta_input(data, size);
  vkllm::fuzz::exercise_artifact_and_open(b.data(), b.size(), static_cast<uint32_t>(size));
  return 0;
}
