#version 450
// The decode step's fused attention (one token): workgroup g takes head h = g / S and the keys of
// split c = g % S, as attention.comp does, and folds in what the unfused program runs before and
// after it:
//  - QKNORM: the per-head RMS norm of q and of the new key (Qwen3's q_norm / k_norm), summed in
//    rms_norm.comp's order (subgroup blocks of consecutive dims, blocks in order);
//  - ROPE: rope.comp's rotation of q and the new key at the step's position (same table);
//  - the KV store: the new key and value rows (rounded to the cache dtype) are used from
//    registers by every workgroup and written to the caches by one (split c of the position,
//    first query head of the kv head), so no workgroup reads a cache row written in this dispatch;
//  - the split merge: each non-empty split writes its partial, and the last to finish (a counter
//    per head) merges them in attention.comp's combine order and resets the counter;
//  - OQUANT (when the output's readers are linear_8da4w ops): the last head to be merged (one more
//    counter, after the heads') quantizes the whole output row for them, as linear_8da4w_quant.
// Every intermediate is rounded to the dtype the unfused program stores it in, so the output is
// bit-identical with the unfused ops on the same device.
#extension GL_KHR_shader_subgroup_arithmetic : require
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
DECL_FBUF(0, q, readonly)
DECL_FBUF(1, k, readonly)
DECL_FBUF(2, v, readonly)
DECL_FBUF(3, kc, writeonly)  // written by one workgroup (row pos), never read here at row pos
DECL_FBUF(4, kcr, readonly)  // the same caches, read at rows < pos
DECL_FBUF(5, vc, writeonly)
DECL_FBUF(6, vcr, readonly)
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
} pc;
#define QUANT_ROW_BINDING 14
#include "quant.glsl"
float row_value(uint r, uint j) { return LOADF(o, Y16, j); }
shared float qs[256], ks[256], vs[256], tmp[256];  // head_dim <= 256
shared float red[WG];  // one entry per subgroup
shared float ps[WG];
shared float ss[WG];  // the tile's scores
shared uint last_split;

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
  const uint row = pc.H * pc.hd;
  float lo = 0.0, hi = 0.0;
  for (uint j = tid; j < row; j += WG) {
    const float v = row_value(0u, j);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  quantize_row(0u, row, lo, hi);
  if (tid == 0u) counter[pc.H] = 0u;
}

float round_to(bool f16, float x) {
#ifdef VKLLM_F16
  if (f16) return float(float16_t(x));
#endif
  return x;
}

float wg_max(float v) {
  const float s = subgroupMax(v);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  float r = red[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) r = max(r, red[i]);
  barrier();
  return r;
}
float wg_sum(float v) {
  const float s = subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  float r = red[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) r += red[i];
  barrier();
  return r;
}

// One head row (hd values in tmp) normed and rotated as the unfused ops store it, into dst.
// Every thread calls it.
void prepare_row(bool is_q, uint pos) {
  const uint tid = gl_LocalInvocationID.x, hd = pc.hd;
  if (QKNORM) {
    // rms_norm.comp's sum for a group narrower than its workgroup: subgroup sums of consecutive
    // elements, added block by block in order.
    float total = 0.0;
    for (uint b0 = 0; b0 < hd; b0 += WG) {
      const uint j = b0 + tid;
      const float x = j < hd ? tmp[j] : 0.0;
      const float s = subgroupAdd(x * x);
      if (subgroupElect()) red[gl_SubgroupID] = s;
      barrier();
      for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
      barrier();
    }
    const float inv = 1.0 / sqrt(total / float(hd) + (is_q ? pc.qeps : pc.keps));
    for (uint j = tid; j < hd; j += WG) {
      const float w = is_q ? qn[j] : kn[j];
      tmp[j] = round_to(N16, w * (tmp[j] * inv));
    }
    barrier();
  }
  const uint half_r = pc.R / 2u;
  for (uint j = tid; j < hd; j += WG) {
    float y = tmp[j];
    if (ROPE && j < pc.R) {
      const uint row0 = pos + 1u > pc.orig ? pc.ctx : 0u;
      const uint i = j < half_r ? j : j - half_r;
      const vec2 c = cs[(row0 + pos) * half_r + i];
      const float a = tmp[i], b = tmp[i + half_r];
      y = round_to(R16, j < half_r ? a * c.x - b * c.y : b * c.x + a * c.y);
    }
    if (is_q)
      qs[j] = y;
    else
      ks[j] = round_to(C16, y);  // as the cache stores it
  }
  barrier();
}

