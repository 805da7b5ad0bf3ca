// The op families' one table (op_schema.cpp): each family's arity, which Program::validate
// checks; its rule for the kinds, dtypes, shapes and attributes of its tensors, which the
// artifact's deep program check runs (artifact/program_check.cpp); and its row of docs/ir.md's
// table, which a unit test keeps equal to the document. A new op family is one row here, its
// CPU and Vulkan evaluation, and its lowering.
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/program.h"

namespace vkllm {

// What an op's rule may ask about the program being checked: op k of p, with defined[i] true
// for the tensors that exist before op k runs (weights, caches, the input, earlier outputs).
class OpCheck {
 public:
  OpCheck(const Program& p, const std::vector<bool>& defined, size_t k)
      : p_(p), defined_(defined), k_(k) {}
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) const {
    fail("program: op {} ({}): {}", k_, p_.ops[k_].family,
         fmt::format(f, std::forward<Args>(args)...));
  }
  const Program& program() const { return p_; }
  const TensorDecl& T(int32_t i) const { return p_.tensors[i]; }
  // A float activation that an earlier op computed; returns its width.
  int64_t act(int32_t i) const;
  // Output o: a float activation [rows, width] (rows -1: T).
  void out_act(int32_t o, int64_t rows, int64_t width) const;
  void weight(int32_t i, std::initializer_list<DType> dts, const std::vector<int64_t>& shape) const;
  const std::vector<int64_t>& shape2(int32_t i) const;  // a 2-D weight's shape
  int64_t iattr(const Op& o, const char* k, int64_t lo, int64_t hi) const;
  double fattr(const Op& o, const char* k) const;  // a finite float
  int64_t rows(int32_t i) const { return T(i).shape[0]; }
  void same_rows(int32_t a, int32_t b) const;

 private:
  const Program& p_;
  const std::vector<bool>& defined_;
  size_t k_;
};

struct OpSchema {
  const char* family;
  size_t min_inputs, max_inputs, outputs;
  // docs/ir.md's columns: inputs, outputs, attributes, semantics.
  const char *inputs_doc, *outputs_doc, *attrs_doc, *semantics_doc;
  // Throws Error (OpCheck::bad) where the op's tensors or attributes break the family's rules.
  void (*check)(const OpCheck& c, const Op& o);
};

std::span<const OpSchema> op_schemas();
const OpSchema* find_op_schema(const std::string& family);  // nullptr for an unknown family
// docs/ir.md's op table (header and one row per family) as markdown.
std::string op_schema_table();

}  // namespace vkllm
