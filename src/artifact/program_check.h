// Deep checks of a program read from an untrusted file, beyond Program::validate (references and
// byte sizes): every op's input and output kinds, dtypes, shapes and attributes by its family's
// rule (ir/op_schema.h, the table docs/ir.md shows), activations defined before use, and the
// program's logits / next_token. After this
// check an interpreter can index every buffer without further bounds checks.
#pragma once
#include "ir/program.h"

namespace vkllm {

// Throws Error ("program: op 12 (linear_8da4w): ...") on the first violation.
void check_program_semantics(const Program& p);

}  // namespace vkllm
