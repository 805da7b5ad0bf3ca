// dot4(a, b, acc): acc plus the dot product of two ints read as four signed int8 each (element 0
// in the low byte). With VKLLM_IDOT it is OpSDotAccSat (VK_KHR_shader_integer_dot_product; the
// host builds that variant only where the device has it), otherwise a portable integer path;
// exact either way (the sums of the int8 x int4 kernels never come near saturation).
#ifdef VKLLM_IDOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4453)
int dotAccSat4x8(int a, int b, int acc, spirv_literal int fmt);
int dot4(int a, int b, int acc) { return dotAccSat4x8(a, b, acc, 0); }
#else
int dot4(int a, int b, int acc) {
  return acc + bitfieldExtract(a, 0, 8) * bitfieldExtract(b, 0, 8) +
         bitfieldExtract(a, 8, 8) * bitfieldExtract(b, 8, 8) +
         bitfieldExtract(a, 16, 8) * bitfieldExtract(b, 16, 8) +
         bitfieldExtract(a, 24, 8) * bitfieldExtract(b, 24, 8);
}
#endif
