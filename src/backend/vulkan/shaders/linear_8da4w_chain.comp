#version 450
// A chain of the decode step's fused mat-vec runs in one persistent dispatch (vk_fused.cpp, chain
// runs): the grid is resident (one workgroup per compute unit), every run of the chain is a stage,
// and consecutive stages meet at a grid-wide sync (grid_sync.glsl, ~1 us on the H200) instead of
// the end of a dispatch, a pipeline barrier and the start of the next (~1.7 us, and the next
// kernel's first weight loads then wait a DRAM latency of their own: docs/perf.md, "The speed
// physics"). Each workgroup issues the loads of its first rows of the next stage before the sync,
// so the weights' latency overlaps the sync and the prologue.
// A stage is one of linear_8da4w_fused.comp's runs, computed the same way (the same int8 codes,
// the same sums in the same order, the same roundings), or its int4 weight-only twin (a q4w stage,
// flag 128: the row kept in floats, linear_q4w_mv.comp's sums, q4w.glsl):
//  prologue pro = 0: the input row quantized (quant.glsl's formula);
//               1: the row normalized as rms_norm stores it, then quantized;
//               2: Gemma 3's post-norm first: the input row (a mat-vec's output) normalized as
//                  rms_norm stores it, added to the residual as add stores the sum (which
//                  workgroup 0 stores), and that sum normalized and quantized as in 1;
//  epilogue epi = 0: each of 1-3 mat-vecs stores its rows (flag 256: each row rounded as the
//               mat-vec's output is stored, plus its fp32 bias, as bias_add stores it);
//               1: the residual add (y = r + W x rounded as the mat-vec's output is stored);
//               2: SwiGLU of the gate and up mat-vecs (rows computed together);
//               3: GeGLU of them (common.glsl geglu_of).
// Or it is an attention run (pro = 3: attention_decode.glsl's items, below), so that the runs on
// either side of it, and so a whole forward, can be one chain.
// The prologue runs on the workgroup's threads, a norm's sum of squares in rms_norm.comp's order
// (that order depends on rms_norm's workgroup size, 256). The rows are spread over every subgroup
// of the grid, and each subgroup walks its rows as a stream of units, UB 32-weight blocks per lane
// of one row (a row of K weights is ceil(K / 32 / UB / lanes) units; a SwiGLU row's gate and up
// units alternate) in batches of DEPTH
// units: a batch's loads are issued together, and (PIPE) the next batch's before this one is
// summed, so that a subgroup always has loads in flight and every stage reads its weights with
// the same few registers whatever its width; the loads of a stage's first batch are issued before
// the sync that precedes it.
// The int8 row sits in shared memory as shared_row_dot.glsl lays it out; a q4w stage's float row in
// xv (below).
// Buffers are reached through their device addresses (a stage table, one binding): a chain has
// more tensors than a device's binding limit allows. Activations are `coherent`: a stage reads
// rows that other workgroups wrote before the sync.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
// CHAIN_WG: the workgroup's threads (512 for the _w512 variants, the default: one workgroup an SM
// instead of two of 256, so that an SM runs each stage's prologue once). The prologue runs on all
// of them; a norm's sum of squares on the first 256, in rms_norm.comp's order (NWG).
#ifndef CHAIN_WG
#define CHAIN_WG 256
#endif
#define WG CHAIN_WG
#define PWG uint(CHAIN_WG)
const uint NWG = 256u;
#include "common.glsl"
#define QUANT_LANES
#include "quant.glsl"
#include "idot.glsl"
// 1: the chain has int8 (8da4w) stages; 0: only q4w and attention stages, so the int8 row's shared
// memory is compiled out (9 KiB: room for an attention stage beside a q4w stage's float row of
// 8,192 values in 48 KiB). The host's, vk_fused.cpp chain_shared.
layout(constant_id = 13) const uint INT8 = 1;
#define SRD_QXS (INT8 != 0u ? 2u * QX_HALF : 1u)
#define SRD_XSUM (INT8 != 0u ? 8192u / 32u : 1u)
#include "shared_row_dot.glsl"
#define GS_BINDING 0
#define GS_SPIN 2
#include "grid_sync.glsl"
// Units in flight per subgroup (the host's, vk_fused.cpp chain_depth).
layout(constant_id = 1) const uint DEPTH = 4;
// VKLLM_CHAIN_MEASURE=noload (1; a measurement switch, the output is wrong): the row loop sums
// made-up weights instead of loading them, so the clock shows the loop's work without its loads.
layout(constant_id = 3) const uint MEASURE = 0;
// 1: the row loop is compiled once for each epilogue (its per and epi constants folded into each
// copy), 0: one loop for all (the host's, vk_fused.cpp chain_specialize).
layout(constant_id = 4) const uint SPECIALIZE = 1;
// The float row's vec4s in shared memory (the host's: 9 K / 32 for the widest q4w stage's K, at
// least 1,152 for a norm stage's 4,096 values).
layout(constant_id = 5) const uint XV = 1152;
// 1: the chain has q4w stages (0: their row loops are compiled out).
layout(constant_id = 6) const uint Q4W = 0;
// 1: the row loop keeps two batches of units in flight (the host's, vk_fused.cpp chain_pipe): a
// batch's loads are issued before the batch before it is summed, so that a subgroup always has
// loads in flight; 0: one batch (its sums wait for its loads, then the next batch is issued).
layout(constant_id = 7) const uint PIPE = 1;
// How rows are dealt (the host's, vk_fused.cpp chain_deal): 0 subgroup s of workgroup w starts at
// row w NS + s (a workgroup's subgroups take neighbouring rows), 1 at row s G + w (neighbouring
// rows go to different workgroups, so that a stage's rows past the grid's first round spread over
// every SM rather than filling the first workgroups).
layout(constant_id = 8) const uint DEAL = 0;
// 32-weight blocks a lane in a unit (the host's, vk_fused.cpp chain_ub; 1 or 2): unit c of a row
// covers blocks (c UB + h) 32 + lane, h < UB, i.e. the one-block units c UB .. c UB + UB - 1,
// loaded together and summed in their order (the same bits), with one cursor step, one set of
// addresses and one branch for all of them.
layout(constant_id = 9) const uint UB = 1;
// Attention stages (pro = 3; the host's, vk_fused.cpp chain attention): the head dim (0: the chain
// has none) and attention_decode.comp's dtypes and steps as bits: 1 A16 (q, k, v), 2 C16 (caches),
// 4 Y16 (output), 8 N16 (normed q / k), 16 R16 (rotated q / k), 32 QKNORM, 64 ROPE.
layout(constant_id = 10) const uint ATT_HD = 0;
layout(constant_id = 11) const uint ATT_FLAGS = 0;
// 1: the grid sync that ends a stage is split in two (grid_sync.glsl): a workgroup arrives as soon
// as its rows are done, then takes the next stage's record and issues its first loads, then waits;
// so the last workgroup to finish a stage has its setup off the critical path. 0: the setup, then
// the whole sync (the host's, vk_fused.cpp chain_split_sync; measurement).
layout(constant_id = 12) const uint SPLIT_SYNC = 1;
// 1: the chain has post-norm stages (pro 2) or GeGLU epilogues (epi 3), Gemma 3's; 0: their code
// and the post-norm weight's registers are compiled out (the host's, vk_chain.cpp).
layout(constant_id = 14) const uint POST = 0;
layout(std430, binding = 1) readonly buffer Table { uint tab[]; };
layout(push_constant) uniform PC { uint stages; } pc;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer QRef { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer FRef { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer IRef { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer ARef { float v[]; };
#ifdef VKLLM_F16
layout(buffer_reference, std430, buffer_reference_align = 2) coherent buffer HRef {
  float16_t v[];
};
#endif

float act_load(uvec2 a, bool h, uint i) {
#ifdef VKLLM_F16
  if (h) return float(HRef(a).v[i]);
#endif
  return ARef(a).v[i];
}
void act_store(uvec2 a, bool h, uint i, float v) {
#ifdef VKLLM_F16
  if (h) {
    HRef(a).v[i] = float16_t(v);
    return;
  }
#endif
  ARef(a).v[i] = v;
}
// The stage table (vk_fused.cpp chain_table): SREC words per stage.
//  0 K, 1 G (group), 2 pro, 3 epi, 4 mat-vecs, 5 flags (1 x f16, 2 norm output f16, 4 mat-vec
//  outputs f16, 8 residual f16, 16 << m: output m f16, 128 a q4w stage, 256 biases, 512 the
//  post-norm's output f16, 1024 the sum f16), 6 eps, 7 rows, 8 x, 10 norm weight, 12 residual,
//  14 the post-norm's weight, and per mat-vec m at 16 + 10 m: rows, nibbles, scales, weight sums,
//  output; 46 the post-norm's eps; its bias at 48 + 2 m; 54 the sum (pro 2); 63 the clock's slot
//  (VKLLM_CLOCK).
const uint SREC = 64u;
uint T(uint st, uint w) { return tab[st * SREC + w]; }
uvec2 A(uint st, uint w) { return uvec2(tab[st * SREC + w], tab[st * SREC + w + 1u]); }
uint M(uint st, uint m, uint w) { return T(st, 16u + 10u * m + w); }
uvec2 MA(uint st, uint m, uint w) { return A(st, 16u + 10u * m + w); }
// The stage's record in shared memory (stage() below): word w at stab[.][w / 2][w % 2], so an
// address is one load.
shared uvec2 stab[2][SREC / 2u];

// An attention stage runs attention_decode.glsl's items (head h, split c), item i = (c - c0) H + h
// (c0 the first split with keys in a sliding window, 0 without one) on workgroup i % groups, one
// after the other, the first one's tile loads issued before the sync; its record: 8 q, 10 k, 12 v,
// 14 k cache, 16 v cache, 18 output, 20 split partials, 22 split counters, 24 the step's position,
// 26 rope's cos/sin table, 28 q norm weight, 30 k norm weight (addresses), 32 H, 33 Hkv, 34 S,
// 35 C, 36 R, 37 orig, 38 ctx, 39 scale, 40 q eps, 41 k eps, 42 window (0: none), 43 the caches'
// rows (a sliding layer's ring: attention_decode.glsl AttP; read where ATT_FLAGS has 128).
const uint HD = ATT_HD > 0u ? ATT_HD : 8u;
const bool A16 = (ATT_FLAGS & 1u) != 0u, C16 = (ATT_FLAGS & 2u) != 0u,
           Y16 = (ATT_FLAGS & 4u) != 0u, N16 = (ATT_FLAGS & 8u) != 0u,
           R16 = (ATT_FLAGS & 16u) != 0u, QKNORM = (ATT_FLAGS & 32u) != 0u,
           ROPE = (ATT_FLAGS & 64u) != 0u, RING = (ATT_FLAGS & 128u) != 0u;
const uint ATT_MEASURE = 0u;
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer KWRef { uvec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer KNRef { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer CSRef { vec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CntRef { uint v[]; };
uint att_par;  // the attention stage's record: stab[att_par] (set with the stage)
uvec2 AW(uint w) { return stab[att_par][w >> 1u]; }  // (w even)
#define ATT_PART(i) ARef(AW(20u)).v[i]
#define ATT_KCW(i) KWRef(AW(14u)).v[i]
#define ATT_KCN(i) KNRef(AW(14u)).v[i]
#define ATT_VCW(i) KWRef(AW(16u)).v[i]
#define ATT_VCN(i) KNRef(AW(16u)).v[i]
#define ATT_Q(i) act_load(AW(8u), A16, i)
#define ATT_K(i) act_load(AW(10u), A16, i)
#define ATT_V(i) act_load(AW(12u), A16, i)
#define ATT_CS(i) CSRef(AW(26u)).v[i]
#define ATT_QN(j) FRef(AW(28u)).v[j]
#define ATT_KN(j) FRef(AW(30u)).v[j]
#define ATT_STORE_KC(i, x) act_store(AW(14u), C16, i, x)
#define ATT_STORE_VC(i, x) act_store(AW(16u), C16, i, x)
#define ATT_STORE_O(i, x) act_store(AW(18u), Y16, i, x)
#define ATT_COUNT(h) atomicAdd(CntRef(AW(22u)).v[h], 1u)
#define ATT_RESET(h) CntRef(AW(22u)).v[h] = 0u
#define ATT_MCH_MAX 8u
#define ATT_VP_N (ATT_HD > 0u ? ATT_WG * 4u : 1u)  // (no attention stage: compiled out)
shared float qs[HD], tmp[2u * HD];  // q as attended; the q and k rows before norm and rope
shared uint last_split;
#define ATT_MERGE
// Cache rows: a ring's (kv_row) only in chains with a sliding layer's ring (RING, 128).
uint att_rows = 0xFFFFFFFFu;
#define ATT_ROW(j) (RING ? kv_row(j, att_rows) : (j))
#include "attention_split.glsl"
#include "attention_decode.glsl"


// VKLLM_CLOCK (the _clock variants, VKLLM_CHAIN_CLOCK=1): thread 0 of each workgroup adds the SM
// cycles of each phase of each stage to its own slot (table word 63; the host prints the sums,
// vk_fused.cpp print_chain_clock): 0 the stage's setup and first fetches, 1 the grid sync, the
// prologue's 2 loads and reductions, 3 scale and zero point, 4 codes, 5 subgroup 0's rows, 6 the
// workgroup's other subgroups finishing theirs (a barrier the clocked kernel alone has), 7 a count
// of samples. Two words a phase: a 64-bit sum.
#ifdef VKLLM_CLOCK
#extension GL_ARB_shader_clock : require
layout(std430, binding = 2) buffer Clock { uint clk[]; };
const uint CLK_PHASES = 8u, CLK_STAGES = 8u;
// The dispatch's cycles per stage and phase, kept in shared memory (a global add on the way would
// wait out a memory round trip inside the phase it ends) and added to the slots at the end.
shared uint clk_d[CLK_STAGES][CLK_PHASES - 1u];
uvec2 clk_t;   // the last mark's clock
uint clk_st;  // the stage
void clk_mark(uint ph) {
  const uvec2 now = clock2x32ARB();
  if (gl_LocalInvocationIndex == 0u && clk_st < CLK_STAGES) clk_d[clk_st][ph] = now.x - clk_t.x;
  clk_t = now;
}
void clk_add(uint slot, uint ph, uint v) {
  const uint at = ((slot * grid_groups() + flat_group()) * CLK_PHASES + ph) * 2u;
  const uint s = clk[at] + v;
  clk[at + 1u] += s < v ? 1u : 0u;
  clk[at] = s;
}
void clk_flush() {
  if (gl_LocalInvocationIndex != 0u) return;
  for (uint st = 0; st < min(pc.stages, CLK_STAGES); ++st) {
    const uint slot = tab[st * SREC + SREC - 1u];
    if (slot == 0xFFFFFFFFu) continue;
    for (uint ph = 0; ph + 1u < CLK_PHASES; ++ph) clk_add(slot, ph, clk_d[st][ph]);
    clk_add(slot, CLK_PHASES - 1u, 1u);
  }
}
#define CLK(PH) clk_mark(PH)
#else
#define CLK(PH)
#endif

// The input row in chunks of eight values: chunk c holds values 8c .. 8c + 7, which become word
// pair c of the int8 row (shared_row_dot.glsl). Thread t loads chunks t, t + PWG, ... with one
// 16-byte load each (two for fp32), every load of the row issued at once: one L2 round trip for
// the row, however wide (the prologue of loops over scalar loads was
// half of a stage).
const uint MAXK = 8192u, MAXNORMK = 4096u;  // (vk_fused.cpp kChainMaxK, kChainMaxNormK)
const uint NCH = MAXK / 8u / PWG, NCHN = MAXNORMK / 8u / PWG;  // chunks a thread at most
// A norm stage's row, then its normalized row as rms_norm stores it; a q4w stage's row (as stored,
// or normalized): element i at xv[i / 4 + i / 32][i % 4], a vec4 of padding after each block, so
// that the lanes of a q4w unit (a block each, 32 floats apart) read different banks.
shared vec4 xv[XV];
float xs_get(uint i) { return xv[(i >> 2u) + (i >> 5u)][i & 3u]; }
void xs_set(uint i, float v) { xv[(i >> 2u) + (i >> 5u)][i & 3u] = v; }
#include "q4w.glsl"
shared float red_lo[64], red_hi[64];  // (red: attention_split.glsl's)
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer VRef { uvec4 v[]; };
struct Chunk {
  uvec4 a, b;  // fp16: eight halves in a; fp32: values 0-3 in a, 4-7 in b
};
Chunk load_chunk(uvec2 addr, bool h, uint c) {
  Chunk k;
#ifdef VKLLM_F16
  if (h) {
    k.a = VRef(addr).v[c];
    k.b = uvec4(0u);
    return k;
  }
#endif
  k.a = VRef(addr).v[2u * c];
  k.b = VRef(addr).v[2u * c + 1u];
  return k;
}
float chunk_at(Chunk k, bool h, uint e) {
#ifdef VKLLM_F16
  if (h) return unpackHalf2x16(k.a[e >> 1u])[e & 1u];
#endif
  return uintBitsToFloat(e < 4u ? k.a[e] : k.b[e - 4u]);
}

const uint NONE = 0xFFFFFFFFu;

// A stage's constants, read from the table once per stage so that the row loop reads none from
// memory: the row's blocks (nb) and units per mat-vec (C) and in all (ur), mat-vecs a row (per: 2
// for SwiGLU's gate and up, else 1), log2 of blocks a group, groups a row, the rows of each
// mat-vec (a store epilogue's rows are theirs one after the other). The stage's record itself
// (its buffers' addresses) is copied to shared memory, two records apart so that the next
// stage's copy (made before the sync, for its first loads) leaves this one to the subgroups still
// in its rows; the row loop reads the addresses from there, not from registers (docs/perf.md,
// measured: registers decide how many workgroups an SM holds).
uint SW(uint par, uint w) { return stab[par][w >> 1u][w & 1u]; }
struct Stage {
  uint nb, C, per, ur, lbpg, ng, nm, rows, mine, rows0, rows1, par, epi;
  bool fd;  // a q4w stage (float dot)
};
uvec2 SA(Stage g, uint w) { return stab[g.par][w >> 1u]; }  // (w even)
// rec: word tid of the stage's record (threads tid < SREC), loaded a stage ahead (main).
Stage stage(uint st, uint r0, uint step, uint rec) {
  Stage g;
  g.par = st & 1u;
  const uint tid = gl_LocalInvocationID.x;
  if (tid < SREC) stab[g.par][tid >> 1u][tid & 1u] = rec;
  barrier();
  const uint K = SW(g.par, 0u), G = SW(g.par, 1u), epi = SW(g.par, 3u);
  g.nb = K / 32u;
  g.C = (g.nb + UB * gl_SubgroupSize - 1u) / (UB * gl_SubgroupSize);
  g.per = epi >= 2u ? 2u : 1u;
  g.ur = g.C * g.per;
  g.lbpg = uint(findLSB(G / 32u));
  g.ng = K / G;
  g.nm = epi != 0u ? 1u : SW(g.par, 4u);
  g.rows = SW(g.par, 7u);
  g.mine = r0 < g.rows ? (g.rows - r0 + step - 1u) / step : 0u;
  g.rows0 = SW(g.par, 16u);
  g.rows1 = g.nm > 1u ? SW(g.par, 26u) : 0u;
  g.epi = epi;
  g.fd = Q4W == 1u && (SW(g.par, 5u) & 128u) != 0u;
  return g;
}

// A subgroup's place in its stream of units: its k-th row (stage row r0 + k step), the unit w in
// that row, the mat-vec m and row n the row stores (m = NONE past this subgroup's rows).
struct Cur {
  uint k, w, m, n;
};
void place(Stage g, uint r, inout Cur u) {
  u.n = r;
  u.m = 0u;
  if (g.per == 1u && u.n >= g.rows0) {
    u.n -= g.rows0;
    u.m = 1u;
    if (u.n >= g.rows1) {
      u.n -= g.rows1;
      u.m = 2u;
    }
  }
}
Cur start(Stage g, uint r0) {
  Cur u;
  u.k = 0u;
  u.w = 0u;
  u.m = NONE;
  u.n = 0u;
  if (g.mine > 0u) place(g, r0, u);
  return u;
}
void advance(Stage g, uint r0, uint step, inout Cur u) {
  if (++u.w < g.ur) return;
  u.w = 0u;
  if (++u.k < g.mine)
    place(g, r0 + u.k * step, u);
  else
    u.m = NONE;
}

// The units in flight: a batch's loads (fetch_batch), then its sums; with PIPE, a second batch in
// q2, s2, ws2 (module-scope arrays indexed by constants), UB slots a
// unit.
uvec4 q[DEPTH * UB], q2[DEPTH * UB];
float s[DEPTH * UB], s2[DEPTH * UB];
int ws[DEPTH * UB], ws2[DEPTH * UB];
void put(uint set, uint k, uvec4 qq, float ss, int ww) {
  if (set == 0u) {
    q[k] = qq;
    s[k] = ss;
    ws[k] = ww;
  } else {
    q2[k] = qq;
    s2[k] = ss;
    ws2[k] = ww;
  }
}

// The loads of unit u (nothing past this subgroup's rows) into slots k UB .. k UB + UB - 1 of
// set `set`.
void fetch(Stage g, Cur u, uint set, uint k) {
  const uint hf = g.per == 2u ? (u.w & 1u) : 0u, c = u.w >> (g.per - 1u);
  const uint mat = g.per == 2u ? hf : u.m, at = 16u + 10u * mat;
  [[unroll]] for (uint h = 0; h < UB; ++h) {
    const uint b = (c * UB + h) * gl_SubgroupSize + gl_SubgroupInvocationID;
    uvec4 qq = uvec4(0u);
    float ss = 0.0;
    int ww = 0;
    if (u.m != NONE && b < g.nb) {
      if (MEASURE == 1u) {
        qq = uvec4(u.n * 2654435761u + b) * uvec4(1u, 3u, 5u, 7u);
        ss = 1e-3;
      } else {
        const uint gi = u.n * g.ng + (b >> g.lbpg);
        qq = QRef(SA(g, at + 2u)).v[u.n * g.nb + b];
        ss = FRef(SA(g, at + 4u)).v[gi];
        if (!g.fd) ww = IRef(SA(g, at + 6u)).v[gi];
      }
    }
    put(set, k * UB + h, qq, ss, ww);
  }
}

// Row n of mat-vec m: its epilogue and store. a: the row's sum; u: the up row's (SwiGLU).
void finish(Stage g, uint m, uint n, float a, float u) {
  const uint epi = g.epi, fl = SW(g.par, 5u);
  const bool o16 = (fl & 4u) != 0u, r16 = (fl & 8u) != 0u, y16 = (fl & (16u << m)) != 0u;
  float val = a;
  if (epi == 0u && (fl & 256u) != 0u) {
    val = round_to(o16, a) + FRef(SA(g, 48u + 2u * m)).v[n];
  } else if (epi == 1u) {
    val = act_load(SA(g, 12u), r16, n) + round_to(o16, a);
  } else if (epi == 2u) {
    const float gt = round_to(o16, a), up = round_to(o16, u);
    val = gt / (1.0 + exp(-gt)) * up;
  } else if (POST == 1u && epi == 3u) {
    val = geglu_of(round_to(o16, a), round_to(o16, u));
  }
  if (subgroupElect()) act_store(SA(g, 16u + 10u * m + 8u), y16, n, val);
}

// The term of block b (its loads in q, s, ws; none past the row): its dot, the group's blocks
// added across lanes, times the scales. Subgroup-uniform.
float term(Stage g, uint b, float sx, int zp, uvec4 q, float s, int ws) {
  const uint bpg = 1u << g.lbpg;
  const bool ok = b < g.nb;
  if (g.fd) {  // q4w.glsl's block sum; the group's blocks added across lanes; times the scale
    float d = ok ? q4_block(q, 9u * b) : 0.0;
    for (uint off = 1u; off < bpg; off <<= 1u) d += subgroupShuffleXor(d, off);
    return d * s;
  }
  int d = ok ? block_dot(q, b) : 0;
  for (uint off = 1u; off < bpg; off <<= 1u) d += subgroupShuffleXor(d, off);
  return s * sx * float(d - zp * ws);  // the CPU's (s * sx) * float(dot - zp * wsum)
}

void fetch_batch(Stage g, uint r0, uint step, inout Cur f) {
  [[unroll]] for (uint i = 0; i < DEPTH; ++i) {
    fetch(g, f, 0u, i);
    advance(g, r0, step, f);
  }
}
void fetch_batch2(Stage g, uint r0, uint step, inout Cur f) {
  [[unroll]] for (uint i = 0; i < DEPTH; ++i) {
    fetch(g, f, 1u, i);
    advance(g, r0, step, f);
  }
}

// Sums unit u (its loads in slots k UB .. of set `set`) into its row's sum, its blocks' terms
// first, then added in block order; the row's last unit finishes the row. acc0: the row's (the
// gate's) partial sum, acc1: the up row's. Subgroup-uniform.
void consume(Stage g, Cur u, uint set, uint k, float sx, int zp, inout float acc0,
             inout float acc1) {
  const uint lane = gl_SubgroupInvocationID, hf = g.per == 2u ? (u.w & 1u) : 0u;
  const uint c = u.w >> (g.per - 1u), bpg = 1u << g.lbpg;
  float t[UB];
  [[unroll]] for (uint h = 0; h < UB; ++h) {
    const uint b = (c * UB + h) * gl_SubgroupSize + lane, j = k * UB + h;
    if (set == 0u)
      t[h] = term(g, b, sx, zp, q[j], s[j], ws[j]);
    else
      t[h] = term(g, b, sx, zp, q2[j], s2[j], ws2[j]);
  }
  [[unroll]] for (uint h = 0; h < UB; ++h) {
    const uint b = (c * UB + h) * gl_SubgroupSize + lane;
    if (b < g.nb && (lane & (bpg - 1u)) == 0u) {
      if (hf == 0u)
        acc0 += t[h];
      else
        acc1 += t[h];
    }
  }
  if (u.w + 1u == g.ur) {
    const float a = subgroupAdd(acc0), up = g.per == 2u ? subgroupAdd(acc1) : 0.0;
    finish(g, u.m, u.n, a, up);
    acc0 = 0.0;
    acc1 = 0.0;
  }
}

// A batch summed (set 0: q, s, ws; 1: q2, s2, ws2).
void sum_batch(Stage g, uint set, uint r0, uint step, float sx, int zp, inout Cur u,
               inout float acc0, inout float acc1) {
  [[unroll]] for (uint i = 0; i < DEPTH; ++i) {
    if (u.m != NONE) {
      consume(g, u, set, i, sx, zp, acc0, acc1);
      advance(g, r0, step, u);
    }
  }
}

// A norm stage's weights (fp32) in this thread's chunks, loaded before the sync that precedes
// the stage (they depend on no stage, and their first read by the grid misses L2): the norm's,
// and a post-norm stage's post-norm's.
Chunk normw[NCHN], postw[NCHN];
// Chunk c of the fp32 weight at address a (zeros where `on` is false).
Chunk weight_chunk(bool on, uvec2 a, uint c) {
  Chunk k;
  k.a = on ? QRef(a).v[2u * c] : uvec4(0u);
  k.b = on ? QRef(a).v[2u * c + 1u] : uvec4(0u);
  return k;
}
void norm_weight(Stage g) {
  const uint tid = gl_LocalInvocationID.x, nch = SW(g.par, 0u) / 8u, pro = SW(g.par, 2u);
  const bool post = POST == 1u && pro == 2u, norm = pro == 1u || post;
  [[unroll]] for (uint i = 0; i < NCHN; ++i) {
    const uint c = tid + PWG * i;
    normw[i] = weight_chunk(norm && c < nch, SA(g, 10u), c);
    postw[i] = weight_chunk(post && c < nch, SA(g, 14u), c);
  }
}

// 1 / sqrt(mean + eps) of the K values in xv: the squares summed in rms_norm.glsl's order (four
// values at a time, then the rest, over the row's elements tid + NWG i, by the first NWG threads),
// so the norm is rms_norm's. Every thread calls it; a barrier first (xv written) and one inside
// (xv read).
float row_inv(uint K, float eps) {
  const uint tid = gl_LocalInvocationID.x;
  barrier();
  precise vec4 ss = vec4(0.0);  // (no contraction, as rms_norm.glsl's norm_row)
  if (tid < NWG) {
    uint j = tid;
    for (; j + 3u * NWG < K; j += 4u * NWG) {
      const vec4 v = vec4(xs_get(j), xs_get(j + NWG), xs_get(j + 2u * NWG), xs_get(j + 3u * NWG));
      ss += v * v;
    }
    for (; j < K; j += NWG) {
      const float v = xs_get(j);
      ss.x += v * v;
    }
  }
  const float part = subgroupAdd((ss.x + ss.y) + (ss.z + ss.w));
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < NWG / gl_SubgroupSize; ++i) total += red[i];
  return rms_inv(total, K, eps);
}

// The prologue: the stage's int8 row into qxs and xsum, its scale and zero point. A norm stage
// normalizes the row in shared memory (row_inv), so its normalized row, and then every code, is
// rms_norm_quant's; a post-norm stage first normalizes its input as rms_norm stores it and adds
// the residual as rms_norm_add stores the sum, then normalizes the sum. The minimum, the maximum
// and the block sums are exact in any order.
void prologue(uint st, out float sx, out int zp) {
  const uint tid = gl_LocalInvocationID.x, K = T(st, 0u), fl = T(st, 5u), nch = K / 8u;
  const uint pro = T(st, 2u);
  const bool post = POST == 1u && pro == 2u, norm = pro == 1u || post, x16 = (fl & 1u) != 0u,
             h16 = (fl & 2u) != 0u;
  const uint NSP = PWG / gl_SubgroupSize;
  const uvec2 xa = A(st, 8u);
  // Every load of the row at once (a norm's weights are in normw and postw already); a post-norm
  // stage's residual in chunks NCHN.. (a normalized row of at most MAXNORMK values leaves them
  // free).
  Chunk ck[NCH];
  [[unroll]] for (uint i = 0; i < NCH; ++i) {
    ck[i].a = uvec4(0u);
    ck[i].b = uvec4(0u);
    if (tid + PWG * i < nch) ck[i] = load_chunk(xa, x16, tid + PWG * i);
    if (post && i >= NCHN && tid + PWG * (i - NCHN) < nch)
      ck[i] = load_chunk(A(st, 12u), (fl & 8u) != 0u, tid + PWG * (i - NCHN));
  }
  float lo = 0.0, hi = 0.0;
  [[unroll]] for (uint i = 0; i < NCH; ++i) {
    const uint c = tid + PWG * i;
    if (c < nch)
      [[unroll]] for (uint e = 0; e < 8u; ++e) {
        const float v = chunk_at(ck[i], x16, e);
        if (norm && i < NCHN) xs_set(8u * c + e, v);
        lo = min(lo, v);
        hi = max(hi, v);
      }
  }
  if (post) {  // the post-norm and the residual add: the sum in xv (and stored by workgroup 0)
    const float inv = row_inv(K, uintBitsToFloat(T(st, 46u)));
    const bool n16 = (fl & 512u) != 0u, s16 = (fl & 1024u) != 0u, r16 = (fl & 8u) != 0u,
               keep = flat_group() == 0u;
    const uvec2 sa = A(st, 54u);
    [[unroll]] for (uint i = 0; i < NCHN; ++i) {
      const uint c = tid + PWG * i;
      if (c < nch)
        [[unroll]] for (uint e = 0; e < 8u; ++e) {
          precise float t = chunk_at(postw[i], false, e) * (xs_get(8u * c + e) * inv);
          precise float a = chunk_at(ck[NCHN + i], r16, e) + round_to(n16, t);
          const float sum = round_to(s16, a);
          xs_set(8u * c + e, sum);  // (this thread's own values, as below)
          if (keep) act_store(sa, s16, 8u * c + e, sum);
        }
    }
  }
  if (norm) {  // (the host keeps a normalized row within MAXNORMK)
    const float inv = row_inv(K, uintBitsToFloat(T(st, 6u)));
    lo = 0.0;
    hi = 0.0;
    [[unroll]] for (uint i = 0; i < NCHN; ++i) {
      const uint c = tid + PWG * i;
      if (c < nch)
        [[unroll]] for (uint e = 0; e < 8u; ++e) {
          const float v = round_to(h16, chunk_at(normw[i], false, e) * (xs_get(8u * c + e) * inv));
          xs_set(8u * c + e, v);  // (this thread's own values: no other thread reads them before
          lo = min(lo, v);     // the barrier below)
          hi = max(hi, v);
        }
    }
  }
  if (Q4W == 1u && (fl & 128u) != 0u) {  // a q4w stage: the float row (a norm's is in xv), no codes
    if (!norm)
      [[unroll]] for (uint i = 0; i < NCH; ++i) {
        const uint c = tid + PWG * i, at = 2u * c + (c >> 2u);  // (a chunk lies in one block)
        if (c < nch) {
          xv[at] = vec4(chunk_at(ck[i], x16, 0u), chunk_at(ck[i], x16, 1u), chunk_at(ck[i], x16, 2u),
                        chunk_at(ck[i], x16, 3u));
          xv[at + 1u] = vec4(chunk_at(ck[i], x16, 4u), chunk_at(ck[i], x16, 5u),
                             chunk_at(ck[i], x16, 6u), chunk_at(ck[i], x16, 7u));
        }
      }
    barrier();
    sx = 1.0;
    zp = 0;
    return;
  }
  lo = subgroupMin(lo);
  hi = subgroupMax(hi);
  if (subgroupElect()) {
    red_lo[gl_SubgroupID] = lo;
    red_hi[gl_SubgroupID] = hi;
  }
  barrier();
  for (uint i = 0; i < NSP; ++i) {
    lo = min(lo, red_lo[i]);
    hi = max(hi, red_hi[i]);
  }
  CLK(2u);
  float rcp;
  quant_scale_zp_rcp(lo, hi, sx, zp, rcp);  // quant.glsl's formula
  CLK(3u);
  // Word pair c from this thread's chunk c (a norm stage's from the normalized row), and each
  // block's code sum from its four pairs' (four neighbouring lanes: PWG and the subgroup are
  // multiples of four).
  [[unroll]] for (uint i = 0; i < NCH; ++i) {
    const uint c = tid + PWG * i;
    uint ev = 0u, od = 0u;
    if (c < nch) {
      float v[8];
      [[unroll]] for (uint t = 0; t < 8u; ++t)
        v[t] = norm ? xs_get((8u * c + t) % MAXNORMK) : chunk_at(ck[i], x16, t);
      quant_pair(v, sx, rcp, zp, ev, od);
    }
    int sum = dot4(int(ev), 0x01010101, dot4(int(od), 0x01010101, 0));
    sum += subgroupShuffleXor(sum, 1u);
    sum += subgroupShuffleXor(sum, 2u);
    if (c < nch) {
      store_pair(c, ev, od);
      if ((c & 3u) == 0u) xsum[c >> 2] = sum;
    }
  }
  barrier();
}

// The stage's rows: the next batch is fetched, then a batch of DEPTH units summed (PIPE; without
// it the batch is summed, then the next fetched), f: the next unit to fetch, the first batch's
// loads already issued; the sums of a batch wait for its loads only. (Refilling each unit's slot as soon as it was summed made the next unit's sum wait for that
// refill too: NVIDIA's compiler waits for a warp's loads in groups, and the row loop paid a DRAM
// latency per unit; measured.)
void rows(Stage g, uint r0, uint step, float sx, int zp, inout Cur f) {
  float acc0 = 0.0, acc1 = 0.0;
  Cur u = start(g, r0);  // the next unit to sum
  if (PIPE == 1u) {  // the batches alternate between the two sets
    while (u.m != NONE) {
      fetch_batch2(g, r0, step, f);
      sum_batch(g, 0u, r0, step, sx, zp, u, acc0, acc1);
      if (u.m == NONE) break;
      fetch_batch(g, r0, step, f);
      sum_batch(g, 1u, r0, step, sx, zp, u, acc0, acc1);
    }
    return;
  }
  while (u.m != NONE) {
    sum_batch(g, 0u, r0, step, sx, zp, u, acc0, acc1);
    fetch_batch(g, r0, step, f);
  }
}

// The row loop compiled once for each epilogue and dot (SPECIALIZE): the stage's per, epi and fd
// as constants in each copy, so that each carries only its own epilogue and dot.
void rows_specialized(Stage g, bool fd, uint r0, uint step, float sx, int zp, inout Cur f) {
  Stage h = g;
  h.fd = fd;
  if (g.epi == 2u) {
    h.per = 2u;
    h.epi = 2u;
    rows(h, r0, step, sx, zp, f);
  } else if (POST == 1u && g.epi == 3u) {
    h.per = 2u;
    h.epi = 3u;
    rows(h, r0, step, sx, zp, f);
  } else if (g.epi == 1u) {
    h.per = 1u;
    h.epi = 1u;
    rows(h, r0, step, sx, zp, f);
  } else {
    h.per = 1u;
    h.epi = 0u;
    rows(h, r0, step, sx, zp, f);
  }
}

// The sync that ends stage st - 1 (none before stage 0), in two halves with SPLIT_SYNC: sync_arrive
// once this workgroup's rows of stage st - 1 are written, sync_wait before stage st reads what
// the grid wrote (without SPLIT_SYNC sync_arrive does nothing and sync_wait the whole sync).
void sync_arrive(uint st) {
  if (SPLIT_SYNC == 1u && st > 0u) grid_arrive();
}
void sync_wait(uint st) {
  if (st == 0u) return;
  if (SPLIT_SYNC == 1u)
    grid_wait(st - 1u);
  else
    grid_sync(st - 1u);
}

// An attention stage (record par): this workgroup's items, the first one's tile loads issued before
// the sync that ends the stage before (the caches' rows below the position were written by earlier
// dispatches; q, k and v are read after it).
void attention_stage(uint par, uint st) {
  att_par = par;
  const AttP p = AttP(SW(par, 32u), SW(par, 33u), SW(par, 34u), SW(par, 35u), SW(par, 36u),
                      SW(par, 37u), SW(par, 38u), uintBitsToFloat(SW(par, 39u)),
                      uintBitsToFloat(SW(par, 40u)), uintBitsToFloat(SW(par, 41u)), SW(par, 42u),
                      SW(par, 43u));
  const uint pos = KNRef(AW(24u)).v[0], c0 = att_c0(p, pos), wg = flat_group();
  const uint items = p.H * (pos / p.C + 1u - c0);
  if (wg < items) att_item_fetch(p, wg % p.H, c0 + wg / p.H, pos);
  CLK(0u);
  sync_wait(st);
  CLK(1u);
  CLK(2u);
  CLK(3u);
  CLK(4u);
  for (uint i = wg; i < items; i += grid_groups())
    att_item(p, i % p.H, c0 + i / p.H, pos, i == wg);
  CLK(5u);
}

void main() {
  const uint NS = gl_NumSubgroups, step = grid_groups() * NS;
  const uint r0 = DEAL == 1u ? gl_SubgroupID * grid_groups() + flat_group()
                             : flat_group() * NS + gl_SubgroupID;
#ifdef VKLLM_CLOCK
  clk_t = clock2x32ARB();
#endif
  const uint tid = gl_LocalInvocationID.x;
  uint rec = tid < SREC && pc.stages > 0u ? T(0u, tid) : 0u;
  for (uint st = 0; st < pc.stages; ++st) {
#ifdef VKLLM_CLOCK
    clk_st = st;
#endif
    sync_arrive(st);
    // The stage's first units are fetched before the sync that ends the stage before it.
    const Stage g = stage(st, r0, step, rec);
    // The next stage's record, loaded now so that its latency passes in this stage.
    rec = tid < SREC && st + 1u < pc.stages ? T(st + 1u, tid) : 0u;
    if (ATT_HD > 0u && SW(g.par, 2u) == 3u) {
      attention_stage(g.par, st);
#ifdef VKLLM_CLOCK
      barrier();
#endif
      CLK(6u);
      continue;
    }
    Cur f = start(g, r0);  // the next unit to fetch
    fetch_batch(g, r0, step, f);
    norm_weight(g);
    CLK(0u);
    sync_wait(st);
    CLK(1u);
    float sx;
    int zp;
    prologue(st, sx, zp);
    CLK(4u);
    if (SPECIALIZE == 0u)
      rows(g, r0, step, sx, zp, f);
    else if (Q4W == 1u && g.fd)  // (fd a constant in each copy, as per and epi)
      rows_specialized(g, true, r0, step, sx, zp, f);
    else
      rows_specialized(g, false, r0, step, sx, zp, f);
    CLK(5u);
#ifdef VKLLM_CLOCK
    barrier();
#endif
    CLK(6u);
  }
#ifdef VKLLM_CLOCK
  clk_flush();
#endif
  grid_exit();
}
