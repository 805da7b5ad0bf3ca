// The kernel registry: the enum Shader of every SPIR-V module (kernels.def, which CMake compiles
// from the same lines), each module's declaration (shader file, defines, its bindings' access, its
// push-constant struct), and the push-constant structs themselves, one per GLSL block layout. A
// dispatch passes one of these structs (never a positional list); test_kernel_decls checks each
// declaration against its module's SPIR-V (bindings, access, push block size).
#pragma once
#include <array>
#include <bit>
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
struct UnaryPush {  // the unary ops (scale.comp): the count and the op's attribute
  uint32_t n;
  float a;
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

// Specialization constants: each module's `layout(constant_id = n)` constants as one struct of
// 32-bit members (bools as 0 or 1), its `fields` giving each member's constant id in member order
// and whether it is an fp16 view flag (any such flag set: the module's _f16 twin). Every member's
// default is the GLSL default, and every constant a module declares is a member:
// test_kernel_decls checks both against the SPIR-V, so a dispatch names what it changes
// (`RmsNormSpec{.x16 = 1}`) and the rest keep the shader's values.
enum SpecKind : uint8_t { kValue, kF16 };
struct SpecField {
  uint32_t id;
  SpecKind kind = kValue;
};
struct NoSpec {};
struct XSpec {  // argmax, argmax_rows
  uint32_t x16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}};
};
struct YSpec {  // embedding_q4
  uint32_t y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}};
};
struct XYSpec {  // rope, bias_add, scale, last_row: input and output dtypes
  uint32_t x16 = 0, y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}};
};
struct EmbeddingSpec {
  uint32_t tab16 = 0, y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}};
};
struct AddSpec {
  uint32_t a16 = 0, b16 = 0, y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}};
};
struct GluSpec {  // swiglu, geglu: gate, up, output
  uint32_t g16 = 0, u16 = 0, y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}};
};
struct RmsNormSpec {
  uint32_t x16 = 0, y16 = 0;
  uint32_t b16 = 0, s16 = 0;  // the fused add's second input and its sum
  uint32_t rows_sg = 0;       // a subgroup a row (ROWS_SG)
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {4, kF16}, {5}};
};
struct LinearSpec {  // linear.comp
  uint32_t x16 = 0, w16 = 0, y16 = 0;
  uint32_t tt = 4;    // tokens a workgroup (matvec.glsl TT)
  uint32_t vec8 = 0;  // eight values a lane a load (K % 8 == 0)
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {8}, {9}};
};
struct Q4wSpec {  // linear_q4w.comp
  uint32_t x16 = 0, y16 = 0, tt = 4;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {8}};
};
struct FloatGemmSpec {  // linear_mm.comp, linear_mm_coopmat.comp
  uint32_t x16 = 0, w16 = 0, y16 = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}};
};
struct QuantSpec {  // linear_8da4w_quant.comp
  uint32_t x16 = 0;
  uint32_t hold = 0;  // slots a thread (quant_hold; 0: the streaming passes)
  static constexpr SpecField fields[] = {{1, kF16}, {8}};
};
struct GluQuantSpec {  // linear_8da4w_quant.comp VKLLM_SWIGLU: gate, up, the op's output
  uint32_t g16 = 0, u16 = 0, y16 = 0, hold = 0;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {8}};
};
struct Matvec8da4wSpec {  // linear_8da4w.comp
  uint32_t y16 = 0;
  uint32_t tt = 4;     // tokens a workgroup (TT)
  uint32_t bpl = 1;    // the decode variant's blocks per lane (BPL) ...
  uint32_t parts = 1;  // ... in PARTS parts (decode_split)
  uint32_t wg = 64;    // its workgroup size (local_size_x_id)
  static constexpr SpecField fields[] = {{1, kF16}, {8}, {9}, {16}, {17}};
};
struct MatvecTailSpec {  // linear_8da4w.comp VKLLM_TAIL
  uint32_t y16 = 0, tt = 4, bpl = 1;
  uint32_t tail = 0;  // 0: add + rms_norm, 1: swiglu, 2: none
  uint32_t a16 = 0, b16 = 0, s16 = 0, n16 = 0;
  uint32_t tquant = 0;  // quantize the tail's row
  uint32_t parts = 1;
  static constexpr SpecField fields[] = {{1, kF16},  {8},        {9},        {10}, {11, kF16},
                                         {12, kF16}, {13, kF16}, {14, kF16}, {15}, {16}};
};
struct FusedMatvecSpec {  // linear_8da4w_fused.comp
  uint32_t x16 = 0, y16 = 0, h16 = 0, o16 = 0, r16 = 0;
  uint32_t pro = 0, epi = 0;  // the prologue and epilogue (Pro, Epi)
  uint32_t rps = 2, bpl = 2, parts = 1;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {4, kF16}, {5, kF16},
                                         {6},       {7},       {8},       {9},       {10}};
};
struct StreamedMatvecSpec {  // linear_8da4w_mv.comp, linear_q4w_mv.comp (MatvecPlan)
  uint32_t y16 = 0, x16 = 0;
  uint32_t depth = 2, bpg = 4, batches = 2;
  uint32_t xn = 2112;         // linear_q4w_mv: the row's vec4s in shared memory
  uint32_t wsum_nibbles = 0;  // linear_8da4w_mv: weight sums from the nibbles
  uint32_t h16 = 0;           // VKLLM_MV_NORM: the norm's output dtype
  uint32_t wg = 256;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {9},        {10}, {11},
                                         {12},      {13},      {14, kF16}, {17}};
};
struct GemmSpec {  // linear_8da4w_mm.comp, linear_8da4w_mm_coopmat.comp (GemmPlan)
  uint32_t y16 = 0;
  uint32_t kc = 32, bt = 64, bn = 64;  // K bytes a step, tokens and rows a tile
  uint32_t nt = 128;                   // threads (the coopmat kernel's)
  uint32_t w16 = 0;                    // nibbles widened to 16 q (coopmat)
  uint32_t ablate = 0;                 // a measurement build's wrong-result switch
  static constexpr SpecField fields[] = {{1, kF16}, {8}, {9}, {10}, {11}, {12}, {13}};
};
struct RowsCoopmatSpec {  // linear_8da4w_rows_coopmat.comp
  uint32_t y16 = 0;
  uint32_t tf = 1;    // 8-token fragments (TF)
  uint32_t gq = 4;    // G / 32 (GQ)
  uint32_t nt = 512;  // threads: 32 a subgroup of K groups (NT)
  uint32_t w16 = 0;   // nibbles widened to 16 q (W16)
  static constexpr SpecField fields[] = {{1, kF16}, {9}, {10}, {11}, {12}};
};
struct ChainSpec {  // linear_8da4w_chain.comp
  uint32_t depth = 4, spin_limit = 1u << 22, measure = 0, specialize = 1, xv = 1152, q4w = 0,
           pipe = 1, deal = 0, ub = 1, att_hd = 0, att_flags = 0, split_sync = 1, int8 = 1,
           post = 0;
  static constexpr SpecField fields[] = {{1}, {2}, {3},  {4},  {5},  {6},  {7},
                                         {8}, {9}, {10}, {11}, {12}, {13}, {14}};
};
// attention.comp and the attention runs (attention_run.glsl: x16, qknorm, n16)
struct AttentionSpec {
  uint32_t a16 = 0, c16 = 0, y16 = 0;     // q / k / v activations, caches, output
  uint32_t x16 = 0, qknorm = 0, n16 = 0;  // the rows before norm and rope, the norm, its rows
  uint32_t hd = 64;                       // head dim
  uint32_t gq = 1;                        // VKLLM_BATCH: query heads a workgroup
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {4, kF16},
                                         {5},       {6, kF16}, {8},       {9}};
};
struct DecodeAttentionSpec {  // attention_decode.comp
  uint32_t a16 = 0, c16 = 0, y16 = 0, qknorm = 0, rope = 0, n16 = 0, r16 = 0, oquant = 0;
  uint32_t hd = 64, measure = 0, order = 1;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {4},  {5}, {6, kF16},
                                         {7, kF16}, {8},       {9},       {10}, {11}};
};
struct PrefillAttentionSpec {  // attention_prefill.comp
  uint32_t a16 = 0, c16 = 0, y16 = 0, x16 = 0, qknorm = 0, n16 = 0;
  uint32_t hd = 64, bk = 32, rq = 2, nt = 128;
  static constexpr SpecField fields[] = {{1, kF16}, {2, kF16}, {3, kF16}, {4, kF16}, {5},
                                         {6, kF16}, {8},       {9},       {10},      {11}};
};
struct PrefillCoopmatSpec {  // attention_prefill_coopmat.comp (q and the caches fp16)
  uint32_t y16 = 0, x16 = 0, qknorm = 0, n16 = 0;
  uint32_t hd = 64, bk = 32, bq = 64, nt = 128, gq = 1;
  static constexpr SpecField fields[] = {{3, kF16}, {4, kF16}, {5},  {6, kF16}, {8},
                                         {9},       {10},      {11}, {12}};
};
struct PhysicsSpec {
  uint32_t threads = 1, mode = 0, spin_limit = 1u << 22;
  static constexpr SpecField fields[] = {{1}, {2}, {3}};
};
struct SubgroupProbeSpec {
  uint32_t wg = 64;
  static constexpr SpecField fields[] = {{1}};
};
struct GemmPeakKhrSpec {  // the cooperative matrix's shape M x N x K
  uint32_t m = 16, n = 8, k = 32;
  static constexpr SpecField fields[] = {{1}, {2}, {3}};
};
struct GemmPeakKhrFp16Spec {
  uint32_t m = 16, n = 8, k = 16;
  static constexpr SpecField fields[] = {{1}, {2}, {3}};
};

