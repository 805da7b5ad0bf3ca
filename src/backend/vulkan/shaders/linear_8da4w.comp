#version 450
// Second pass of linear_8da4w, the CPU reference's formula per group g:
//   y[t, n] = sum_g (s[n, g] * sx) * float(dot_g - zp * wsum[n, g]),
// (the CPU, like the tiled GEMMs, applies sx once at the end and adds in group order: the float
// roundings differ, within the linear tolerance; the integers are the same)
// with the integer dot product dot_g = sum_{k in g} qx[t, k] q[n, k] and its zero-point term
// combined in integers before any rounding (splitting them into two float sums loses the
// result to cancellation when |zp| is large). Four int8 x int4 products at a time: OpSDotAccSat
// (VK_KHR_shader_integer_dot_product) when built with VKLLM_IDOT, a portable integer path
// otherwise; exact either way. Row walk in matvec.glsl; each lane takes whole groups.
// VKLLM_B32 (G % 32 == 0, every real model): 32 weights at a time with 16-byte loads (one uvec4
// of nibbles, two of int8 activations), lanes on adjacent blocks when a group's blocks fit a
// subgroup in a power of two; otherwise four at a time.
// VKLLM_TAIL (decode steps, vk_fused.cpp): 256 threads a workgroup, and the last workgroup to finish
// (a counter shared by every dispatch of the step) runs the one-row op that reads the mat-vecs'
// outputs, so it needs no dispatch and barrier of its own: the residual add and the next RMS norm
// (TAIL 0, rms_norm.glsl), or SwiGLU of the gate and up rows (TAIL 1: both mat-vecs in one
// dispatch); then, when the row's readers
// are linear_8da4w ops, its int8 quantization for them (quant.glsl). The same arithmetic as the
// unfused ops, so the rows are bit-identical with theirs.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#ifdef VKLLM_TAIL
#define WG 256
#define Y_QUAL coherent
#else
#define Y_QUAL writeonly
#define WG_SPEC
layout(local_size_x = 64, local_size_x_id = 17) in;  // 64 threads, or the host's decode size
#endif
#include "common.glsl"
#include "idot.glsl"
layout(constant_id = 1) const bool Y16 = false;
// 32-weight blocks per lane of a row at the device's smallest subgroup size (decode variant).
layout(constant_id = 9) const uint BPL = 1;
// The decode variant's parts per row (matvec_decode); BPL then counts one part's blocks.
layout(constant_id = 16) const uint PARTS = 1;
#ifdef VKLLM_B32
layout(std430, binding = 0) readonly buffer QX { uvec4 qx[]; };  // K / 16 per token
layout(std430, binding = 2) readonly buffer Q { uvec4 q[]; };    // K / 32 per row
#else
layout(std430, binding = 0) readonly buffer QX { int qx[]; };  // K / 4 per token
layout(std430, binding = 2) readonly buffer Q { uint q[]; };
#endif
layout(std430, binding = 1) readonly buffer QP { uint qp[]; };
layout(std430, binding = 3) readonly buffer S { float s[]; };
layout(std430, binding = 4) readonly buffer WS { int wsum[]; };
DECL_FBUF(5, y, Y_QUAL)
#ifdef VKLLM_TAIL
// A second mat-vec of the same shape and input in the same dispatch (SwiGLU's up rows beside the
// gate's): workgroups from pc.split on take its rows, so that the tail waits for both.
layout(std430, binding = 13) readonly buffer Q2 { uvec4 q2[]; };
layout(std430, binding = 14) readonly buffer S2 { float s2[]; };
layout(std430, binding = 15) readonly buffer WS2 { int wsum2[]; };
DECL_FBUF(16, y2, coherent)
bool second = false;  // this workgroup's rows are the second mat-vec's (uniform per workgroup)
#define Q_AT(I) (second ? q2[I] : q[I])
#define S_AT(I) (second ? s2[I] : s[I])
#define WSUM_AT(I) (second ? wsum2[I] : wsum[I])
#define STORE_Y(I, V)         \
  {                           \
    if (second)               \
      STOREF(y2, Y16, I, V)   \
    else                      \
      STOREF(y, Y16, I, V)    \
  }
