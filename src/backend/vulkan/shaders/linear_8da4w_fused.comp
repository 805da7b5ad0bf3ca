#version 450
// The decode step's fused linear_8da4w (one token): every workgroup first computes the int8 row
// of its input itself, from L2, in its prologue, then its R output rows, then an epilogue; so a
// norm, the activation quantization and the residual add or SwiGLU after the mat-vec cost no
// dispatch and no barrier of their own, and no kernel of the step runs in a single workgroup.
//  prologue PRO = 0: x quantized as linear_8da4w_quant does;
//           PRO = 1: x normalized as rms_norm (over the whole row) stores it, then quantized as
//                    rms_norm_quant does (same reduction order: the same int8 codes);
//  epilogue EPI = 0: y = W x, rounded to y's dtype;
//           EPI = 1: y = r + (W x rounded to the mat-vec output's dtype), the residual add;
//           EPI = 2: y = silu(g) * u with g = W x and u = U x (a second weight set, the up
//                    projection), each rounded to its output's dtype as the unfused ops would.
// The mat-vec itself is linear_8da4w's 32-weight-block walk (G % 32 == 0), exactly the CPU's
// per-group formula. A workgroup takes batches of RPS rows per subgroup, strided by the grid.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
#include "quant.glsl"
#include "idot.glsl"
#include "shared_row_dot.glsl"
layout(constant_id = 1) const bool X16 = false;   // input row
layout(constant_id = 2) const bool Y16 = false;   // output
layout(constant_id = 3) const bool H16 = false;   // the norm's output (PRO 1), as it would be stored
layout(constant_id = 4) const bool O16 = false;   // the mat-vec outputs (EPI 1, 2), as stored
layout(constant_id = 5) const bool R16 = false;   // residual input (EPI 1)
layout(constant_id = 6) const uint PRO = 0;
layout(constant_id = 7) const uint EPI = 0;
// Rows per subgroup in flight and 32-weight blocks per lane per row: every weight, scale and
// weight-sum load of a subgroup's rows is issued before the prologue, so its DRAM latency hides
// behind the prologue's and the whole workgroup waits for memory once per batch of rows.
layout(constant_id = 8) const uint RPS = 2;
layout(constant_id = 9) const uint BPL = 2;
// The row's blocks in PARTS parts of BPL / PARTS blocks per lane, each part summed over the
// subgroup, the row the parts' sums added in order: the unfused decode mat-vec's order
// (linear_8da4w.comp matvec_decode, which gives each part a subgroup), so the rows are identical.
layout(constant_id = 10) const uint PARTS = 1;
DECL_FBUF(0, x, readonly)
layout(std430, binding = 1) readonly buffer NW { float nw[]; };  // norm weight (PRO 1)
layout(std430, binding = 2) readonly buffer Q { uvec4 q[]; };    // K / 32 per row
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
layout(std430, binding = 5) readonly buffer Q2 { uvec4 q2[]; };  // EPI 2: the up projection
layout(std430, binding = 6) readonly buffer S2 { float s2[]; };
layout(std430, binding = 7) readonly buffer WS2 { int wsum2[]; };
DECL_FBUF(8, y, writeonly)
DECL_FBUF(9, r, readonly)  // EPI 1: the residual
layout(push_constant) uniform PC { uint K, Nc, n0, G, unused; float eps; } pc;

const uint MAXV = 32u;  // K <= 32 * WG (checked by the host)

#include "norm_quant_prologue.glsl"

// A subgroup's rows in flight: nibbles, scale and weight sum of each lane's blocks (lane + i SG).
uvec4 wq[RPS][BPL];
float ws_s[RPS][BPL];
int ws_w[RPS][BPL];
uvec4 uq[EPI == 2u ? RPS : 1u][EPI == 2u ? BPL : 1u];
float us_s[EPI == 2u ? RPS : 1u][EPI == 2u ? BPL : 1u];
int us_w[EPI == 2u ? RPS : 1u][EPI == 2u ? BPL : 1u];

