#version 450
// Causal grouped-query attention of a forward of several tokens (prefill) on NVIDIA cooperative
// matrices (VK_NV_cooperative_matrix, fp16 x fp16 -> fp32, 16 x 8 x 16 on 32-lane subgroups),
// flash-attention style, for fp16 q and caches: the result of attention_prefill.comp within the
// fp16 bound (docs/vulkan.md).
// - A workgroup takes BQ = 64 consecutive tokens of one query head, four subgroups of 16 rows.
//   Each subgroup keeps its 16 x HD block of q in registers (A fragments) and its 16 x HD output
//   accumulator (fp32) in registers for the whole walk over the keys.
// - The keys they see come in tiles of BK = 32: K and V rows staged once in shared memory for all
//   64 queries. The next tile's global loads are issued before this tile's work.
// - A tile's scores S = q K^T (16 x 32 a subgroup) go to shared memory; two lanes a row then do
//   the online softmax (running max m, sum l; the accumulator rescaled by exp(m_old - m_new)) and
//   write the weights as fp16, which the P V multiply-adds read back as A fragments. l sums the
//   weights as rounded to fp16, the values the multiply-adds use.
// - Which row and column each of a lane's four accumulator elements holds (the rescale, the
//   final division, the store) is read at the start from a matrix loaded with known values
//   (Context checks the four: vk_probe.cpp).
// Needs HD % 32 == 0 and HD <= 128. The KV store (attention.comp VKLLM_KV_STORE) has written this
// forward's keys before it runs.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define WG 128
#include "common.glsl"
layout(constant_id = 3) const bool Y16 = false;  // output
layout(constant_id = 8) const uint HD = 64;      // head dim (% 32 == 0, <= 128)
layout(std430, binding = 0) readonly buffer Q4 { uvec4 q4[]; };  // fp16 q, 8 a word
layout(std430, binding = 1) readonly buffer K4 { uvec4 k4[]; };  // fp16 key cache
layout(std430, binding = 2) readonly buffer V4 { uvec4 v4[]; };  // fp16 value cache
DECL_FBUF(3, o, writeonly)
DECL_STEP(4)
layout(push_constant) uniform PC { uint T, H, Hkv; float scale; } pc;

#define F16A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F16B fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define F32C fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>

const uint BQ = 64u, BK = 32u;         // query rows a workgroup, keys a tile
const uint NW = HD / 8u;               // 16-byte words of a row of HD halves
const uint RW = NW + 1u;               // a staged q/K/V row in words, one of padding
const uint SW = BK / 4u + 1u;          // a staged score row (fp32) in words
const uint PW = BK / 8u + 1u;          // a staged weight row (fp16) in words
const uint NL = (BK * NW + WG - 1u) / WG;  // a tile's K (and V) words a thread
shared uvec4 kv[2u * BK * RW];  // the K tile's rows, then the V tile's; first the q tile (BQ rows)
shared uvec4 ss[4u * 16u * SW];  // each subgroup's 16 x BK scores
shared uvec4 ps[4u * 16u * PW];  // each subgroup's 16 x BK weights
shared float rs[4u * 16u];       // per row: the tile's rescale factor, at the end l

