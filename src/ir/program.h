// The program: what the exporter (the compiler) emits and every backend interprets.
// A program computes one forward pass over T new tokens at positions pos..pos+T-1, reading and
// extending the KV cache. Semantics of each op family: docs/ir.md.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace vkllm {

// Element types. Q4 = signed int4 in [-8, 7], stored two per byte as the unsigned nibble q + 8;
// element 2i in the low nibble of byte i, element 2i+1 in the high nibble. Rows are padded to
// whole bytes.
enum class DType : uint8_t { F32 = 0, F16 = 1, I32 = 2, Q4 = 3, I8 = 4 };
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& s);  // throws Error
// Bytes for a row-major tensor of this shape (Q4: rows of the last dim padded to whole bytes).
uint64_t dtype_nbytes(DType t, const std::vector<int64_t>& shape);

enum class TensorKind : uint8_t {
  Weight = 0,      // constant data stored in the artifact
  Activation = 1,  // scratch produced by an op; first dim is the token count T (shape[0] == -1)
  KVCache = 2,     // persistent across forwards: [max_ctx, n_kv_heads * head_dim]
  Input = 3,       // the token ids, I32 [T] (shape {-1})
};
const char* kind_name(TensorKind k);

struct TensorDecl {
  std::string name;
  DType dtype = DType::F32;
  TensorKind kind = TensorKind::Weight;
  std::vector<int64_t> shape;  // Activation/Input: shape[0] == -1 stands for T
  uint64_t offset = 0;         // Weight: byte offset in the artifact's data section
  uint64_t nbytes = 0;         // Weight: byte size
};

enum class BackendKind : uint8_t { Vulkan = 0, Cpu = 1 };
const char* backend_name(BackendKind b);

struct Op {
  std::string family;            // "embedding", "rms_norm", "linear", ... (docs/ir.md)
  std::vector<int32_t> inputs;   // tensor indices
  std::vector<int32_t> outputs;  // tensor indices
  nlohmann::json attrs = nlohmann::json::object();
  BackendKind backend = BackendKind::Vulkan;
};

struct Program {
  std::vector<TensorDecl> tensors;
  std::vector<Op> ops;
  int32_t input_ids = -1;   // the Input tensor
  int32_t logits = -1;      // F32 [1, vocab]: logits of the last token of the forward
  int32_t next_token = -1;  // I32 [1]: argmax of logits (greedy), computed on the device
  int max_ctx = 0;          // KV cache rows

  int32_t add_tensor(TensorDecl t);             // returns the index
  int32_t find(const std::string& name) const;  // -1 if absent
  nlohmann::json to_json() const;
  static Program from_json(const nlohmann::json& j);  // structural validation; throws Error
  // Checks every reference, shape and attribute the interpreter relies on; throws Error.
  void validate() const;
};

// Where weight bytes live: the artifact's mapped data section, or memory owned by an in-memory
// lowering (the CPU engine straight from a Hugging Face checkpoint).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::span<const uint8_t> weight(const Program& p, int32_t tensor) const = 0;
};

}  // namespace vkllm
