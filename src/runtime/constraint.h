// The public vkllm::Constraint (opaque in include/vkllm/vkllm.h): a compiled grammar. The server
// makes one from a response_format schema it has parsed (no second JSON parse).
#pragma once
#include <memory>

#include "grammar/grammar.h"
#include "vkllm/vkllm.h"

namespace vkllm {

class __attribute__((visibility("hidden"))) Constraint {
 public:
  explicit Constraint(std::shared_ptr<const grammar::Grammar> g) : grammar(std::move(g)) {}
  std::shared_ptr<const grammar::Grammar> grammar;
};

inline std::shared_ptr<const Constraint> make_constraint(
    std::shared_ptr<const grammar::Grammar> g) {
  return std::make_shared<const Constraint>(std::move(g));
}

}  // namespace vkllm