#define MATVEC_GROUP (flat_group() - (second ? pc.split : 0u))
#else
#define Q_AT(I) q[I]
#define S_AT(I) s[I]
#define WSUM_AT(I) wsum[I]
#define STORE_Y(I, V) STOREF(y, Y16, I, V)
#endif
layout(push_constant) uniform PC {
  uint K, Nc, n0, N, T, G, R;
#ifdef VKLLM_TAIL
  uint groups, W;  // workgroups of every dispatch of the step; the tail row's width
  float eps;
  uint split;  // the first workgroup of the second mat-vec (all of them when there is none)
#endif
} pc;
#include "matvec.glsl"

// The per-group term: (s * sx) * float(dot - zp * wsum), integers before any rounding.
void add_group(uint n, uint g, uint ng, int d[TT], float sx[TT], int zp[TT], inout float acc[TT]) {
  const float sc = S_AT(n * ng + g);
  const int ws = WSUM_AT(n * ng + g);
  [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] += sc * sx[i] * float(d[i] - zp[i] * ws);
}

#ifdef VKLLM_B32
// Integer dots of 32-weight block b of row n with the block tokens t0.. (16-byte loads).
void block_dot(uint n, uint b, uint t0, inout int d[TT]) {
  const uint nb = pc.K / 32u;
  const uvec4 w = Q_AT(n * nb + b);
  const int w0 = nibbles4_to_i8x4(w.x & 0xFFFFu), w1 = nibbles4_to_i8x4(w.x >> 16),
            w2 = nibbles4_to_i8x4(w.y & 0xFFFFu), w3 = nibbles4_to_i8x4(w.y >> 16),
            w4 = nibbles4_to_i8x4(w.z & 0xFFFFu), w5 = nibbles4_to_i8x4(w.z >> 16),
            w6 = nibbles4_to_i8x4(w.w & 0xFFFFu), w7 = nibbles4_to_i8x4(w.w >> 16);
  [[unroll]] for (uint i = 0; i < TT; ++i) {
    if (t0 + i < pc.T) {
      const uint xb = (t0 + i) * (2u * nb) + 2u * b;
      const uvec4 xa = qx[xb], xc = qx[xb + 1u];
      d[i] = dot4(int(xa.x), w0, d[i]);
      d[i] = dot4(int(xa.y), w1, d[i]);
      d[i] = dot4(int(xa.z), w2, d[i]);
      d[i] = dot4(int(xa.w), w3, d[i]);
      d[i] = dot4(int(xc.x), w4, d[i]);
      d[i] = dot4(int(xc.y), w5, d[i]);
      d[i] = dot4(int(xc.z), w6, d[i]);
      d[i] = dot4(int(xc.w), w7, d[i]);
    }
  }
}
#endif