uvec4 pk[NL], pv[NL];
void fetch(uint base, uint last, uint W8, uint ko8, uint tid) {
  [[unroll]] for (uint e = 0; e < NL; ++e) {
    const uint i = tid + e * WG, j = min(base + i / NW, last), at = j * W8 + ko8 + i % NW;
    if (i < BK * NW) {
      pk[e] = k4[at];
      pv[e] = v4[at];
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ;
  const uint kvh = h / (pc.H / pc.Hkv), W8 = pc.Hkv * NW, ko8 = kvh * NW;
  // The accumulator layout: a 16 x 8 matrix of the values 8 row + col.
  if (tid < 32u) ss[tid] = floatBitsToUint(vec4(4u * tid) + vec4(0.0, 1.0, 2.0, 3.0));
  barrier();
  uint row[4], col[4];
  {
    F32C probe;
    coopMatLoadNV(probe, ss, 0u, 2u, false);
    [[unroll]] for (uint e = 0; e < 4u; ++e) {
      const uint v = uint(probe[e]);
      row[e] = v / 8u;
      col[e] = v % 8u;
    }
  }
  // The q tile (rows past the last token read clamped, never stored).
  for (uint i = tid; i < BQ * NW; i += WG) {
    const uint r = i / NW, t = min(t0 + r, pc.T - 1u);
    kv[r * RW + i % NW] = q4[(t * pc.H + h) * NW + i % NW];
  }
  barrier();
  F16A qa[HD / 16u];
  [[unroll]] for (uint d = 0; d < HD / 16u; ++d)
    coopMatLoadNV(qa[d], kv, (16u * sg) * RW + 2u * d, RW, false);
  F32C oc[NW];
  [[unroll]] for (uint j = 0; j < NW; ++j) oc[j] = F32C(0.0);
  // Two lanes a row: row lr, keys 16 lh .. 16 lh + 15 of each tile.
  const uint lr = lane >> 1u, lh = lane & 1u, sr = 16u * sg + lr;
  const uint pos = step_pos + min(t0 + sr, pc.T - 1u);
  const uint last = step_pos + min(t0 + BQ, pc.T) - 1u;  // the block's last position
  const uint sg_last = step_pos + min(t0 + 16u * sg + 15u, pc.T - 1u);
  float m = -3.0e38, l = 0.0;
  fetch(0u, last, W8, ko8, tid);
  barrier();  // every subgroup's q fragments loaded before the first tile overwrites them
  for (uint base = 0; base <= last; base += BK) {
    [[unroll]] for (uint e = 0; e < NL; ++e) {
      const uint i = tid + e * WG;
      if (i < BK * NW) {
        kv[(i / NW) * RW + i % NW] = pk[e];
        kv[(BK + i / NW) * RW + i % NW] = pv[e];
      }
    }
    barrier();
    if (base + BK <= last) fetch(base + BK, last, W8, ko8, tid);  // in flight during this tile
    if (base <= sg_last) {  // (subgroup-uniform: a tile past all 16 rows adds nothing)
      F32C sc[BK / 8u];
      [[unroll]] for (uint j = 0; j < BK / 8u; ++j) sc[j] = F32C(0.0);
      [[unroll]] for (uint d = 0; d < HD / 16u; ++d)[[unroll]] for (uint j = 0; j < BK / 8u; ++j) {
        F16B kb;
        coopMatLoadNV(kb, kv, (8u * j) * RW + 2u * d, RW, true);
        sc[j] = coopMatMulAddNV(qa[d], kb, sc[j]);
      }
      [[unroll]] for (uint j = 0; j < BK / 8u; ++j)
        coopMatStoreNV(sc[j], ss, (16u * sg) * SW + 2u * j, SW, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      float s[16];
      float mx = m;
      [[unroll]] for (uint i = 0; i < 4u; ++i) {
        const vec4 w = uintBitsToFloat(ss[sr * SW + 4u * lh + i]);
        [[unroll]] for (uint c = 0; c < 4u; ++c) {
          const float x = w[c] * pc.scale;
          s[4u * i + c] = x;
          if (base + 16u * lh + 4u * i + c <= pos) mx = max(mx, x);
        }
      }
      mx = max(mx, subgroupShuffleXor(mx, 1u));
      const float corr = exp(m - mx);
      float ls = 0.0;
      uint pw[8];
      [[unroll]] for (uint i = 0; i < 8u; ++i) {
        const uint key = base + 16u * lh + 2u * i;
        const vec2 e = vec2(key <= pos ? exp(s[2u * i] - mx) : 0.0,
                            key + 1u <= pos ? exp(s[2u * i + 1u] - mx) : 0.0);
        pw[i] = packHalf2x16(e);
        const vec2 r = unpackHalf2x16(pw[i]);
        ls += r.x + r.y;
      }
      ls += subgroupShuffleXor(ls, 1u);
      l = l * corr + ls;
      m = mx;
      ps[sr * PW + 2u * lh] = uvec4(pw[0], pw[1], pw[2], pw[3]);
      ps[sr * PW + 2u * lh + 1u] = uvec4(pw[4], pw[5], pw[6], pw[7]);
      if (lh == 0u) rs[sr] = corr;
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      [[unroll]] for (uint e = 0; e < 4u; ++e) {
        const float f = rs[16u * sg + row[e]];
        [[unroll]] for (uint j = 0; j < NW; ++j) oc[j][e] *= f;
      }
      [[unroll]] for (uint kk = 0; kk < BK / 16u; ++kk) {
        F16A pa;
        coopMatLoadNV(pa, ps, (16u * sg) * PW + 2u * kk, PW, false);
        [[unroll]] for (uint j = 0; j < NW; ++j) {
          F16B vb;
          coopMatLoadNV(vb, kv, (BK + 16u * kk) * RW + j, RW, false);
          oc[j] = coopMatMulAddNV(pa, vb, oc[j]);
        }
      }
    }
    barrier();  // every read of this tile done before the next is staged
  }
  if (lh == 0u) rs[sr] = l;
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  [[unroll]] for (uint e = 0; e < 4u; ++e) {
    const uint t = t0 + 16u * sg + row[e];
    if (t >= pc.T) continue;
    const float lt = rs[16u * sg + row[e]];
    [[unroll]] for (uint j = 0; j < NW; ++j)
      STOREF(o, Y16, (t * pc.H + h) * HD + 8u * j + col[e], oc[j][e] / lt);
  }
}