void fetch(uint r, uint n) {
  const uint lane = gl_SubgroupInvocationID, nb = pc.K / 32u, bpg = pc.G / 32u, ng = pc.K / pc.G;
  [[unroll]] for (uint i = 0; i < BPL; ++i) {
    const uint b = lane + i * gl_SubgroupSize;
    const bool ok = n < pc.Nc && b < nb;
    const uint gi = n * ng + b / bpg;
    wq[r][i] = ok ? q[n * nb + b] : uvec4(0u);
    ws_s[r][i] = ok ? s[gi] : 0.0;
    ws_w[r][i] = ok ? wsum[gi] : 0;
    if (EPI == 2u) {
      uq[r][i] = ok ? q2[n * nb + b] : uvec4(0u);
      us_s[r][i] = ok ? s2[gi] : 0.0;
      us_w[r][i] = ok ? wsum2[gi] : 0;
    }
  }
}

// Row r of the fetched rows (second: the up projection's), summed over the subgroup: the CPU's
// per-group formula, each group's integer dot combined across its lanes first (xor shuffles).
float row_dot(uint r, bool second, float sx, int zp) {
  const uint lane = gl_SubgroupInvocationID, nb = pc.K / 32u, bpg = pc.G / 32u;
  float row = 0.0, acc = 0.0;
  [[unroll]] for (uint i = 0; i < BPL; ++i) {
    if (i > 0u && i % (BPL / PARTS) == 0u) {  // a part ends: its sum over the subgroup
      const float part = subgroupAdd(acc);
      row = i == BPL / PARTS ? part : row + part;
      acc = 0.0;
    }
    const uint b = lane + i * gl_SubgroupSize;
    int d = 0;
    if (b < nb) d = block_dot(second ? uq[EPI == 2u ? r : 0u][EPI == 2u ? i : 0u] : wq[r][i], b);
    for (uint off = 1u; off < bpg; off <<= 1u) d += subgroupShuffleXor(d, off);
    if (b < nb && (lane & (bpg - 1u)) == 0u) {
      const float sc = second ? us_s[EPI == 2u ? r : 0u][EPI == 2u ? i : 0u] : ws_s[r][i];
      const int w = second ? us_w[EPI == 2u ? r : 0u][EPI == 2u ? i : 0u] : ws_w[r][i];
      acc += sc * sx * float(d - zp * w);
    }
  }
  const float last = subgroupAdd(acc);
  return PARTS == 1u ? last : row + last;
}

void main() {
  // Batches of R = RPS * subgroups rows, strided by the grid (the host caps the grid so that the
  // prologue is not repeated by more workgroups than run at once).
  const uint NS = gl_NumSubgroups, sg = gl_SubgroupID, R = RPS * NS;
  const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * R;
  uint row0 = flat_group() * R;
  [[unroll]] for (uint r = 0; r < RPS; ++r) fetch(r, row0 + sg + r * NS);
  float sx;
  int zp;
  prologue(sx, zp);
  for (; row0 < pc.Nc; row0 += stride) {
    if (row0 != flat_group() * R)
      [[unroll]] for (uint r = 0; r < RPS; ++r) fetch(r, row0 + sg + r * NS);
    [[unroll]] for (uint r = 0; r < RPS; ++r) {
      const uint n = row0 + sg + r * NS, out_n = pc.n0 + n;
      const float a = row_dot(r, false, sx, zp);
      float val;
      if (EPI == 1u) {
        val = n < pc.Nc ? LOADF(r, R16, out_n) + round_to(O16, a) : 0.0;
      } else if (EPI == 2u) {
        const float g = round_to(O16, a), u = round_to(O16, row_dot(r, true, sx, zp));
        val = g / (1.0 + exp(-g)) * u;
      } else {
        val = a;
      }
      if (n < pc.Nc && subgroupElect()) STOREF(y, Y16, out_n, val);
    }
  }
}