#ifdef VKLLM_B32
// A decode step (one token; a group's blocks fit a subgroup in a power of two). A row's 32-weight
// blocks are cut into PARTS parts (the host's decode split, vk_ops_internal.h): lane l of part w
// takes blocks l + (w BPL + i) SG, i < BPL, all its loads issued before the first dot; each part
// is summed over the subgroup, and the row is its parts' sums added in part order. So rows with
// few rows and long K spread over PARTS subgroups, and linear_8da4w_fused.comp, which sums the
// parts in one subgroup in the same order, gives the same bits.
float part_dot(uint n, uint t0, uint w, bool ok_row, float sx, int zp) {
  const uint lane = gl_SubgroupInvocationID, nb = pc.K / 32u, bpg = pc.G / 32u, ng = pc.K / pc.G;
  uvec4 wv[BPL], xa[BPL], xc[BPL];
  float sc[BPL];
  int wsv[BPL];
  [[unroll]] for (uint i = 0; i < BPL; ++i) {
    const uint b = lane + (w * BPL + i) * gl_SubgroupSize;
    const bool ok = ok_row && b < nb;
    const uint gi = n * ng + b / bpg;
    wv[i] = ok ? Q_AT(n * nb + b) : uvec4(0u);
    xa[i] = ok ? qx[t0 * (2u * nb) + 2u * b] : uvec4(0u);
    xc[i] = ok ? qx[t0 * (2u * nb) + 2u * b + 1u] : uvec4(0u);
    sc[i] = ok ? S_AT(gi) : 0.0;
    wsv[i] = ok ? WSUM_AT(gi) : 0;
  }
  float acc = 0.0;
  [[unroll]] for (uint i = 0; i < BPL; ++i) {
    const uint b = lane + (w * BPL + i) * gl_SubgroupSize;
    int d = 0;
    d = dot4(int(xa[i].x), nibbles4_to_i8x4(wv[i].x & 0xFFFFu), d);
    d = dot4(int(xa[i].y), nibbles4_to_i8x4(wv[i].x >> 16), d);
    d = dot4(int(xa[i].z), nibbles4_to_i8x4(wv[i].y & 0xFFFFu), d);
    d = dot4(int(xa[i].w), nibbles4_to_i8x4(wv[i].y >> 16), d);
    d = dot4(int(xc[i].x), nibbles4_to_i8x4(wv[i].z & 0xFFFFu), d);
    d = dot4(int(xc[i].y), nibbles4_to_i8x4(wv[i].z >> 16), d);
    d = dot4(int(xc[i].z), nibbles4_to_i8x4(wv[i].w & 0xFFFFu), d);
    d = dot4(int(xc[i].w), nibbles4_to_i8x4(wv[i].w >> 16), d);
    for (uint off = 1u; off < bpg; off <<= 1u) d += subgroupShuffleXor(d, off);
    if (ok_row && b < nb && (lane & (bpg - 1u)) == 0u) acc += sc[i] * sx * float(d - zp * wsv[i]);
  }
  return subgroupAdd(acc);
}

shared float part_sum[256];  // PARTS > 1: the parts' sums of a pass's rows (row-major)

void matvec_decode(uint row0, uint t0) {
  const float sx = uintBitsToFloat(qp[2 * t0]);
  const int zp = int(qp[2 * t0 + 1]);
  const uint NS = gl_NumSubgroups, sgid = gl_SubgroupID;
  if (PARTS == 1u) {
    for (uint r = sgid; r < pc.R; r += NS) {
      const uint n = row0 + r;
      const bool ok = n < pc.Nc;
      const float sum = part_dot(n, t0, 0u, ok, sx, zp);
      if (ok && gl_SubgroupInvocationID == 0u) STORE_Y(t0 * pc.N + pc.n0 + n, sum);
    }
    return;
  }
  // Passes of RP rows: their RP x PARTS (row, part) tasks spread over the subgroups, the sums
  // through shared memory, then one thread per row adds them in part order.
  const uint RP = max(1u, NS / PARTS), tasks = RP * PARTS;
  for (uint base = 0; base < pc.R; base += RP) {
    for (uint t = sgid; t < tasks; t += NS) {
      const uint r = base + t / PARTS, n = row0 + r;
      const float sum = part_dot(n, t0, t % PARTS, r < pc.R && n < pc.Nc, sx, zp);
      if (gl_SubgroupInvocationID == 0u) part_sum[t] = sum;
    }
    barrier();
    const uint tid = gl_LocalInvocationID.x, r = base + tid, n = row0 + r;
    if (tid < RP && r < pc.R && n < pc.Nc) {
      float sum = part_sum[tid * PARTS];
      for (uint w = 1u; w < PARTS; ++w) sum += part_sum[tid * PARTS + w];
      STORE_Y(t0 * pc.N + pc.n0 + n, sum);
    }
    barrier();
  }
}
#endif

