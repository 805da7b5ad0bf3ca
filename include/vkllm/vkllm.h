// vkllm public API: open a model, create sessions, generate with a per-token callback.
// No Vulkan or internal headers leak through this file.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkllm {

// Every failure a user can act on (bad file, bad argument, no device, context overflow) is an
// Error whose message is one line naming the thing at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

struct ModelOptions {
  std::string backend = "vulkan";  // "vulkan" or "cpu" (the reference)
  std::string device;              // Vulkan device index or name substring; empty: VKLLM_DEVICE or the first GPU
  int context_length = 0;          // 0: the artifact's maximum
};

struct ModelInfo {
  std::string architecture;  // "llama", "qwen3", "phi3"
  std::string recipe;        // "non-quantized" for a Hugging Face folder
  std::string backend, device_name;
  int vocab_size = 0, context_length = 0;
  std::vector<int32_t> eos_ids;
  uint64_t weight_bytes = 0;
};

struct ModelImpl;

// An opened model: a .vkllm artifact, or (CPU reference only) a Hugging Face model folder.
class Model {
 public:
  static std::shared_ptr<Model> open(const std::string& path, const ModelOptions& options = {});
  ~Model();
  const ModelInfo& info() const;
  std::vector<int32_t> encode(const std::string& text, bool add_special = false) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The model's chat format for one user turn, with the assistant prompt appended.
  std::string chat_prompt(const std::string& user_message) const;
  ModelImpl& impl() { return *impl_; }

 private:
  explicit Model(std::unique_ptr<ModelImpl> impl);
  std::unique_ptr<ModelImpl> impl_;
};

struct GenerationOptions {
  int max_new_tokens = 128;
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool stop_at_eos = true;
};

struct GenerationStats {
  int prompt_tokens = 0, generated_tokens = 0;
  double prefill_ms = 0, decode_ms = 0;
  double prefill_tok_s() const { return prefill_ms > 0 ? prompt_tokens * 1000.0 / prefill_ms : 0; }
  double decode_tok_s() const { return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0; }
  bool stopped_by_eos = false, stopped_by_callback = false;
};

// Called with each new token id and its text piece (never a partial UTF-8 sequence); return
// false to stop generating.
using TokenCallback = std::function<bool(int32_t id, const std::string& piece)>;

// A conversation state (KV cache) on a model. Several sessions may share one model.
class Session {
 public:
  explicit Session(std::shared_ptr<Model> model);
  ~Session();
  // Generates from the prompt tokens, continuing the session's context.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerationOptions& opts,
                                const TokenCallback& on_token = nullptr);
  std::vector<int32_t> generate(const std::string& prompt, const GenerationOptions& opts,
                                const TokenCallback& on_token = nullptr);
  void reset();  // clears the context
  const GenerationStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkllm
