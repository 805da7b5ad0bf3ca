// Preparation and recording of the ops that map rows one to one or reduce one row: bias_add,
// the unary ops (scale: kUnaryOps, one shader each) and argmax.
#include <algorithm>
#include <string_view>

#include "backend/vulkan/vk_ops_internal.h"
#include "core/error.h"

namespace vkllm::vk::detail {

// bias_add.comp: the fp32 bias row added to every row of x.
std::unique_ptr<PreparedOp> prep_bias_add(Ctx c) {
  const int32_t x = c.op.inputs[0], b = c.op.inputs[1], y = c.op.outputs[0];
  c.need_float(x);
  c.need_float(y);
  const int64_t N = c.width(x);
  c.need(c.decl(b).kind == TensorKind::Weight && c.decl(b).dtype == DType::F32 &&
             c.decl(b).shape == std::vector<int64_t>{N} && c.width(y) == N &&
             c.per_token(x) == c.per_token(y),
         "bias must be an f32 weight [N] of x's width");
  const Kernel& k = c.kernel(Shader::bias_add, XYSpec{.x16 = c.f16(x), .y16 = c.f16(y)});
  const std::vector<BufRange> r = {c.whole(x), c.whole(b), c.whole(y)};
  VkDescriptorSet set = c.env.kernels.make_set(k, r);
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int T) {
        const uint64_t n = uint64_t(c.rows(x, T)) * N;
        dispatch_flat(cb, k, set, BiasAddPush{u32(n), u32(N)}, ceil_div(n, 64));
      },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  return prepared;
}

namespace {

// The ops of one float input and one float attribute, y = f(x; a) elementwise: each family's
// shader (a UnaryPush: the count and the attribute) and attribute.
struct UnaryOp {
  std::string_view family;
  Shader shader;
  const char* attr;
};
constexpr UnaryOp kUnaryOps[] = {
    {"scale", Shader::scale, "factor"},   // y = x * factor (Gemma's embedding scale)
    {"softcap", Shader::softcap, "cap"},  // y = cap * tanh(x / cap) (final_logit_softcapping)
};

const UnaryOp* find_unary(std::string_view family) {
  for (const UnaryOp& u : kUnaryOps)
    if (u.family == family) return &u;
  return nullptr;
}

}  // namespace

bool unary_op(std::string_view family) {
  return find_unary(family) != nullptr;
}

std::unique_ptr<PreparedOp> prep_unary(Ctx c) {
  const UnaryOp* u = find_unary(c.op.family);
  c.need(u != nullptr, "not a unary op");
  const int32_t x = c.op.inputs[0], y = c.op.outputs[0];
  c.need_float(x);
  c.need_float(y);
  const int64_t N = c.width(x);
  c.need(c.width(y) == N && c.per_token(x) == c.per_token(y), "output must have x's shape");
  const float a = c.attr_f(u->attr);
  const Kernel& k = c.kernel(u->shader, XYSpec{.x16 = c.f16(x), .y16 = c.f16(y)});
  const std::vector<BufRange> r = {c.whole(x), c.whole(y)};
  VkDescriptorSet set = c.env.kernels.make_set(k, r);
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int T) {
        const uint64_t n = uint64_t(c.rows(x, T)) * N;
        dispatch_flat(cb, k, set, UnaryPush{u32(n), a}, ceil_div(n, 64));
      },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  return prepared;
}

std::unique_ptr<PreparedOp> prep_argmax(Ctx c) {
  const int32_t x = c.op.inputs[0], y = c.op.outputs[0];
  c.need_float(x);
  c.need(!c.per_token(x) && c.decl(x).shape[0] == 1 && c.decl(y).dtype == DType::I32,
         "argmax takes [1, V] to i32");
  const int64_t V = c.width(x);
  if (c.env.batched()) {  // one token per output row (argmax_rows.comp): ~32 workgroups a row
    const uint32_t chunk = std::max<uint32_t>(1024, ceil_div(ceil_div(V, 32), 1024) * 1024),
                   P = ceil_div(V, chunk), max_rows = u32(c.env.max_tokens);
    const Kernel& k = c.kernel(Shader::argmax_rows, XSpec{.x16 = c.f16(x)});
    const Buffer part = c.env.alloc.create(uint64_t(P) * max_rows * 8, false, "argmax partials");
    const Buffer count = c.env.alloc.create(uint64_t(max_rows) * 4, false, "argmax counters");
    c.env.alloc.fill(count, 0);
    const std::vector<BufRange> r = {
        c.whole(x), c.whole(y), {part.buf, 0, part.size}, {count.buf, 0, count.size}};
    VkDescriptorSet set = c.env.kernels.make_set(k, r);
    auto prepared = std::make_unique<PreparedOp>(
        [=, &k](VkCommandBuffer cb, int) {
          const uint32_t n = c.rows(x, 1);
          if (n > max_rows) fail("argmax: {} rows, at most {}", n, max_rows);
          dispatch_flat(cb, k, set, ArgmaxPush{u32(V), chunk, P, n}, n * P);
        },
        nullptr);
    prepared->phases = {phase_of(k, r)};
    return prepared;
  }
  // Up to 128 workgroups of 1,024-value multiples each; the last to finish merges their partials
  // and ends the decode step (argmax.comp: the token into the next step's input ids and the
  // submit's tokens, the position advanced).
  const uint32_t chunk = std::max<uint32_t>(1024, ceil_div(ceil_div(V, 128), 1024) * 1024),
                 P = ceil_div(V, chunk);
  const Kernel& k = c.kernel(Shader::argmax, XSpec{.x16 = c.f16(x)});
  const Buffer part = c.env.alloc.create(uint64_t(P) * 8, false, "argmax partials");
  const Buffer count = c.env.alloc.create(4, false, "argmax counter");
  c.env.alloc.fill(count, 0);
  // (A program without input ids, as op tests build: the token goes to a scratch word.)
  const BufRange ids = c.p.input_ids >= 0
                           ? c.whole(c.p.input_ids)
                           : BufRange{c.env.alloc.create(4, false, "argmax ids").buf, 0, 4};
  const Buffer& tokens = c.env.tokens;
  c.need(tokens.buf != VK_NULL_HANDLE, "no token buffer for the decode steps");
  const std::vector<BufRange> r = {c.whole(x),
                                   {part.buf, 0, part.size},
                                   c.whole(y),
                                   {count.buf, 0, count.size},
                                   {c.env.step.buf, 0, c.env.step.size},
                                   ids,
                                   {tokens.buf, 0, tokens.size}};
  VkDescriptorSet set = c.env.kernels.make_set(k, r);
  const uint32_t ntok = u32(static_cast<int64_t>(tokens.size / 4));
  auto prepared = std::make_unique<PreparedOp>(
      [=, &k](VkCommandBuffer cb, int) {
        dispatch(cb, k, set, ArgmaxPush{u32(V), chunk, P, ntok}, P);
      },
      nullptr);
  prepared->phases = {phase_of(k, r)};
  return prepared;
}

}  // namespace vkllm::vk::detail