void matvec() {
  uint row0, t0;
  if (!matvec_block(pc.Nc, pc.R, pc.T, row0, t0)) return;
#ifdef VKLLM_B32
  const uint bpg0 = pc.G / 32u;
  if (TT == 1u && bpg0 <= gl_SubgroupSize && (bpg0 & (bpg0 - 1u)) == 0u) {
    matvec_decode(row0, t0);
    return;
  }
#endif
  const uint lane = gl_SubgroupInvocationID, ng = pc.K / pc.G;
  float sx[TT];
  int zp[TT];
  [[unroll]] for (uint i = 0; i < TT; ++i) {
    const uint t = min(t0 + i, pc.T - 1u);
    sx[i] = uintBitsToFloat(qp[2 * t]);
    zp[i] = int(qp[2 * t + 1]);
  }
  for (uint r = gl_SubgroupID; r < pc.R && row0 + r < pc.Nc; r += gl_NumSubgroups) {
    const uint n = row0 + r;
    float acc[TT];
    [[unroll]] for (uint i = 0; i < TT; ++i) acc[i] = 0.0;
#ifdef VKLLM_B32
    const uint nb = pc.K / 32u, bpg = pc.G / 32u;
    if (bpg <= gl_SubgroupSize && (bpg & (bpg - 1u)) == 0u) {
      // Lanes take consecutive 32-weight blocks (one 16-byte load each, adjacent lanes adjacent
      // bytes); the bpg lanes of one group add their integer dots with xor shuffles, exactly.
      for (uint b0 = 0; b0 < nb; b0 += gl_SubgroupSize) {
        const uint b = b0 + lane;
        int d[TT];
        [[unroll]] for (uint i = 0; i < TT; ++i) d[i] = 0;
        if (b < nb) block_dot(n, b, t0, d);
        for (uint off = 1u; off < bpg; off <<= 1u)
          [[unroll]] for (uint i = 0; i < TT; ++i) d[i] += subgroupShuffleXor(d[i], off);
        if (b < nb && (lane & (bpg - 1u)) == 0u) add_group(n, b / bpg, ng, d, sx, zp, acc);
      }
    } else {
      for (uint g = lane; g < ng; g += gl_SubgroupSize) {
        int d[TT];
        [[unroll]] for (uint i = 0; i < TT; ++i) d[i] = 0;
        for (uint b = g * bpg; b < (g + 1u) * bpg; ++b) block_dot(n, b, t0, d);
        add_group(n, g, ng, d, sx, zp, acc);
      }
    }
#else
    for (uint g = lane; g < ng; g += gl_SubgroupSize) {
      int d[TT];
      [[unroll]] for (uint i = 0; i < TT; ++i) d[i] = 0;
      const uint row_byte = n * (pc.K / 2u), K4 = pc.K / 4u;
      for (uint k4 = g * (pc.G / 4u); k4 < (g + 1u) * (pc.G / 4u); ++k4) {
        const uint byte = row_byte + 2u * k4;
        const uint word = q[byte >> 2];
        const int w4 = nibbles4_to_i8x4((byte & 2u) != 0u ? (word >> 16) : (word & 0xFFFFu));
        [[unroll]] for (uint i = 0; i < TT; ++i)
          if (t0 + i < pc.T) d[i] = dot4(qx[(t0 + i) * K4 + k4], w4, d[i]);
      }
      add_group(n, g, ng, d, sx, zp, acc);
    }
#endif
    [[unroll]] for (uint i = 0; i < TT; ++i) {
      const float sum = subgroupAdd(acc[i]);
      if (lane == 0u && t0 + i < pc.T) STORE_Y((t0 + i) * pc.N + pc.n0 + n, sum);
    }
  }
}

