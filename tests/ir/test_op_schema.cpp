// The op-schema table (src/ir/op_schema.cpp) against docs/ir.md and the checks it serves.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "ir/op_schema.h"

namespace vkllm {
namespace {

// docs/ir.md's op table is the schema's, character for character: a family added, renamed or
// redocumented in one place and not the other fails here.
TEST(OpSchema, DocsTableIsTheSchemaTable) {
  std::ifstream f(std::string(VKLLM_SOURCE_DIR) + "/docs/ir.md");
  ASSERT_TRUE(f) << "docs/ir.md";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str(), table = op_schema_table();
  EXPECT_NE(doc.find(table), std::string::npos)
      << "docs/ir.md's op table differs from src/ir/op_schema.cpp's; the schema's table:\n"
      << table;
}

// One program: x = embedding(ids); y = rms_norm(x); logits = linear(last_row(y)); argmax.
Program small_program() {
  Program p;
  p.max_ctx = 8;
  auto t = [&](const char* n, DType d, TensorKind k, std::vector<int64_t> s) {
    TensorDecl td{n, d, k, s, 0, 0};
    if (k == TensorKind::Weight) td.nbytes = dtype_nbytes(d, s);
    return p.add_tensor(td);
  };
  p.input_ids = t("ids", DType::I32, TensorKind::Input, {-1});
  const int32_t emb = t("emb", DType::F32, TensorKind::Weight, {5, 4});
  const int32_t nw = t("nw", DType::F32, TensorKind::Weight, {4});
  const int32_t lw = t("lw", DType::F32, TensorKind::Weight, {5, 4});
  const int32_t x = t("x", DType::F32, TensorKind::Activation, {-1, 4});
  const int32_t y = t("y", DType::F32, TensorKind::Activation, {-1, 4});
  const int32_t last = t("last", DType::F32, TensorKind::Activation, {1, 4});
  p.logits = t("logits", DType::F32, TensorKind::Activation, {1, 5});
  p.next_token = t("next", DType::I32, TensorKind::Activation, {1, 1});
  p.ops.push_back({"embedding", {p.input_ids, emb}, {x}});
  p.ops.push_back({"rms_norm", {x, nw}, {y}, {{"eps", 1e-5}, {"group", 4}}});
  p.ops.push_back({"last_row", {y}, {last}});
  p.ops.push_back({"linear", {last, lw}, {p.logits}});
  p.ops.push_back({"argmax", {p.logits}, {p.next_token}});
  return p;
}

std::string error_of(const Program& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// validate() takes each family's arity from the table.
TEST(OpSchema, ValidateChecksEachFamilysArity) {
  EXPECT_EQ(error_of(small_program()), "");
  for (const OpSchema& s : op_schemas()) {
    EXPECT_NE(find_op_schema(s.family), nullptr);
    EXPECT_LE(s.min_inputs, s.max_inputs) << s.family;
  }
  Program p = small_program();
  p.ops[1].inputs.push_back(p.ops[1].inputs[1]);  // rms_norm with three inputs
  EXPECT_NE(error_of(p).find("wrong number of inputs"), std::string::npos) << error_of(p);
  p = small_program();
  p.ops[1].family = "layer_norm";
  EXPECT_NE(error_of(p).find("unknown family 'layer_norm'"), std::string::npos) << error_of(p);
  EXPECT_EQ(find_op_schema("layer_norm"), nullptr);
}

// A family's rule runs on its op (here rms_norm's: the group must divide the width).
TEST(OpSchema, EachFamilysRuleChecksItsOp) {
  Program p = small_program();
  const std::vector<bool> defined(p.tensors.size(), true);
  const OpCheck c(p, defined, 1);
  EXPECT_NO_THROW(find_op_schema("rms_norm")->check(c, p.ops[1]));
  p.ops[1].attrs["group"] = 3;
  try {
    find_op_schema("rms_norm")->check(c, p.ops[1]);
    ADD_FAILURE() << "group 3 of width 4 passed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "program: op 1 (rms_norm): group 3 does not divide the width 4");
  }
}

// bias_add's rule: an f32 weight [N] for rows of width N.
TEST(OpSchema, BiasAddTakesAnF32RowOfTheInputsWidth) {
  auto error = [](DType d, int64_t n) {
    Program p = small_program();
    const int32_t x = p.ops[1].outputs[0];  // y [-1, 4]
    const int32_t b = p.add_tensor({"bias", d, TensorKind::Weight, {n}, 0, dtype_nbytes(d, {n})});
    const int32_t yb = p.add_tensor({"yb", DType::F32, TensorKind::Activation, {-1, 4}, 0, 0});
    p.ops.insert(p.ops.begin() + 2, Op{"bias_add", {x, b}, {yb}});
    const std::vector<bool> defined(p.tensors.size(), true);
    try {
      find_op_schema("bias_add")->check(OpCheck(p, defined, 2), p.ops[2]);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(DType::F32, 4), "");
  EXPECT_EQ(error(DType::F32, 3), "program: op 2 (bias_add): weight bias has the wrong shape");
  EXPECT_EQ(error(DType::F16, 4),
            "program: op 2 (bias_add): bias must be a weight of another dtype (has f16)");
}

// Gemma's ops: scale takes a finite float factor, softcap a positive cap; geglu two inputs of one
// shape; attention's optional window a positive integer.
TEST(OpSchema, GemmaOpsAndTheAttentionWindow) {
  auto error = [](const Op& o, size_t at) {
    Program p = small_program();
    p.ops.insert(p.ops.begin() + static_cast<long>(at), o);
    const std::vector<bool> defined(p.tensors.size(), true);
    try {
      find_op_schema(o.family)->check(OpCheck(p, defined, at), p.ops[at]);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  Program p = small_program();
  const int32_t x = p.ops[1].outputs[0];  // y [-1, 4]
  EXPECT_EQ(error(Op{"scale", {x}, {x}, {{"factor", 8.0}}}, 2), "");
  EXPECT_EQ(error(Op{"scale", {x}, {x}, {{"factor", 1e300}}}, 2),
            "program: op 2 (scale): attribute factor = 1e+300 is not a finite float");
  EXPECT_EQ(error(Op{"scale", {x}, {x}}, 2),
            "program: op 2 (scale): attribute factor is missing or not a number");
  EXPECT_EQ(error(Op{"geglu", {x, x}, {x}}, 2), "");
  EXPECT_EQ(error(Op{"softcap", {x}, {x}, {{"cap", 30.0}}}, 2), "");
  EXPECT_EQ(error(Op{"softcap", {x}, {x}, {{"cap", 0.0}}}, 2),
            "program: op 2 (softcap): attribute cap must be positive");
  EXPECT_EQ(error(Op{"softcap", {x}, {x}}, 2),
            "program: op 2 (softcap): attribute cap is missing or not a number");
  ASSERT_NE(find_op_schema("attention"), nullptr);
  EXPECT_EQ(find_op_schema("geglu")->min_inputs, 2u);
  // The window: a program with an attention op (q = k = v = [T, 4], one head of 4).
  auto attention_error = [&](nlohmann::json attrs) {
    Program q = small_program();
    const int32_t a = q.ops[1].outputs[0];
    const int32_t kc = q.add_tensor({"kc", DType::F32, TensorKind::KVCache, {8, 4}, 0, 0});
    const int32_t vc = q.add_tensor({"vc", DType::F32, TensorKind::KVCache, {8, 4}, 0, 0});
    const int32_t o = q.add_tensor({"o", DType::F32, TensorKind::Activation, {-1, 4}, 0, 0});
    q.ops.insert(q.ops.begin() + 2, Op{"attention", {a, a, a, kc, vc}, {o}, attrs});
    const std::vector<bool> defined(q.tensors.size(), true);
    try {
      find_op_schema("attention")->check(OpCheck(q, defined, 2), q.ops[2]);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json attrs = {{"n_heads", 1}, {"n_kv_heads", 1}, {"head_dim", 4}, {"scale", 0.5}};
  EXPECT_EQ(attention_error(attrs), "");
  attrs["window"] = 3;
  EXPECT_EQ(attention_error(attrs), "");
  attrs["window"] = 0;
  EXPECT_EQ(attention_error(attrs),
            "program: op 2 (attention): attribute window = 0 is out of range");
  attrs["window"] = "8";
  EXPECT_EQ(attention_error(attrs),
            "program: op 2 (attention): attribute window is missing or not an integer");
}

}  // namespace
}  // namespace vkllm
