// The int8 row a decode mat-vec run holds in shared memory, and its block dot (the fused and chain
// kernels: linear_8da4w_fused.comp, linear_8da4w_chain.comp, whose prologues write it). For the
// eight codes e0..e7 of word pair p, word 2p holds e0 e2 e4 e6 and word 2p + 1 holds e1 e3 e5 e7 (a
// byte each, low byte first), so a word of eight nibbles needs two masks, not an unpacking, for
// two four-way dot products with the nibbles as stored (q + 8); each block's sum of codes (xsum)
// then takes the 8 back out, in integers, so every group's dot is the unfused kernel's exactly.
// The row is at most 8,192 codes; the includer includes common.glsl, quant.glsl and idot.glsl first.
// A block's two uvec4 (its pairs 0-1, then 2-3) lie apart: block b's first at qxs[b], its second
// at qxs[QX_HALF + b], so that lanes reading neighbouring blocks read 16 bytes apart (every bank
// once a quarter subgroup) rather than 32 (a two-way bank conflict on every load).
// (An includer whose dispatch may hold no int8 row sizes the arrays with SRD_QXS and SRD_XSUM.)
const uint QX_HALF = 8192u / 32u;
#ifndef SRD_QXS
#define SRD_QXS (2u * QX_HALF)
#define SRD_XSUM (8192u / 32u)
#endif
shared uvec4 qxs[SRD_QXS];
shared int xsum[SRD_XSUM];
uvec4 qx_lo(uint b) { return qxs[b]; }
uvec4 qx_hi(uint b) { return qxs[QX_HALF + b]; }

// Adds code c (the low byte) of element t (0..7) of a word pair to its even or odd word.
void pack_code(uint t, uint c, inout uint ev, inout uint od) {
  if ((t & 1u) == 0u)
    ev |= c << (4u * t);
  else
    od |= c << (4u * (t - 1u));
}
void store_pair(uint p, uint ev, uint od) {
  const uint at = ((p >> 1) & 1u) * QX_HALF + (p >> 2);
  qxs[at][(p & 1u) * 2u] = ev;
  qxs[at][(p & 1u) * 2u + 1u] = od;
}
// Word pair (ev, od) of eight values, quant_value's code each (quant.glsl, included first), with
// one exact division in the code however many of the eight lie near a rounding boundary, and no
// arrays of codes: the unrolled callers stay small in code and registers.
void quant_pair(float v[8], float sc, float rcp, int zp, out uint ev, out uint od) {
  ev = 0u;
  od = 0u;
  uint near = 0u;
  [[unroll]] for (uint e = 0; e < 8u; ++e) {
    precise float q = v[e] * rcp;
    bool nr;
    pack_code(e, quant_code_fast(q, zp, nr), ev, od);
    if (nr) near |= 1u << e;
  }
  while (near != 0u) {  // rare: ~2^-11 of values (quant_code_fast)
    const uint k = uint(findLSB(near));
    near &= near - 1u;
    float x = v[0];
    [[unroll]] for (uint e = 1; e < 8u; ++e) x = k == e ? v[e] : x;
    const uint c = quant_code(div_rn(x, sc), zp), at = 8u * (k >> 1);
    if ((k & 1u) == 0u)
      ev = bitfieldInsert(ev, c, int(at), 8);
    else
      od = bitfieldInsert(od, c, int(at), 8);
  }
}

// Each 32-code block's sum, after the row's words are stored (and a barrier); threads tid of n.
void block_sums(uint K, uint tid, uint n) {
  for (uint b = tid; b < K / 32u; b += n) {
    int sum = 0;
    const uvec4 a = qx_lo(b), c = qx_hi(b);
    [[unroll]] for (uint w = 0; w < 4u; ++w) {
      sum = dot4(int(a[w]), 0x01010101, sum);
      sum = dot4(int(c[w]), 0x01010101, sum);
    }
    xsum[b] = sum;
  }
}

// The sum of a block's 32 nibbles (each q + 8): the two masks of block_dot, a byte of each word
// then at most 30 and of their sum 120, added up by one four-way dot.
int nibble_sum(uvec4 w) {
  const uint MASK = 0x0F0F0F0Fu;
  const uvec4 b = (w & MASK) + ((w >> 4u) & MASK);
  return dot4(int(b.x + b.y + b.z + b.w), 0x01010101, 0);
}

// The integer dot of 32-weight block b (nibbles w: byte i holds weights 2i and 2i + 1, each as
// q + 8, linear_8da4w's layout) with the row's codes: two masks a word, then the 8 taken back out.
int block_dot(uvec4 w, uint b) {
  const uint MASK = 0x0F0F0F0Fu;
  const uvec4 xa = qx_lo(b), xc = qx_hi(b);
  int d = 0, e = 0;
  d = dot4(int(xa.x), int(w.x & MASK), d);
  e = dot4(int(xa.y), int((w.x >> 4) & MASK), e);
  d = dot4(int(xa.z), int(w.y & MASK), d);
  e = dot4(int(xa.w), int((w.y >> 4) & MASK), e);
  d = dot4(int(xc.x), int(w.z & MASK), d);
  e = dot4(int(xc.y), int((w.z >> 4) & MASK), e);
  d = dot4(int(xc.z), int(w.w & MASK), d);
  e = dot4(int(xc.w), int((w.w >> 4) & MASK), e);
  return d + e - 8 * xsum[b];
}
