// What the runtime takes from an artifact beyond the reader's structural checks (the model
// description, the program and the tensor table are checked by ArtifactReader itself): the
// embedded tokenizer files loaded into a Tokenizer, the chat renderer (the checkpoint's template
// or a native family format: tokenizer/chat_render.h), and
// every embedded JSON file parsed. One function, run by every place that must agree on what
// loads: Model::open (src/runtime/model_impl.cpp), `vkllm verify` (verify_artifact),
// `vkllm tokenize` and `vkllm export` (ArtifactWriter: on its content before writing, and on the
// written file read back before the rename). Whatever it refuses, all of them refuse, with the
// same one-line Error.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "artifact/reader.h"
#include "hf/model_desc.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/tokenizer.h"

namespace vkllm {

struct ArtifactLoad {
  Tokenizer tokenizer;
  ChatRenderer chat;
};

// Throws Error ("<artifact>: <what is wrong>") on the first problem.
ArtifactLoad load_artifact(const ArtifactReader& r);

// The same check on the parts it reads: the artifact's name (for messages), its model
// description and its embedded files (name, bytes), in the order of the metadata.
ArtifactLoad load_artifact_parts(
    const std::string& path, const ModelDesc& desc,
    const std::vector<std::pair<std::string, std::string_view>>& files);

}  // namespace vkllm
