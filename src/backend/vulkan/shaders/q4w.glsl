// The int4 weight-only dot of the decode kernels that hold the token's float row in shared memory
// (linear_q4w_mv.comp, and linear_8da4w_chain.comp's q4w stages): both sum a row the same way, so
// a chain stage has the unfused mat-vec's bits.
//  - a block (32 weights, one uvec4 of nibbles) is summed with the row's 8 vec4 at xv[x0 .. x0 + 7]
//    (the includer declares `shared vec4 xv[]`; each kernel pads the row its own way against bank
//    conflicts, a block's 8 vec4 always together), in four partial sums (fused multiply-adds),
//    then (p.x + p.y) + (p.z + p.w);
//  - a group's blocks are added pairwise, as a butterfly over neighbouring lanes adds them
//    (blocks 0+1, 2+3, then those pairs, ...), and the group's sum times its scale is added to
//    its lane's sum; the row is the subgroupAdd of the lanes' sums.
// A weight q = n - 8 (n the stored nibble) is the float with the bits 0x4B000000 | n minus 2^23 + 8,
// exactly: a mask and a subtraction, no int-to-float conversion (a quarter-rate instruction on
// NVIDIA).

// Weights 4k .. 4k + 3 of a block: word k / 2, nibbles from 4 (k % 2).
vec4 q4_weights4(uvec4 w, uint k) {
  const uint word = w[k >> 1u] >> (16u * (k & 1u));
  const uvec4 n = (uvec4(word) >> uvec4(0u, 4u, 8u, 12u)) & 0xFu;
  return uintBitsToFloat(n | 0x4B000000u) - 8388616.0;
}

float q4_block(uvec4 w, uint x0) {
  vec4 p = vec4(0.0);
  [[unroll]] for (uint k = 0; k < 8u; ++k) p = fma(xv[x0 + k], q4_weights4(w, k), p);
  return (p.x + p.y) + (p.z + p.w);
}
