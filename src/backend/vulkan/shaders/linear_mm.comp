#version 450
// linear_mm: the tiled GEMM of the float-activation linears in forwards of at least
// GemmPlan::kTokens tokens (vk_ops.cpp prep_linear): y[t, n] = sum_k x[t, k] w[n, k] for
//  linear      (linear_mm): w fp32 or fp16 (W16), as stored;
//  linear_q4w  (linear_q4w_mm, VKLLM_Q4W): w = (nibble - 8) * s[n, k / G], nibbles stored as q + 8, two a byte,
//                         element k in byte k / 2's low (k even) or high (k odd) half.
// A workgroup takes BT = 64 tokens x BN = 64 rows; K passes in chunks of KC = 32, each chunk of
// x and of w staged in shared memory as floats (k-major, so that a thread reads its four tokens'
// and four rows' values as two vec4), and each of the 256 threads sums a 4 x 4 block of outputs
// over k in order. Portable: no subgroup operations, no cooperative matrices. The mat-vec
// kernels (linear.comp, linear_q4w.comp) sum in another order: both are within the recipes'
// float bounds of the CPU reference (tests/backend_vulkan), not bit-identical with each other.
#define WG 256
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
// Nc rows in this chunk of the weights, n0 its first output column, N y's row stride, T tokens;
// G the group (linear_q4w).
layout(push_constant) uniform PC { uint K, Nc, n0, N, T, G; } pc;

const uint BT = 64u, BN = 64u, KC = 32u, PAD = 4u;
shared vec4 xs[KC][(BT + PAD) / 4u];  // xs[k][t / 4][t % 4] = x[t0 + t, k0 + k]
shared vec4 ws[KC][(BN + PAD) / 4u];  // ws[k][n / 4][n % 4] = w[n0 + n, k0 + k]

// Element (r, k) of the weights (row r of this chunk), as a float.
float weight(uint r, uint k) {
  if (WQ4 == 1u) {
    const uint e = r * pc.K + k;  // (K is even: a row is whole bytes)
    const float n = float(int((q[e >> 3u] >> ((e & 7u) * 4u)) & 15u) - 8);
    return n * s[r * (pc.K / pc.G) + k / pc.G];
  }
  return LOADF(wt, W16, r * pc.K + k);
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint nb = (pc.Nc + BN - 1u) / BN, g = flat_group();
  const uint r0 = (g % nb) * BN, t0 = (g / nb) * BT;
  if (t0 >= pc.T) return;  // (uniform per workgroup)
  // Staging: thread tid loads k = tid % KC of tokens (rows) tid / KC + 8 i, i < 8: a subgroup's
  // loads cover runs of consecutive k.
  const uint sk = tid % KC, sr = tid / KC;
  // Summing: thread (tt, tn) takes tokens 4 tt .. 4 tt + 3 and rows 4 tn .. 4 tn + 3.
  const uint tt = tid / (BN / 4u), tn = tid % (BN / 4u);
  vec4 acc[4];
  [[unroll]] for (uint i = 0; i < 4u; ++i) acc[i] = vec4(0.0);
  for (uint k0 = 0; k0 < pc.K; k0 += KC) {
    const uint k = k0 + sk;
    [[unroll]] for (uint i = 0; i < 8u; ++i) {
      const uint t = sr + 8u * i, r = sr + 8u * i;
      xs[sk][t / 4u][t % 4u] = t0 + t < pc.T && k < pc.K ? LOADF(x, X16, (t0 + t) * pc.K + k) : 0.0;
      ws[sk][r / 4u][r % 4u] = r0 + r < pc.Nc && k < pc.K ? weight(r0 + r, k) : 0.0;
    }
    barrier();
    [[unroll]] for (uint kk = 0; kk < KC; ++kk) {
      const vec4 a = xs[kk][tt], b = ws[kk][tn];
      acc[0] += a.x * b;
      acc[1] += a.y * b;
      acc[2] += a.z * b;
      acc[3] += a.w * b;
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    const uint t = t0 + 4u * tt + i;
    [[unroll]] for (uint j = 0; j < 4u; ++j) {
      const uint r = r0 + 4u * tn + j;
      if (t < pc.T && r < pc.Nc) STOREF(y, Y16, t * pc.N + pc.n0 + r, acc[i][j]);
    }
  }
}
