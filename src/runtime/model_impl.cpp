#include "runtime/model_impl.h"

#include "core/error.h"
#include "hf/checkpoint.h"
#include "runtime/reference.h"
#include "tokenizer/tokenizer.h"

namespace vkllm {

ModelImpl::ModelImpl() = default;
ModelImpl::~ModelImpl() = default;

void ModelImpl::open_hf_dir(const std::string& dir) {
  HfCheckpoint ckpt(dir);
  desc = ckpt.desc();
  const int ctx = options.context_length > 0 ? std::min(options.context_length, desc.max_pos) : std::min(desc.max_pos, 4096);
  reference = load_reference_model(ckpt, ctx);
  tok = std::make_unique<Tokenizer>(Tokenizer::from_files(ckpt.tokenizer_json_path(), ckpt.tokenizer_config_path()));
  info.architecture = arch_name(desc.arch);
  info.recipe = "non-quantized";
  info.backend = "cpu";
  info.device_name = "cpu";
  info.vocab_size = desc.vocab;
  info.context_length = ctx;
  info.eos_ids.assign(desc.eos_ids.begin(), desc.eos_ids.end());
  for (auto& w : reference->weights.data) info.weight_bytes += w.size();
}

const Program& ModelImpl::program() const {
  if (reference) return reference->lowered.program;
  fail("no model loaded");
}

const WeightSource& ModelImpl::weights() const {
  if (reference) return reference->weights;
  fail("no model loaded");
}

const Tokenizer& ModelImpl::tokenizer() const {
  if (!tok) fail("this model has no tokenizer");
  return *tok;
}

std::unique_ptr<Executor> ModelImpl::make_executor() const {
  if (options.backend == "cpu") return make_cpu_executor(program(), weights());
  fail("the Vulkan backend is not available in this build yet");
}

void ModelImpl::open_artifact(const std::string& path) { fail("{}: artifacts are not supported yet", path); }

}  // namespace vkllm
