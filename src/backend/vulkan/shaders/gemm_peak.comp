#version 450
// The cooperative-matrix ceiling of `vkllm bench --gemm` (docs/perf.md): every subgroup runs
// pc.n rounds of eight independent multiply-adds on operands loaded once from shared memory, so
// the time is the tensor units' alone (no memory traffic, no other arithmetic).
// VKLLM_PEAK_F16: 16 x 8 x 16, fp16 x fp16 -> fp32; otherwise 16 x 8 x 32, int8 x int8 -> int32
// (linear_8da4w_mm.comp's shape).
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#ifdef VKLLM_PEAK_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define AMAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define BMAT fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define CMAT fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>
const uint VALUE = 0x1C001C00u;  // two fp16 of ~0.004: sums stay finite
#else
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#define AMAT icoopmatNV<8, gl_ScopeSubgroup, 16, 32>
#define BMAT icoopmatNV<8, gl_ScopeSubgroup, 32, 8>
#define CMAT icoopmatNV<32, gl_ScopeSubgroup, 16, 8>
const uint VALUE = 0x01010101u;
#endif
layout(local_size_x = 128) in;
layout(std430, binding = 0) writeonly buffer Out { uint outw[]; };
layout(push_constant) uniform PC { uint n; } pc;
shared uvec4 sm[256];  // the operands (rows of 32 bytes: two words), then the sums

void main() {
  const uint tid = gl_LocalInvocationID.x;
  sm[tid] = uvec4(VALUE * (tid % 3u + 1u));
  sm[tid + 128u] = uvec4(VALUE);
  barrier();
  AMAT a[2];
  BMAT b[4];
  CMAT c[2][4];
  [[unroll]] for (uint i = 0; i < 2u; ++i) coopMatLoadNV(a[i], sm, 32u * i, 2u, false);
  [[unroll]] for (uint j = 0; j < 4u; ++j) coopMatLoadNV(b[j], sm, 64u + 16u * j, 2u, true);
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j) c[i][j] = CMAT(0);
  for (uint r = 0; r < pc.n; ++r)
    [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
      c[i][j] = coopMatMulAddNV(a[i], b[j], c[i][j]);
  CMAT s = c[0][0];
  [[unroll]] for (uint i = 0; i < 2u; ++i)[[unroll]] for (uint j = 0; j < 4u; ++j)
    if (i + j > 0u) s = s + c[i][j];
  barrier();
  coopMatStoreNV(s, sm, 128u + 32u * (tid / 32u), 2u, false);
  barrier();
  if (tid == 0u) outw[gl_WorkGroupID.x] = sm[128].x ^ sm[160].y;
}
