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
// A weight q = n - 8 (n the stored nibble) comes from its bits in place: nibble e of a half word
// (e = 0..3, bits 4e..4e + 3) masked and or-ed into the float 2^23 (one logic operation) is
// 2^23 + n 16^e, and minus 2^23 + 8 16^e it is q 16^e, exactly; no shift, no int-to-float
// conversion (a quarter-rate instruction on NVIDIA). Partial sum e then holds 16^e times the sum
// of the x q it would hold unscaled, and is scaled back (exactly: a power of two) before the
// partial sums are added. (In exact arithmetic each rounding scales alike; lavapipe's logits moved
// by ~1e-13 in NMSE against the unscaled form, the compiler's doing, within the linears' bound.)

// Weights 4k .. 4k + 3 of a block (word k / 2, its low half for even k, its high half for odd),
// weight e times 16^e.
vec4 q4_weights4(uvec4 w, uint k) {
  const uint half_word = (k & 1u) == 0u ? w[k >> 1u] : w[k >> 1u] >> 16u;
  const uvec4 n = uvec4(half_word) & uvec4(0xFu, 0xF0u, 0xF00u, 0xF000u);
  return uintBitsToFloat(n | 0x4B000000u) -
         vec4(8388616.0, 8388736.0, 8390656.0, 8421376.0);  // 2^23 + 8 16^e
}

float q4_block(uvec4 w, uint x0) {
  vec4 p = vec4(0.0);
  [[unroll]] for (uint k = 0; k < 8u; ++k) p = fma(xv[x0 + k], q4_weights4(w, k), p);
  p *= vec4(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-e
  return (p.x + p.y) + (p.z + p.w);
}
