#version 450
// CMake compiles this at configure time with the glslangValidator it found (VKLLM_GLSLANG): the
// compiler is taken for kernels.def's VK_KERNEL_KHR lines only if it accepts both extensions.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B { float16_t b[]; };

void main() {
  tensorLayoutNV<2> t = setTensorLayoutDimensionNV(createTensorLayoutNV(2), 16, 16);
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> m;
  coopMatLoadTensorNV(m, b, 0, t);
  coopMatStore(m, b, 256, 16, gl_CooperativeMatrixLayoutRowMajor);
}
