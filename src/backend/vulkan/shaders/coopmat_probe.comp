#version 450
// The layout of a 16 x 8 cooperative-matrix accumulator on this device (vk_probe.cpp): one
// subgroup loads the matrix of values 8 row + col from o[0 .. 127] and writes, for each lane, the
// number of elements it holds and (up to eight of) their values at o[128 + 9 lane ..]. The prefill
// GEMM (linear_8da4w_mm_coopmat.comp, int32 accumulators) and the prefill attention
// (attention_prefill_coopmat.comp, fp32 ones: VKLLM_PROBE_F32, the values stored as floats) assume
// four a lane, all 128 covered once.
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer OUT { int o[]; };
layout(std430, binding = 0) buffer OUTF { float of[]; };

void main() {
#ifdef VKLLM_PROBE_F32
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
