// block_dot(w, b): the integer dot of 32-weight block b (nibbles w, linear_8da4w's layout) with
// the int8 row the workgroup holds in shared memory, four codes a word (the decode mat-vec runs:
// linear_8da4w_fused.comp and linear_8da4w_chain.comp), which their prologues write. The row is
// at most 8,192 codes; the includer includes common.glsl and idot.glsl first.
shared uint qxs[8192u / 4u];

int block_dot(uvec4 w, uint b) {
  const uint xb = 8u * b;
  const uvec4 xa = uvec4(qxs[xb], qxs[xb + 1u], qxs[xb + 2u], qxs[xb + 3u]),
              xc = uvec4(qxs[xb + 4u], qxs[xb + 5u], qxs[xb + 6u], qxs[xb + 7u]);
  int d = 0;
  d = dot4(int(xa.x), nibbles4_to_i8x4(w.x & 0xFFFFu), d);
  d = dot4(int(xa.y), nibbles4_to_i8x4(w.x >> 16), d);
  d = dot4(int(xa.z), nibbles4_to_i8x4(w.y & 0xFFFFu), d);
  d = dot4(int(xa.w), nibbles4_to_i8x4(w.y >> 16), d);
  d = dot4(int(xc.x), nibbles4_to_i8x4(w.z & 0xFFFFu), d);
  d = dot4(int(xc.y), nibbles4_to_i8x4(w.z >> 16), d);
  d = dot4(int(xc.z), nibbles4_to_i8x4(w.w & 0xFFFFu), d);
  d = dot4(int(xc.w), nibbles4_to_i8x4(w.w >> 16), d);
  return d;
}
