#version 450
// The decode step's fused attention (one token) in its own dispatch: workgroup g runs
// attention_decode.glsl's item (head h, split c), g = (c - c0) H + h (ORDER; c0 the first split
// with keys in a sliding window, 0 without one), which folds the q / k norms, rope, the KV store
// and the split merge into attention.comp's split attention; and with OQUANT (when the output's
// readers are linear_8da4w ops) the last head to be merged (one more counter, after the heads')
// quantizes the whole output row for them, as linear_8da4w_quant. Every intermediate is rounded
// to the dtype the unfused program stores it in, so the output is bit-identical with the unfused
// ops on the same device.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define WG 256
#include "common.glsl"
layout(constant_id = 1) const bool A16 = false;   // q, k, v activations (the run's inputs)
layout(constant_id = 2) const bool C16 = false;   // caches
layout(constant_id = 3) const bool Y16 = false;   // output
layout(constant_id = 4) const bool QKNORM = false;
layout(constant_id = 5) const bool ROPE = false;
layout(constant_id = 6) const bool N16 = false;   // the normed q / k, as stored
layout(constant_id = 7) const bool R16 = false;   // the rotated q / k, as stored
layout(constant_id = 8) const bool OQUANT = false;
layout(constant_id = 9) const uint HD = 64;  // head dim (% 8 == 0, <= 256)
// Measurement switches (VKLLM_ATT_MEASURE; results wrong except at 0): 1 the loads only (the
// split's tile, q, k, v, consumed into a made-up output), 2 no merge (each split writes its
// partial and split 0 its own output), 3 no norm or rope.
layout(constant_id = 10) const uint MEASURE = 0;
// Workgroup order (VKLLM_ATT_ORDER=0 measures the old one): 0 g = h S + c, 1 g = c H + h (every head's first splits,
// the ones a short context fills, are the first workgroups of the dispatch).
layout(constant_id = 11) const uint ORDER = 1;
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, k, readonly)
DECL_FBUF(2, v, readonly)
DECL_FBUF(3, kc, writeonly)  // written by one workgroup (row pos), never read here at row pos
// The same caches, read at rows < pos (attention_split.glsl's views).
layout(std430, binding = 4) readonly buffer KCW { uvec2 kcw[]; };
layout(std430, binding = 4) readonly buffer KCN { uint kcn[]; };
DECL_FBUF(5, vc, writeonly)
layout(std430, binding = 6) readonly buffer VCW { uvec2 vcw[]; };
layout(std430, binding = 6) readonly buffer VCN { uint vcn[]; };
DECL_FBUF(7, o, coherent)  // read back by the quantizing workgroup (OQUANT)
layout(std430, binding = 8) coherent buffer P { float part[]; };
layout(std430, binding = 9) coherent buffer CNT { uint counter[]; };
DECL_STEP(10)
layout(std430, binding = 11) readonly buffer CS { vec2 cs[]; };
layout(std430, binding = 12) readonly buffer QN { float qn[]; };
layout(std430, binding = 13) readonly buffer KN { float kn[]; };
layout(push_constant) uniform PC {
  uint H, Hkv, hd;
  float scale;
  uint S, C, R, orig, ctx;
  float qeps, keps;
  uint win;   // a sliding window's keys (0: none)
  uint rows;  // the caches' rows (a sliding layer's ring: position j at row j % rows)
} pc;
#define QUANT_ROW_BINDING 14
#include "quant.glsl"
float row_value(uint r, uint j) { return LOADF(o, Y16, j); }
shared float qs[HD], tmp[2u * HD];  // q as attended; the q and k rows before norm and rope
shared uint last_split;
#define ATT_MERGE
#include "attention_split.glsl"
#define ATT_Q(i) LOADF(q, A16, i)
#define ATT_K(i) LOADF(k, A16, i)
#define ATT_V(i) LOADF(v, A16, i)
#define ATT_CS(i) cs[i]
#define ATT_QN(j) qn[j]
#define ATT_KN(j) kn[j]
#define ATT_STORE_KC(i, x) STOREF(kc, C16, i, x)
#define ATT_STORE_VC(i, x) STOREF(vc, C16, i, x)
#define ATT_STORE_O(i, x) STOREF(o, Y16, i, x)
#define ATT_COUNT(h) atomicAdd(counter[h], 1u)
#define ATT_RESET(h) counter[h] = 0u
const uint ATT_MEASURE = MEASURE;
#include "attention_decode.glsl"

// OQUANT: called by each head's workgroup that wrote the head's output; the last of them quantizes
// the whole row for the linear_8da4w ops that read it (counter H, after the heads').
void quant_tail() {
  if (!OQUANT) return;
  const uint tid = gl_LocalInvocationID.x;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_split = atomicAdd(counter[pc.H], 1u) == pc.H - 1u ? 1u : 0u;
  barrier();
  if (last_split == 0u) return;
  memoryBarrierBuffer();
  const uint row = pc.H * HD;
  float lo = 0.0, hi = 0.0;
  for (uint j = tid; j < row; j += WG) {
    const float v = row_value(0u, j);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(0u, row, lo, hi);
  if (tid == 0u) counter[pc.H] = 0u;
}

void main() {
  const uint g = flat_group();
  const AttP p =
      AttP(pc.H, pc.Hkv, pc.S, pc.C, pc.R, pc.orig, pc.ctx, pc.scale, pc.qeps, pc.keps, pc.win,
           pc.rows);
  // (ORDER 1: the splits below a window have no workgroup; the last ones find no keys)
  const uint h = ORDER == 1u ? g % pc.H : g / pc.S,
             c = ORDER == 1u ? att_c0(p, step_pos) + g / pc.H : g % pc.S;
  if (att_item(p, h, c, step_pos, false)) quant_tail();
}
