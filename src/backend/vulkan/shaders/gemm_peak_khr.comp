#version 450
// gemm_peak.comp's ceiling on KHR cooperative matrices (GL_KHR_cooperative_matrix; compiled by
// glslangValidator, kernels.def VK_KERNEL_KHR): every subgroup runs pc.n rounds of eight
// independent multiply-adds on operands loaded once from shared memory. The shape M x N x K is
// specialization constants 1-3, which the host takes from the device's list of KHR cooperative
// matrix shapes (DeviceInfo::khr_int8, khr_f16).
// VKLLM_PEAK_F16: fp16 x fp16 -> fp32; otherwise int8 x int8 -> int32.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(constant_id = 1) const uint M = 16;
layout(constant_id = 2) const uint N = 8;
#ifdef VKLLM_PEAK_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(constant_id = 3) const uint K = 16;
#define AT float16_t
#define CT float
const uint BYTES = 2u;               // of an operand's element
const uint VALUE = 0x1C001C00u;      // two fp16 of ~0.004: sums stay finite
#else
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
layout(constant_id = 3) const uint K = 32;
#define AT int8_t
#define CT int
const uint BYTES = 1u;
const uint VALUE = 0x01010101u;
#endif
#define AMAT coopmat<AT, gl_ScopeSubgroup, M, K, gl_MatrixUseA>
#define BMAT coopmat<AT, gl_ScopeSubgroup, K, N, gl_MatrixUseB>
#define CMAT coopmat<CT, gl_ScopeSubgroup, M, N, gl_MatrixUseAccumulator>
layout(std430, binding = 0) writeonly buffer Out { uint outw[]; };
layout(push_constant) uniform PC { uint n; } pc;
// The operands (128 uvec4: A's rows and B's columns of K elements), then up to four subgroups'
// sums (up to 16 x 16 words each: 64 uvec4).
shared uvec4 sm[128 + 4 * 64];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  sm[tid] = uvec4(VALUE * (tid % 3u + 1u));
  for (uint i = 128u + tid; i < 128u + 4u * 64u; i += 128u) sm[i] = uvec4(VALUE);
  barrier();
  // A's rows and B's columns are K elements: K * BYTES / 16 uvec4 apart. An A is at most 32
  // uvec4 (16 x 32 int8, 16 x 16 fp16), a B at most 32: every load stays within sm.
  const uint stride = K * BYTES / 16u;
  AMAT a[2];
  BMAT b[4];
  CMAT c[2][4];
  [[unroll]] for (uint i = 0; i < 2u; ++i)
    coopMatLoad(a[i], sm, 32u * i, stride, gl_CooperativeMatrixLayoutRowMajor);
  [[unroll]] for (uint j = 0; j < 4u; ++j)
    coopMatLoad(b[j], sm, 64u + 16u * j, stride, gl_CooperativeMatrixLayoutColumnMajor);
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j) c[i][j] = CMAT(0);
  for (uint r = 0; r < pc.n; ++r)
    [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
      c[i][j] = coopMatMulAdd(a[i], b[j], c[i][j]);
  CMAT s = c[0][0];
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
    if (i + j > 0u) s = s + c[i][j];
  barrier();
  // Rows of N words: N / 4 uvec4. Subgroups past the fourth (subgroups of fewer than 32 lanes)
  // keep their sums in registers.
  if (gl_SubgroupID < 4u)
    coopMatStore(s, sm, 128u + 64u * gl_SubgroupID, N / 4u, gl_CooperativeMatrixLayoutRowMajor);
  barrier();
  if (tid == 0u) outw[gl_WorkGroupID.x] = sm[128].x ^ sm[192].y;
}
