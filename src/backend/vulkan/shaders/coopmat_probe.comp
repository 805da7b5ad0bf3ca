#version 450
// The layout of a cooperative matrix on this device (vk_probe.cpp): one subgroup loads a matrix of
// known values from o[0 ..] and writes, for each lane, the number of elements it holds and (up to
// eight of) their values at o[128 + 9 lane ..]:
// - default: a 16 x 8 int32 accumulator of the values 8 row + col (the prefill GEMM,
//   linear_8da4w_mm_coopmat.comp, assumes four a lane, all 128 covered once);
// - VKLLM_PROBE_F32: the same as an fp32 accumulator (the values stored as floats);
// - VKLLM_PROBE_F16A: a 16 x 16 fp16 A operand of the values 16 row + col (stored as halves, two
//   a word). The prefill attention (attention_prefill_coopmat.comp) assumes the tensor cores'
//   fragment layouts of these two, which the host checks element by element.
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#ifdef VKLLM_PROBE_F16A
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer OUT { int o[]; };
layout(std430, binding = 0) buffer OUTF { float of[]; };
layout(std430, binding = 0) buffer OUTU { uint ou[]; };

void main() {
#if defined(VKLLM_PROBE_F16A)
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> m;
  coopMatLoadNV(m, ou, 0u, 8u, false);
#elif defined(VKLLM_PROBE_F32)
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> m;
  coopMatLoadNV(m, of, 0u, 8u, false);
#else
  icoopmatNV<32, gl_ScopeSubgroup, 16, 8> m;
  coopMatLoadNV(m, o, 0u, 8u, false);
#endif
  const uint at = 128u + 9u * gl_SubgroupInvocationID;
  const int n = m.length();
  o[at] = n;
  [[unroll]] for (int e = 0; e < 8; ++e)
    if (e < n) o[at + 1u + uint(e)] = int(m[e]);
}
