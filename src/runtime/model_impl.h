// What a public vkllm::Model holds: the program (its KV rows set to the chosen context length,
// sliding-window layers' caches as rings), the weights loaded once on the chosen backend, the
// tokenizer. Sessions make their executors (KV cache, activations) from `loaded` and take turns
// on it under `run_mu`.
#pragma once
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/executor.h"
#include "hf/model_desc.h"
#include "ir/program.h"
#include "runtime/generate.h"
#include "vkllm/vkllm.h"

namespace vkllm {

class Tokenizer;
namespace grammar {
class TokenIndex;
}
struct ReferenceModel;
class ArtifactReader;
class ChatRenderer;

// Hidden: libvkllm.so exports the public classes, not their insides.
struct __attribute__((visibility("hidden"))) Model::Impl {
  Impl();
  ~Impl();
  ModelOptions options;
  ModelInfo info;
  ModelDesc desc;
  std::unique_ptr<ReferenceModel> reference;  // a Hugging Face folder (weights in memory)
  std::unique_ptr<ArtifactReader> artifact;   // a .vkllm artifact (weights mapped)
  // The program as run: the chosen context's KV rows, sliding-window layers' caches as rings.
  std::optional<Program> resized;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatRenderer> chat;     // the checkpoint's chat template or a native format
  std::shared_ptr<LoadedProgram> loaded;  // the weights on the backend
  std::mutex run_mu;                      // one session at a time on the backend
  // The open's stages (ms): the model file (an artifact mapped and its header, metadata and
  // program checked; or a checkpoint's weights read and lowered), then its tokenizer and chat
  // template (parsed and checked). An artifact's are parsed on a thread of their own while the
  // backend loads: open_tokenizer_ms is then the time the open still waited for them after the
  // backend, tokenizer_parse_ms the parse's own time.
  double open_model_ms = 0, open_tokenizer_ms = 0, tokenizer_parse_ms = 0;

  // The vocabulary's index for constrained generation, built on first use (~0.1 s).
  std::shared_ptr<const grammar::TokenIndex> token_index();

  void open(const std::string& path);  // a folder (Hugging Face) or a file (artifact)
  const Program& program() const;
  const Tokenizer& tokenizer() const;

 private:
  std::mutex index_mu_;
  std::shared_ptr<const grammar::TokenIndex> index_;
  void open_hf_dir(const std::string& dir);
  void open_artifact(const std::string& path);
  std::future<void> tokenizer_parse_;  // an artifact's tokenizer and chat template being parsed
  void finish_tokenizer();             // waits for them (rethrowing the parse's error)
  const WeightSource& weights() const;
  void load();  // the backend: device, weights
};

// The library's own tools (vkllm bench --parallel) reach a Model's insides through this.
struct ModelAccess {
  static Model::Impl& of(const Model& m) { return *m.impl_; }
};

// Error with one line on an option out of range (Session and Engine check the same).
void check_generation_options(const GenerationOptions& o);
SamplingParams sampling_params(const GenerationOptions& o);

}  // namespace vkllm
