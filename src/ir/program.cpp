#include "ir/program.h"

#include "core/error.h"
#include "core/json_int.h"
#include "ir/op_schema.h"

namespace vkllm {

using nlohmann::json;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::Q4:
      return "q4";
    case DType::I8:
      return "i8";
  }
  return "?";
}

DType dtype_from_name(const std::string& s) {
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::Q4, DType::I8})
    if (s == dtype_name(t)) return t;
  fail("unknown dtype '{}'", s);
}

uint64_t dtype_nbytes(DType t, const std::vector<int64_t>& shape) {
  uint64_t rows = 1, cols = shape.empty() ? 1 : static_cast<uint64_t>(shape.back());
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    if (shape[i] < 0 || mul_overflows(rows, static_cast<uint64_t>(shape[i]), &rows))
      fail("tensor shape overflows");
  }
  if (!shape.empty() && shape.back() < 0) fail("negative tensor dimension");
  uint64_t row_bytes;
  switch (t) {
    case DType::F32:
    case DType::I32:
      row_bytes = cols * 4;
      break;
    case DType::F16:
      row_bytes = cols * 2;
      break;
    case DType::I8:
      row_bytes = cols;
      break;
    case DType::Q4:
      row_bytes = (cols + 1) / 2;
      break;
    default:
      fail("bad dtype");
  }
  uint64_t n;
  if (mul_overflows(rows, row_bytes, &n)) fail("tensor size overflows");
  return n;
}

const char* kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Weight:
      return "weight";
    case TensorKind::Activation:
      return "activation";
    case TensorKind::KVCache:
      return "kv_cache";
    case TensorKind::Input:
      return "input";
  }
  return "?";
}

static TensorKind kind_from_name(const std::string& s) {
  for (TensorKind k :
       {TensorKind::Weight, TensorKind::Activation, TensorKind::KVCache, TensorKind::Input})
    if (s == kind_name(k)) return k;
  fail("unknown tensor kind '{}'", s);
}

const char* backend_name(BackendKind b) {
  return b == BackendKind::Vulkan ? "vulkan" : "cpu";
}

int32_t Program::add_tensor(TensorDecl t) {
  if (find(t.name) >= 0) fail("program: duplicate tensor name {}", t.name);
  tensors.push_back(std::move(t));
  return static_cast<int32_t>(tensors.size() - 1);
}

int32_t Program::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

json Program::to_json() const {
  json ts = json::array();
  for (auto& t : tensors) {
    json jt = {{"name", t.name},
               {"dtype", dtype_name(t.dtype)},
               {"kind", kind_name(t.kind)},
               {"shape", t.shape}};
    if (t.kind == TensorKind::Weight) {
      jt["offset"] = t.offset;
      jt["nbytes"] = t.nbytes;
    }
    ts.push_back(jt);
  }
  json os = json::array();
  for (auto& o : ops)
    os.push_back({{"family", o.family},
                  {"inputs", o.inputs},
                  {"outputs", o.outputs},
                  {"attrs", o.attrs},
                  {"backend", backend_name(o.backend)}});
  return {{"tensors", ts},
          {"ops", os},
          {"input_ids", input_ids},
          {"logits", logits},
          {"next_token", next_token},
          {"max_ctx", max_ctx}};
}

Program Program::from_json(const json& j) {
  Program p;
  try {
    for (auto& jt : j.at("tensors")) {
      TensorDecl t;
      t.name = jt.at("name").get<std::string>();
      t.dtype = dtype_from_name(jt.at("dtype").get<std::string>());
      t.kind = kind_from_name(jt.at("kind").get<std::string>());
      t.shape = json_ints<int64_t>(jt.at("shape"), "program: tensor shape");
      if (t.kind == TensorKind::Weight) {
        t.offset = json_int<uint64_t>(jt.at("offset"), "program: weight offset");
        t.nbytes = json_int<uint64_t>(jt.at("nbytes"), "program: weight nbytes");
      }
      p.tensors.push_back(std::move(t));
    }
    for (auto& jo : j.at("ops")) {
      Op o;
      o.family = jo.at("family").get<std::string>();
      o.inputs = json_ints<int32_t>(jo.at("inputs"), "program: op inputs");
      o.outputs = json_ints<int32_t>(jo.at("outputs"), "program: op outputs");
      o.attrs = jo.at("attrs");
      std::string b = jo.at("backend").get<std::string>();
      if (b == "vulkan")
        o.backend = BackendKind::Vulkan;
      else if (b == "cpu")
        o.backend = BackendKind::Cpu;
      else
        fail("program: unknown backend '{}'", b);
      p.ops.push_back(std::move(o));
    }
    p.input_ids = json_int<int32_t>(j.at("input_ids"), "program: input_ids");
    p.logits = json_int<int32_t>(j.at("logits"), "program: logits");
    p.next_token = json_int<int32_t>(j.at("next_token"), "program: next_token");
    p.max_ctx = json_int<int>(j.at("max_ctx"), "program: max_ctx");
  } catch (const json::exception& e) {
    fail("program: {}", e.what());
  }
  p.validate();
  return p;
}

void Program::validate() const {
  const int32_t n = static_cast<int32_t>(tensors.size());
  if (max_ctx < 1 || max_ctx > (1 << 24)) fail("program: max_ctx {} out of range", max_ctx);
  auto check_ref = [&](int32_t i, const char* what) {
    if (i < 0 || i >= n) fail("program: {} refers to tensor {} (have {})", what, i, n);
  };
  check_ref(input_ids, "input_ids");
  check_ref(logits, "logits");
  check_ref(next_token, "next_token");
  for (auto& t : tensors) {
    if (t.shape.empty() || t.shape.size() > 4)
      fail("program: tensor {} has rank {}", t.name, t.shape.size());
    for (size_t d = 0; d < t.shape.size(); ++d) {
      bool token_dim = d == 0 && (t.kind == TensorKind::Activation || t.kind == TensorKind::Input);
      if (t.shape[d] == -1 && token_dim) continue;
      if (t.shape[d] < 1 || t.shape[d] > (int64_t(1) << 32))
        fail("program: tensor {} has dimension {}", t.name, t.shape[d]);
    }
    if (t.kind == TensorKind::Weight && dtype_nbytes(t.dtype, t.shape) != t.nbytes)
      fail("program: weight {} has {} bytes, its dtype and shape need {}", t.name, t.nbytes,
           dtype_nbytes(t.dtype, t.shape));
  }
  if (tensors[input_ids].kind != TensorKind::Input || tensors[input_ids].dtype != DType::I32)
    fail("program: input_ids is not an I32 input tensor");
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op& o = ops[k];
    const OpSchema* sch = find_op_schema(o.family);
    if (!sch) fail("program: op {} has unknown family '{}'", k, o.family);
    if (o.inputs.size() < sch->min_inputs || o.inputs.size() > sch->max_inputs ||
        o.outputs.size() != sch->outputs)
      fail("program: op {} ({}) has the wrong number of inputs or outputs", k, o.family);
    for (auto i : o.inputs) check_ref(i, "an op input");
    for (auto i : o.outputs) {
      check_ref(i, "an op output");
      if (tensors[i].kind != TensorKind::Activation)
        fail("program: op {} ({}) writes a non-activation tensor", k, o.family);
    }
    if (!o.attrs.is_object()) fail("program: op {} attrs are not an object", k);
  }
}

}  // namespace vkllm
