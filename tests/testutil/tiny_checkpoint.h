// Small random Hugging Face checkpoints (config.json + model.safetensors) for fast unit tests.
// The tiny twins of `vkllm synth` are the real-vocabulary ones; these are smaller still.
#pragma once
#include <cstdint>
#include <string>

#include "hf/model_desc.h"

namespace vkllm::testutil {

// Writes dir/config.json and dir/model.safetensors (bf16 weights, HF tensor names) for a
// small model of the given family: vocab 300, hidden 64, 2 layers, head_dim 16.
// tied: tie_word_embeddings. Returns dir.
std::string write_tiny_checkpoint(const std::string& dir, Arch arch, bool tied = true,
                                  uint64_t seed = 1);

// A small tokenizer that loads (Tokenizer::from_text): byte-level BPE, the 256 byte tokens (ids
// 0-255), special tokens <s> (256) and </s> (257). Checkpoints of any vocab can embed it (export
// refuses a tokenizer that does not load); the matching tokenizer_config.json names <s> and </s>.
std::string tiny_tokenizer_json();
std::string tiny_tokenizer_config_json();

// Lowercase hex sha256 of a file's bytes.
std::string sha256_file_hex(const std::string& path);

// A fresh empty temporary directory under the system temp dir.
std::string temp_dir(const std::string& tag);

// A `vkllm synth` preset's twin with tiny_tokenizer_json() in place of its fixture tokenizer (for
// tests that use ids only): written on the first call for that preset in the process, removed at
// exit. Returns its directory.
const std::string& tokenless_twin(const std::string& preset);

}  // namespace vkllm::testutil