#ifdef VKLLM_TAIL
layout(constant_id = 10) const uint TAIL = 0;  // 0: add + rms_norm, 1: swiglu, 2: none
layout(constant_id = 11) const bool A16 = false;     // add: the residual; swiglu: the gate rows
layout(constant_id = 12) const bool B16 = false;     // swiglu: the up rows
layout(constant_id = 13) const bool S16 = false;     // the add's sum, or the swiglu output
layout(constant_id = 14) const bool N16 = false;     // the normalized row
layout(constant_id = 15) const bool TQUANT = false;  // quantize the tail's row
layout(std430, binding = 6) coherent buffer CNT { uint counter[]; };
DECL_FBUF(7, ta, coherent)   // add: the residual; swiglu: the gate rows
DECL_FBUF(8, tb, coherent)   // add: the norm weight (fp32); swiglu: the up rows
DECL_FBUF(9, ts, writeonly)  // the add's sum, or the swiglu output
DECL_FBUF(10, tn, writeonly) // the normalized row
#define QUANT_ROW_BINDING 11
#include "quant.glsl"

// rms_norm.glsl's input: this step's mat-vec output plus the residual, as rms_norm_add sums them.
float norm_in(uint i) { return round_to(S16, LOADF(y, Y16, i) + LOADF(ta, A16, i)); }
void norm_keep(uint i, float v) { STOREF(ts, S16, i, v); }
float norm_w(uint j) { return LOADF(tb, false, j); }
void norm_out(uint i, float v) { STOREF(tn, N16, i, v); }
float norm_round(float v) { return round_to(N16, v); }
#define NORM_QUANT TQUANT
#define NORM_MAX 8192  // ~35 KiB of shared memory: tail runs need kTailShared (vk_fused.cpp)
#include "rms_norm.glsl"
// swiglu.comp's value, rounded as its output stores it.
float swiglu_value(uint j) {
  const float gv = LOADF(ta, A16, j);
  return round_to(S16, gv / (1.0 + exp(-gv)) * LOADF(tb, B16, j));
}
// The quantizer's row: the norm's, or the SwiGLU row the tail keeps in norm_x (W <= NORM_MAX).
float row_value(uint r, uint j) {
  return TAIL == 0u ? normed(0u, j) : (pc.W <= NORM_MAX ? norm_x[j] : swiglu_value(j));
}

shared uint tail_last;
void tail() {
  if (TAIL == 2u) return;  // a dispatch before the step's last (weights in several row chunks)
  const uint tid = gl_LocalInvocationID.x;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) tail_last = atomicAdd(counter[0], 1u) == pc.groups - 1u ? 1u : 0u;
  barrier();
  if (tail_last == 0u) return;
  memoryBarrierBuffer();
  if (TAIL == 0u) {
    norm_row(0u, pc.W, pc.eps);
  } else {
    float lo = 0.0, hi = 0.0;
    uint j = tid;
    for (; j + 3u * WG < pc.W; j += 4u * WG) {  // four rows' loads in flight
      const vec4 v = vec4(swiglu_value(j), swiglu_value(j + WG), swiglu_value(j + 2u * WG),
                          swiglu_value(j + 3u * WG));
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        STOREF(ts, S16, j + e * WG, v[e]);
        if (pc.W <= NORM_MAX) norm_x[j + e * WG] = v[e];
        lo = min(lo, v[e]);
        hi = max(hi, v[e]);
      }
    }
    for (; j < pc.W; j += WG) {
      const float v = swiglu_value(j);
      STOREF(ts, S16, j, v);
      if (pc.W <= NORM_MAX) norm_x[j] = v;
      lo = min(lo, v);
      hi = max(hi, v);
    }
    if (TQUANT) quantize_row(0u, pc.W, lo, hi);  // (its first barrier publishes norm_x)
  }
  if (tid == 0u) counter[0] = 0u;
}
#endif

void main() {
#ifdef VKLLM_TAIL
  second = flat_group() >= pc.split;
#endif
  matvec();
#ifdef VKLLM_TAIL
  tail();
#endif
}
