#version 450
// linear_mm: the tiled GEMM of the float-activation linears in forwards of at least
// GemmPlan::kTokens tokens (vk_ops.cpp prep_linear): y[t, n] = sum_k x[t, k] w[n, k] for
//  linear      (linear_mm): w fp32 or fp16 (W16), as stored;
//  linear_q4w  (linear_q4w_mm, VKLLM_Q4W): w = (nibble - 8) * s[n, k / G], nibbles stored as
//              q + 8, two a byte, element k in byte k / 2's low (k even) or high (k odd) half.
// A workgroup of 64 threads takes BT = 64 tokens x BN = 64 rows; each thread sums an 8 x 8 block
// of outputs (tokens 4 ty .. 4 ty + 3 and 32 + 4 ty .., rows 4 tx .. and 32 + 4 tx .., with
// ty = tid / 8, tx = tid % 8) over k in order: every step of k reads two vec4s of x and two of w
// from shared memory (each a subgroup's one conflict-free wavefront) for 64 multiply-adds. K
// passes in chunks of KC = 16 through two shared buffers, k-major (xs[k][t], ws[k][n]): chunk
// c + 1's global loads (a thread four values of four token rows and of four weight rows, one load
// each where K % 4 == 0) are issued before chunk c's multiply-adds and stored to the other buffer
// after them (as four vec4s each), one barrier a chunk. Portable: no subgroup operations, no
// cooperative matrices. The mat-vec kernels (linear.comp, linear_q4w.comp) sum in another order:
// both are within the recipes' float bounds of the CPU reference (tests/backend_vulkan), not
// bit-identical with each other.
#define WG 64
#include "common.glsl"
layout(constant_id = 1) const bool X16 = false;
layout(constant_id = 2) const bool W16 = false;  // linear: fp16 weights
layout(constant_id = 3) const bool Y16 = false;
#ifdef VKLLM_Q4W
const uint WQ4 = 1u;
#else
const uint WQ4 = 0u;
#endif
DECL_FBUF(0, x, readonly)
DECL_FBUF(1, wt, readonly)  // linear: the weights
layout(std430, binding = 1) readonly buffer Q { uint q[]; };  // linear_q4w: the nibbles
layout(std430, binding = 2) readonly buffer S { float s[]; };  // linear_q4w: the scales
DECL_FBUF(3, y, writeonly)
DECL_VIEW4(0, x)  // (common.glsl: four values a load)
DECL_VIEW4(1, w)
// Nc rows in this chunk of the weights, n0 its first output column, N y's row stride, T tokens;
// G the group (linear_q4w).
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G; } pc;

const uint BT = 64u, BN = 64u, KC = 16u;
shared vec4 xs[2][KC][BT / 4u];  // xs[b][k][t / 4][t % 4] = x[t0 + t, k0 + k]
shared vec4 ws[2][KC][BN / 4u];  // ws[b][k][n / 4][n % 4] = w[r0 + n, k0 + k]

// linear_q4w: the weight of the nibble in the low four bits of `bits`, with its group's scale.
float q4_weight(uint bits, float sc) { return float(int(bits & 15u) - 8) * sc; }
// Element (r, k) of the weights (row r of this chunk), as a float.
float weight(uint r, uint k) {
  if (WQ4 == 1u) {
    const uint e = r * pc.K + k;  // (K is even: a row is whole bytes)
    return q4_weight(q[e >> 3u] >> ((e & 7u) * 4u), s[r * (pc.K / pc.G) + k / pc.G]);
  }
  return LOADF(wt, W16, r * pc.K + k);
}

