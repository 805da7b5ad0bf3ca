// The chat page `vkllm serve` answers at GET / : one self-contained HTML file (no framework, no
// external resources) that streams replies from /v1/chat/completions.
#pragma once
#include <string>

namespace vkllm::serve {

const std::string& chat_page();

}  // namespace vkllm::serve