void main() {
  const uint g = flat_group(), tid = gl_LocalInvocationID.x;
  const uint h = g / pc.S, c = g % pc.S, pos = step_pos;
  if (h >= pc.H || c * pc.C > pos) return;  // uniform per workgroup; empty splits do nothing
  const uint group = pc.H / pc.Hkv, kvh = h / group, W = pc.Hkv * pc.hd, koff = kvh * pc.hd;
  // q, then the new key; the new value as the cache stores it.
  for (uint i = tid; i < pc.hd; i += WG) tmp[i] = LOADF(q, A16, h * pc.hd + i);
  barrier();
  prepare_row(true, pos);
  for (uint i = tid; i < pc.hd; i += WG) tmp[i] = LOADF(k, A16, koff + i);
  barrier();
  prepare_row(false, pos);
  for (uint i = tid; i < pc.hd; i += WG) vs[i] = round_to(C16, LOADF(v, A16, koff + i));
  barrier();
  if (c == pos / pc.C && h % group == 0u)
    for (uint i = tid; i < pc.hd; i += WG) {
      STOREF(kc, C16, pos * W + koff + i, ks[i]);
      STOREF(vc, C16, pos * W + koff + i, vs[i]);
    }
  const uint n = min(pos + 1u, (c + 1u) * pc.C);
  float m = -3.0e38, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint base = c * pc.C; base < n; base += WG) {
    // Scores as attention.comp computes them (a subgroup a key, lanes across the head dims), the
    // tile's keys spread over 256 threads' subgroups: a short chain of loads per subgroup.
    ss[tid] = -3.0e38;
    barrier();
    const uint cnt_keys = min(uint(WG), n - base);
    for (uint jj = gl_SubgroupID; jj < cnt_keys; jj += 2u * gl_NumSubgroups) {
      const uint j0 = base + jj, j1 = j0 + gl_NumSubgroups;
      float p0 = 0.0, p1 = 0.0;
      for (uint i = gl_SubgroupInvocationID; i < pc.hd; i += gl_SubgroupSize) {
        if (j0 < n) p0 += qs[i] * (j0 == pos ? ks[i] : LOADF(kcr, C16, j0 * W + koff + i));
        if (j1 < n && jj + gl_NumSubgroups < WG)
          p1 += qs[i] * (j1 == pos ? ks[i] : LOADF(kcr, C16, j1 * W + koff + i));
      }
      const float d0 = subgroupAdd(p0), d1 = subgroupAdd(p1);
      if (subgroupElect()) {
        ss[jj] = j0 < n ? d0 * pc.scale : -3.0e38;
        if (jj + gl_NumSubgroups < WG) ss[jj + gl_NumSubgroups] = j1 < n ? d1 * pc.scale : -3.0e38;
      }
    }
    barrier();
    const uint j = base + tid;
    const float sc = ss[tid];
    const float mn = max(m, wg_max(sc));
    const float p = j < n ? exp(sc - mn) : 0.0;
    ps[tid] = p;
    const float corr = exp(m - mn);
    l = l * corr + wg_sum(p);
    const uint cnt = min(uint(WG), n - base);
    [[unroll]] for (uint r = 0; r < 4u; ++r) {
      const uint i = tid + r * WG;
      if (i < pc.hd) {
        vec4 a4 = vec4(acc[r] * corr, 0.0, 0.0, 0.0);
        const uint vb = base * W + koff + i;
#define VAL(JJ) (base + (JJ) == pos ? vs[i] : LOADF(vcr, C16, vb + (JJ) * W))
        uint jj = 0;
        for (; jj + 4u <= cnt; jj += 4u)
          a4 += vec4(ps[jj], ps[jj + 1u], ps[jj + 2u], ps[jj + 3u]) *
                vec4(VAL(jj), VAL(jj + 1u), VAL(jj + 2u), VAL(jj + 3u));
        float a = (a4.x + a4.y) + (a4.z + a4.w);
        for (; jj < cnt; ++jj) a += ps[jj] * VAL(jj);
#undef VAL
        acc[r] = a;
      }
    }
    m = mn;
    barrier();
  }
  if (pc.S == 1u) {
    [[unroll]] for (uint r = 0; r < 4u; ++r) {
      const uint i = tid + r * WG;
      if (i < pc.hd) STOREF(o, Y16, h * pc.hd + i, acc[r] / l);
    }
    quant_tail();
    return;
  }
  const uint stride = pc.hd + 2u, at = g * stride;
  if (tid == 0u) {
    part[at] = m;
    part[at + 1u] = l;
  }
  [[unroll]] for (uint r = 0; r < 4u; ++r) {
    const uint i = tid + r * WG;
    if (i < pc.hd) part[at + 2u + i] = acc[r];
  }
  // The last split of the head to finish merges (splits past the position stay out).
  const uint splits = pos / pc.C + 1u;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_split = atomicAdd(counter[h], 1u) == splits - 1u ? 1u : 0u;
  barrier();
  if (last_split == 0u) return;
  memoryBarrierBuffer();
  // attention.comp's combine over the head's splits: every partial's (m, l) loaded at once into
  // shared memory, then the weights exp(m_s - max), then each dim's sum in split order.
  const uint hb = h * pc.S * stride;
  for (uint s = tid; s < splits; s += WG) {
    ps[s] = part[hb + s * stride];
    ss[s] = part[hb + s * stride + 1u];
  }
  barrier();
  float mm = -3.0e38;
  for (uint s = 0; s < splits; ++s) mm = max(mm, ps[s]);
  float ll = 0.0;
  for (uint s = 0; s < splits; ++s) ll += ss[s] * exp(ps[s] - mm);
  barrier();
  for (uint s = tid; s < splits; s += WG) ps[s] = exp(ps[s] - mm);
  barrier();
  for (uint i = tid; i < pc.hd; i += WG) {
    float a = 0.0;
    for (uint s = 0; s < splits; ++s) a += part[hb + s * stride + 2u + i] * ps[s];
    STOREF(o, Y16, h * pc.hd + i, a / ll);
  }
  if (tid == 0u) counter[h] = 0u;
  quant_tail();
}
