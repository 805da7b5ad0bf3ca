// The token endpoints of `vkllm serve` with llama-server's field names (docs/serve.md):
// POST /tokenize {"content", "add_special", "with_pieces"} -> {"tokens"} and
// POST /detokenize {"tokens"} -> {"content"}. HttpError 400 naming the field at fault.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "vkllm/vkllm.h"

namespace vkllm::serve {

nlohmann::json tokenize(const Model& model, const std::string& body);
nlohmann::json detokenize(const Model& model, const std::string& body);

}  // namespace vkllm::serve
