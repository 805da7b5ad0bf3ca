// A backend's interpreter of a program: one forward over T tokens at positions pos..pos+T-1.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ir/program.h"

namespace vkllm {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the program once. Returns the greedy next token (the program's next_token output).
  // If logits_out is not null it receives the vocab logits of the last token (F32).
  // Throws Error if pos + T exceeds the program's max_ctx.
  virtual int32_t forward(const int32_t* ids, int T, int pos, float* logits_out) = 0;
  virtual const char* name() const = 0;
  // Greedy decoding of several steps at once: feeds `first` at position pos, then each step's own
  // argmax, n steps in all, writing the n argmax tokens to out (tokens past an eos among them are
  // the caller's to discard: the KV rows they wrote lie beyond the position it continues from).
  // A backend that keeps the token on the device runs greedy_batch() steps per submit; callers ask
  // for that many when they can use them (n other than greedy_batch() runs step by step).
  virtual int greedy_batch() const { return 1; }
  virtual void decode_greedy(int32_t first, int pos, int n, int32_t* out) {
    for (int i = 0; i < n; ++i) first = out[i] = forward(&first, 1, pos + i, nullptr);
  }
};

// A program whose weights a backend holds ready (on Vulkan: uploaded to the device once). Every
// executor made from it shares those weights, owns one conversation's state (KV cache,
// activations) and keeps the loaded program alive. Calls on a loaded program and its executors
// must not run concurrently (one device queue).
class LoadedProgram {
 public:
  virtual ~LoadedProgram() = default;
  virtual std::unique_ptr<Executor> make_executor() = 0;
  virtual std::string device_name() const = 0;  // "cpu", or the Vulkan device's name
};

// The CPU reference interpreter (src/backend/cpu/cpu_executor.cpp). The program and the weight
// source must outlive the executor.
std::unique_ptr<Executor> make_cpu_executor(const Program& program, const WeightSource& weights);

}  // namespace vkllm
