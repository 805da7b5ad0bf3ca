// The kernel registry: the enum Shader of every SPIR-V module (kernels.def, which CMake compiles
// from the same lines), each module's declaration (shader file, defines, its bindings' access, its
// push-constant struct), and the push-constant structs themselves, one per GLSL block layout. A
// dispatch passes one of these structs (never a positional list); test_kernel_decls checks each
// declaration against its module's SPIR-V (bindings, access, push block size).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace vkllm::vk {

// Push-constant blocks (the GLSL `layout(push_constant) uniform PC` of each shader, member for
// member: 32-bit scalars only, so the C++ layout is the std430 one).
struct NoPush {};
struct CountPush {  // add, swiglu, geglu, gemm_peak
  uint32_t n;
};
struct EmbeddingPush {
  uint32_t D, row0, row1, T;
};
struct EmbeddingQ4Push {
  uint32_t D, G, row0, row1, T, row_bytes;
};
struct RmsNormPush {
  uint32_t G, rows;
  float eps;
  uint32_t gemm;  // quantized rows stored in the GEMM's order (quant.glsl gemm_order)
  uint32_t x0;    // the first input value (a fused last_row: the last token's row)
};
struct LinearPush {  // linear.comp: the fp32/fp16 mat-vec
  uint32_t K, Nc, n0, N, T, R;
};
struct GemmPush {  // the tiled GEMMs (linear_mm*, linear_8da4w_mm*, linear_8da4w_rows_coopmat)
  uint32_t K, Nc, n0, N, T, G;
};
struct MatvecPush {  // linear_8da4w.comp, linear_q4w.comp, linear_q4w_mv.comp
  uint32_t K, Nc, n0, N, T, G, R;
};
struct MatvecNormPush {  // linear_8da4w_mv.comp, linear_q4w_mv.comp VKLLM_MV_NORM
  uint32_t K, Nc, n0, N, T, G, R;
  float eps;
};
struct MatvecTailPush {  // linear_8da4w.comp VKLLM_TAIL
  uint32_t K, Nc, n0, N, T, G, R;
  uint32_t groups, W;  // workgroups of every dispatch of the step; the tail row's width
  float eps;
  uint32_t split;  // the first workgroup of the second mat-vec (all of them when there is none)
};
struct FusedMatvecPush {  // linear_8da4w_fused.comp
  uint32_t K, Nc, n0, G, unused;
  float eps;
};
struct QuantPush {  // linear_8da4w_quant.comp
  uint32_t K, T, gemm;
};
struct ChainPush {  // linear_8da4w_chain.comp
  uint32_t stages;
};
struct RopePush {
  uint32_t T, H, hd, R, total, orig, ctx;
};
// rows (the single-sequence attention kernels): the caches' rows, position j at row j % rows (a
// sliding layer's ring, docs/ir.md "KV caches"; the batched variants ignore it).
struct KvStorePush {  // attention.comp VKLLM_KV_STORE
  uint32_t T, W, rows;
};
struct KvStoreRopePush {  // attention.comp VKLLM_KV_STORE VKLLM_ROPE
  uint32_t T, W, R, orig, ctx;
  float eps;
  uint32_t rows;
};
struct AttentionPush {
  uint32_t T, H, Hkv, hd;
  float scale;
  uint32_t S, C, win, rows;
};
struct AttentionBatchPush {
  uint32_t T, H, Hkv, hd;
  float scale;
  uint32_t S, C, BT, win;
};
struct AttentionBatchRopePush {
  uint32_t T, H, Hkv, hd;
  float scale;
  uint32_t S, C, BT, win, R, orig, ctx;
  float eps;
};
struct CombinePush {  // attention.comp VKLLM_COMBINE
  uint32_t TH, hd, S;
};
struct DecodeAttentionPush {  // attention_decode.comp
  uint32_t H, Hkv, hd;
  float scale;
  uint32_t S, C, R, orig, ctx;
  float qeps, keps;
  uint32_t win, rows;
};
struct PrefillAttentionPush {  // (the cooperative-matrix kernel, never windowed, ignores rows)
  uint32_t T, H, Hkv;
  float scale;
  uint32_t win, rows;
};
struct PrefillAttentionRopePush {
  uint32_t T, H, Hkv;
  float scale;
  uint32_t R, orig, ctx;
  float eps;
  uint32_t win, rows;
};
struct BiasAddPush {
  uint32_t n, width;
};
struct ScalePush {
  uint32_t n;
  float s;
};
struct LastRowPush {
  uint32_t N, T;
};
struct LastRowBatchPush {
  uint32_t N, T, OFF;
};
struct ArgmaxPush {
  uint32_t V, chunk, P, n;
};
struct PhysicsPush {
  uint32_t n, words;
};
struct TensorCopyPush {  // coopmat2_copy.comp: the matrix's shape
  uint32_t rows, cols;
};

template <class P>
constexpr uint32_t push_bytes() {
  static_assert((std::is_trivially_copyable_v<P> && sizeof(P) % 4 == 0) || std::is_empty_v<P>,
                "a push-constant struct is 32-bit words");
  return std::is_empty_v<P> ? 0 : static_cast<uint32_t>(sizeof(P));
}

enum class Shader : uint16_t {
#define VK_KERNEL(name, file, defines, access, Push) name,
#define VK_MEASURE_KERNEL VK_KERNEL
#define VK_KERNEL_KHR VK_KERNEL
#include "backend/vulkan/kernels.def"
#undef VK_KERNEL
#undef VK_MEASURE_KERNEL
#undef VK_KERNEL_KHR
};

struct KernelDecl {
  Shader id;
  std::string_view name, file, defines;
  std::string_view access;  // a letter a binding: r, w or b
  uint32_t push_bytes;
  bool measure;  // only in a measurement build
  // A VK_KERNEL_KHR line: compiled by the newer glslangValidator, and not embedded where
  // configure found none (find_shader(module_name(id, f16)) is then null).
  bool khr;
  uint32_t bindings() const { return static_cast<uint32_t>(access.size()); }
};

std::span<const KernelDecl> kernel_decls();
const KernelDecl& kernel_decl(Shader k);
// The embedded module's name: the declaration's, with "_f16" for its fp16 twin.
std::string module_name(Shader k, bool f16);

// The push-constant struct a module's dispatches pass (checked at compile time where the kernel
// is named statically: `Push<Shader::rms_norm>{...}`).
template <Shader k>
struct PushOf;
#define VK_KERNEL(name, file, defines, access, P) \
  template <>                                     \
  struct PushOf<Shader::name> {                   \
    using type = P;                               \
  };
#define VK_MEASURE_KERNEL VK_KERNEL
#define VK_KERNEL_KHR VK_KERNEL
#include "backend/vulkan/kernels.def"
#undef VK_KERNEL
#undef VK_MEASURE_KERNEL
#undef VK_KERNEL_KHR
template <Shader k>
using Push = typename PushOf<k>::type;

}  // namespace vkllm::vk