// Staging: thread tid takes tokens (and weight rows) 4 (tid % 16) .. + 3 at k 4 (tid / 16) .. + 3
// of the chunk, four values a row (one load of four where the row has them: K % 4 == 0), and
// stores them transposed, a vec4 of four tokens (rows) a k (zeros past the edges).
vec4 four_x(uint t, uint k) {
  if (t >= pc.T) return vec4(0.0);
  if (pc.K % 4u == 0u && k + 4u <= pc.K) return LOAD4(x, X16, (t * pc.K + k) / 4u);
  vec4 v;
  [[unroll]] for (uint e = 0; e < 4u; ++e)
    v[e] = k + e < pc.K ? LOADF(x, X16, t * pc.K + k + e) : 0.0;
  return v;
}
vec4 four_w(uint r, uint k) {
  if (r >= pc.Nc) return vec4(0.0);
  if (pc.K % 4u == 0u && k + 4u <= pc.K) {
    if (WQ4 == 0u) return LOAD4(w, W16, (r * pc.K + k) / 4u);
    // Four nibbles in one half of a word (e % 4 == 0), one group (G % 4 == 0): weight()'s values.
    const uint e = r * pc.K + k, word = q[e >> 3u] >> ((e & 7u) * 4u);
    const float sc = s[r * (pc.K / pc.G) + k / pc.G];
    vec4 v;
    [[unroll]] for (uint i = 0; i < 4u; ++i) v[i] = q4_weight(word >> (4u * i), sc);
    return v;
  }
  vec4 v;
  [[unroll]] for (uint i = 0; i < 4u; ++i) v[i] = k + i < pc.K ? weight(r, k + i) : 0.0;
  return v;
}
vec4 px[4], pw[4];  // this thread's values of the next chunk: px[i] = x[t0 + 4 (tid % 16) + i][..]
void fetch(uint t0, uint r0, uint k0, uint tid) {
  const uint tq = 4u * (tid % 16u), k = k0 + 4u * (tid / 16u);
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    px[i] = four_x(t0 + tq + i, k);
    pw[i] = four_w(r0 + tq + i, k);
  }
}
void stage(uint b, uint tid) {
  [[unroll]] for (uint e = 0; e < 4u; ++e) {
    xs[b][4u * (tid / 16u) + e][tid % 16u] = vec4(px[0][e], px[1][e], px[2][e], px[3][e]);
    ws[b][4u * (tid / 16u) + e][tid % 16u] = vec4(pw[0][e], pw[1][e], pw[2][e], pw[3][e]);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint nb = (pc.Nc + BN - 1u) / BN, g = flat_group();
  const uint r0 = (g % nb) * BN, t0 = (g / nb) * BT;
  if (t0 >= pc.T) return;  // (uniform per workgroup)
  const uint ty = tid / 8u, tx = tid % 8u;
  vec4 acc[8][2];  // acc[i][h][j]: token (i < 4 ? 4 ty + i : 28 + 4 ty + i), row 32 h + 4 tx + j
  [[unroll]] for (uint i = 0; i < 8u; ++i) acc[i][0] = acc[i][1] = vec4(0.0);
  const uint chunks = (pc.K + KC - 1u) / KC;
  fetch(t0, r0, 0u, tid);
  stage(0u, tid);
  barrier();
  for (uint c = 0; c < chunks; ++c) {
    const uint b = c & 1u;
    if (c + 1u < chunks) fetch(t0, r0, (c + 1u) * KC, tid);  // in flight during this chunk's work
    for (uint kk = 0; kk < KC; ++kk) {  // (a loop: lavapipe compiles the unrolled body slowly)
      const vec4 a0 = xs[b][kk][ty], a1 = xs[b][kk][8u + ty];
      const vec4 w0 = ws[b][kk][tx], w1 = ws[b][kk][8u + tx];
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        acc[i][0] += a0[i] * w0;
        acc[i][1] += a0[i] * w1;
        acc[4u + i][0] += a1[i] * w0;
        acc[4u + i][1] += a1[i] * w1;
      }
    }
    if (c + 1u < chunks) stage(b ^ 1u, tid);
    barrier();  // the next buffer staged; every read of this one done before it is restaged
  }
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint t = t0 + (i < 4u ? 4u * ty + i : 28u + 4u * ty + i);
    if (t >= pc.T) continue;
    [[unroll]] for (uint h = 0; h < 2u; ++h)[[unroll]] for (uint j = 0; j < 4u; ++j) {
      const uint r = r0 + 32u * h + 4u * tx + j;
      if (r < pc.Nc) STOREF(y, Y16, t * pc.N + pc.n0 + r, acc[i][h][j]);
    }
  }
}
