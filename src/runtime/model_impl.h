// What a public vkllm::Model holds: the program, its weights, the tokenizer, the backend choice.
#pragma once
#include <memory>
#include <string>

#include "hf/model_desc.h"
#include "ir/program.h"
#include "runtime/executor.h"
#include "vkllm/vkllm.h"

namespace vkllm {

class Tokenizer;
struct ReferenceModel;
class ArtifactReader;


struct ModelImpl {
  ModelImpl();
  ~ModelImpl();
  ModelOptions options;
  ModelInfo info;
  ModelDesc desc;
  std::unique_ptr<ReferenceModel> reference;  // a Hugging Face folder on the CPU reference engine
  std::unique_ptr<ArtifactReader> artifact;   // a .vkllm artifact
  std::unique_ptr<Tokenizer> tok;

  void open_hf_dir(const std::string& dir);
  void open_artifact(const std::string& path);
  const Program& program() const;
  const WeightSource& weights() const;
  const Tokenizer& tokenizer() const;
  std::unique_ptr<Executor> make_executor() const;
};

}  // namespace vkllm
