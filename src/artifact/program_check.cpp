#include "artifact/program_check.h"

#include <vector>

#include "core/error.h"
#include "ir/op_schema.h"

namespace vkllm {

namespace {

class Checker {
 public:
  explicit Checker(const Program& p) : p_(p), defined_(p.tensors.size(), false) {}

  void run() {
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      const TensorDecl& t = p_.tensors[i];
      if (t.kind != TensorKind::Activation) defined_[i] = true;
      if (t.kind == TensorKind::KVCache && (t.shape.size() != 2 || t.shape[0] != p_.max_ctx ||
                                            (t.dtype != DType::F32 && t.dtype != DType::F16)))
        fail("program: KV cache {} must be f32/f16 [max_ctx={}, width]", t.name, p_.max_ctx);
      if (t.kind == TensorKind::Activation &&
          (t.shape.size() != 2 || (t.shape[0] != -1 && t.shape[0] != 1)))
        fail("program: activation {} must have shape [T or 1, width]", t.name);
    }
    const TensorDecl& ids = p_.tensors[p_.input_ids];
    if (ids.shape != std::vector<int64_t>{-1}) fail("program: input_ids must have shape [T]");
    for (size_t k = 0; k < p_.ops.size(); ++k) {
      // Each op by its family's rule (ir/op_schema.cpp); validate() has checked the family.
      const Op& o = p_.ops[k];
      const OpCheck c(p_, defined_, k);
      find_op_schema(o.family)->check(c, o);
      for (auto t : o.outputs) {
        if (defined_[t]) c.bad("writes {} a second time", p_.tensors[t].name);
        defined_[t] = true;
      }
    }
    const TensorDecl& lg = p_.tensors[p_.logits];
    if (lg.kind != TensorKind::Activation || lg.dtype != DType::F32 || lg.shape[0] != 1 ||
        !defined_[p_.logits])
      fail("program: logits must be an f32 activation [1, vocab] computed by the program");
    bool argmax_ok = false;
    for (const Op& o : p_.ops)
      if (o.family == "argmax" && o.outputs[0] == p_.next_token && o.inputs[0] == p_.logits)
        argmax_ok = true;
    if (!argmax_ok) fail("program: next_token must be the argmax of the logits");
  }

 private:
  const Program& p_;
  std::vector<bool> defined_;
};

}  // namespace

void check_program_semantics(const Program& p) {
  p.validate();
  Checker(p).run();
}

}  // namespace vkllm
