#version 450
// A tile copy through GL_NV_cooperative_matrix2 (compiled by glslangValidator, kernels.def
// VK_KERNEL_KHR): workgroup (x, y) loads the 16 x 16 fp16 tile at row 16 y, column 16 x of the
// pc.rows x pc.cols row-major matrix `src` into a workgroup-scope cooperative matrix through a
// tensor layout (elements past the edges read as zero) and stores it at the same place of `dst`
// (elements past the edges are not written). It shows that the toolchain compiles the
// tensor-addressed loads; nothing dispatches it yet (a device would need
// VK_NV_cooperative_matrix2 and its cooperativeMatrixWorkgroupScope and
// cooperativeMatrixTensorAddressing features).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { float16_t src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float16_t dst[]; };
layout(push_constant) uniform PC { uint rows, cols; } pc;

void main() {
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  t = setTensorLayoutDimensionNV(t, pc.rows, pc.cols);
  const uint r0 = 16u * gl_WorkGroupID.y, c0 = 16u * gl_WorkGroupID.x;
  coopmat<float16_t, gl_ScopeWorkgroup, 16, 16, gl_MatrixUseAccumulator> m;
  coopMatLoadTensorNV(m, src, 0, sliceTensorLayoutNV(t, r0, 16, c0, 16));
  coopMatStoreTensorNV(m, dst, 0, sliceTensorLayoutNV(t, r0, 16, c0, 16));
}