template <class S>
constexpr std::span<const SpecField> spec_fields() {
  if constexpr (std::is_empty_v<S>)
    return {};
  else
    return S::fields;
}
template <class S>
constexpr size_t spec_count() {
  return spec_fields<S>().size();
}
// A spec struct's values in its fields' order.
template <class S>
constexpr std::array<uint32_t, spec_count<S>()> spec_words(const S& s) {
  if constexpr (std::is_empty_v<S>) {
    return {};
  } else {
    static_assert(std::is_aggregate_v<S> && std::is_trivially_copyable_v<S> &&
                      sizeof(S) == 4 * spec_count<S>(),
                  "a spec struct is one 32-bit member a field");
    return std::bit_cast<std::array<uint32_t, spec_count<S>()>>(s);
  }
}
template <class S>
inline constexpr std::array<uint32_t, spec_count<S>()> kSpecDefaults = spec_words(S{});

template <class P>
constexpr uint32_t push_bytes() {
  static_assert((std::is_trivially_copyable_v<P> && sizeof(P) % 4 == 0) || std::is_empty_v<P>,
                "a push-constant struct is 32-bit words");
  return std::is_empty_v<P> ? 0 : static_cast<uint32_t>(sizeof(P));
}

enum class Shader : uint16_t {
#define VK_KERNEL(name, file, defines, access, Push, Spec) name,
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
  // Its specialization constants (the spec struct's fields) and their defaults.
  std::span<const SpecField> spec_fields;
  std::span<const uint32_t> spec_defaults;
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
#define VK_KERNEL(name, file, defines, access, P, S) \
  template <>                                        \
  struct PushOf<Shader::name> {                      \
    using type = P;                                  \
    using spec = S;                                  \
  };
#define VK_MEASURE_KERNEL VK_KERNEL
#define VK_KERNEL_KHR VK_KERNEL
#include "backend/vulkan/kernels.def"
#undef VK_KERNEL
#undef VK_MEASURE_KERNEL
#undef VK_KERNEL_KHR
template <Shader k>
using Push = typename PushOf<k>::type;
// The spec-constant struct of a module (`Spec<Shader::rope>{.x16 = 1}`).
template <Shader k>
using Spec = typename PushOf<k>::spec;

}  // namespace vkllm::vk
