#include "backend/cpu/kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/half.h"

namespace vkllm::cpu {

static void check_id(int32_t id, int64_t V) {
  if (id < 0 || id >= V) fail("token id {} is out of range (vocabulary has {} rows)", id, V);
}

void embedding_f32(const int32_t* ids, int T, const float* table, int64_t V, int64_t D, float* y) {
  for (int t = 0; t < T; ++t) {
    check_id(ids[t], V);
    std::copy(table + ids[t] * D, table + (ids[t] + 1) * D, y + t * D);
  }
}

void embedding_f16(const int32_t* ids, int T, const uint16_t* table, int64_t V, int64_t D,
                   float* y) {
  for (int t = 0; t < T; ++t) {
    check_id(ids[t], V);
    for (int64_t j = 0; j < D; ++j) y[t * D + j] = f16_to_f32(table[ids[t] * D + j]);
  }
}

void embedding_q4(const int32_t* ids, int T, const uint8_t* q, const float* scales, int64_t V,
                  int64_t D, int64_t group, float* y) {
  const int64_t ng = D / group;
  for (int t = 0; t < T; ++t) {
    check_id(ids[t], V);
    for (int64_t j = 0; j < D; ++j)
      y[t * D + j] = static_cast<float>(q4_get(q, D, ids[t], j)) * scales[ids[t] * ng + j / group];
  }
}

void rms_norm(const float* x, int T, int64_t N, const float* w, int64_t group, float eps,
              float* y) {
  for (int64_t r = 0; r < T * (N / group); ++r) {
    const float* xr = x + r * group;
    float* yr = y + r * group;
    float ss = 0;
    for (int64_t j = 0; j < group; ++j) ss += xr[j] * xr[j];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(group) + eps);
    for (int64_t j = 0; j < group; ++j) yr[j] = w[j] * (xr[j] * inv);
  }
}

void linear_f32(const float* x, int T, int64_t K, const float* W, int64_t N, float* y) {
  for (int t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x + t * K;
      const float* wr = W + n * K;
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
      y[t * N + n] = acc;
    }
}

void linear_f16(const float* x, int T, int64_t K, const uint16_t* W, int64_t N, float* y) {
  std::vector<float> wr(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) wr[k] = f16_to_f32(W[n * K + k]);
    for (int t = 0; t < T; ++t) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += x[t * K + k] * wr[k];
      y[t * N + n] = acc;
    }
  }
}

void linear_q4w(const float* x, int T, int64_t K, const uint8_t* Wq, const float* scales, int64_t N,
                int64_t group, float* y) {
  const int64_t ng = K / group;
  for (int t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t g = 0; g < ng; ++g) {
        float part = 0;
        for (int64_t k = g * group; k < (g + 1) * group; ++k)
          part += x[t * K + k] * static_cast<float>(q4_get(Wq, K, n, k));
        acc += part * scales[n * ng + g];
      }
      y[t * N + n] = acc;
    }
}

void quantize_act_int8(const float* x, int64_t K, int8_t* q, float* scale, int32_t* zero_point) {
  float lo = 0, hi = 0;
  for (int64_t k = 0; k < K; ++k) {
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  float s = (hi - lo) / 255.0f;
  s = std::max(s, FLT_EPSILON);  // torchao clamps the scale to eps (an all-zero row)
  // NaN (activations of a damaged model) must not reach the float -> int casts, which would be
  // undefined behaviour: it quantizes to 0. Finite values are unaffected.
  const auto to_int = [](float v) { return std::isnan(v) ? 0.0f : std::clamp(v, -128.0f, 127.0f); };
  int32_t zp = static_cast<int32_t>(to_int(-128.0f - std::nearbyint(lo / s)));
  for (int64_t k = 0; k < K; ++k)
    q[k] = static_cast<int8_t>(to_int(std::nearbyint(x[k] / s) + static_cast<float>(zp)));
  *scale = s;
  *zero_point = zp;
}

void linear_8da4w(const float* x, int T, int64_t K, const uint8_t* Wq, const float* scales,
                  const int32_t* wsum, int64_t N, int64_t group, float* y) {
  const int64_t ng = K / group;
  std::vector<int8_t> qx(static_cast<size_t>(K));
  for (int t = 0; t < T; ++t) {
    float sx;
    int32_t zp;
    quantize_act_int8(x + t * K, K, qx.data(), &sx, &zp);
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t g = 0; g < ng; ++g) {
        // 64-bit: the sums come from the file; any value must give a defined (if useless)
        // result. Valid artifacts never leave the int32 range, so results are unchanged.
        int64_t dot = 0;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) dot += qx[k] * q4_get(Wq, K, n, k);
        // The token's scale once at the end (the tiled GEMMs' order; no fused multiply-add,
        // which Vulkan does not require to be fused).
        const float term =
            scales[n * ng + g] * static_cast<float>(dot - int64_t{zp} * wsum[n * ng + g]);
        acc += term;
      }
      y[t * N + n] = acc * sx;
    }
  }
}

void rope_rows(const float* x, int T, int H, int head_dim, int rotary_dim, const float* inv_freq,
               const int32_t* pos, float attention_factor, float* y) {
  const int half = rotary_dim / 2;
  for (int t = 0; t < T; ++t) {
    const float p = static_cast<float>(pos[t]);
    for (int h = 0; h < H; ++h) {
      const float* xh = x + (static_cast<int64_t>(t) * H + h) * head_dim;
      float* yh = y + (static_cast<int64_t>(t) * H + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float ang = p * inv_freq[i];
        const float c = std::cos(ang) * attention_factor, s = std::sin(ang) * attention_factor;
        const float a = xh[i], b = xh[i + half];
        yh[i] = a * c - b * s;
        yh[i + half] = b * c + a * s;
      }
      for (int i = rotary_dim; i < head_dim; ++i) yh[i] = xh[i];
    }
  }
}

void rope(const float* x, int T, int H, int head_dim, int rotary_dim, const float* inv_freq,
          int pos, float attention_factor, float* y) {
  std::vector<int32_t> p(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) p[static_cast<size_t>(t)] = pos + t;
  rope_rows(x, T, H, head_dim, rotary_dim, inv_freq, p.data(), attention_factor, y);
}

void attention_rows(const float* q, const float* k, const float* v, int T, const KvRows& kv,
                    float* kcache, float* vcache, bool f16_cache, int H, int Hkv, int head_dim,
                    float scale, float* o, int window) {
  const int64_t kvw = static_cast<int64_t>(Hkv) * head_dim;
  for (int t = 0; t < T; ++t) {
    const int64_t r = kv.row(kv.seq[t], kv.pos[t]) * kvw;
    for (int64_t j = 0; j < kvw; ++j) {
      float kx = k[t * kvw + j], vx = v[t * kvw + j];
      kcache[r + j] = f16_cache ? round_f16(kx) : kx;
      vcache[r + j] = f16_cache ? round_f16(vx) : vx;
    }
  }
  const int group = H / Hkv;
  std::vector<float> sc;
  std::vector<int64_t> rows;
  for (int t = 0; t < T; ++t) {
    // Positions lo..pos[t]: all of them, or the last `window`.
    const int lo = window > 0 ? std::max(0, kv.pos[t] - window + 1) : 0;
    const int n = kv.pos[t] + 1 - lo;
    sc.resize(static_cast<size_t>(n));
    rows.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) rows[static_cast<size_t>(j)] = kv.row(kv.seq[t], lo + j) * kvw;
    for (int h = 0; h < H; ++h) {
      const float* qh = q + (static_cast<int64_t>(t) * H + h) * head_dim;
      const int kvh = h / group;
      float mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const float* kr = kcache + rows[static_cast<size_t>(j)] + kvh * head_dim;
        float d = 0;
        for (int i = 0; i < head_dim; ++i) d += qh[i] * kr[i];
        sc[static_cast<size_t>(j)] = d * scale;
        mx = std::max(mx, sc[static_cast<size_t>(j)]);
      }
      float sum = 0;
      for (int j = 0; j < n; ++j) {
        sc[static_cast<size_t>(j)] = std::exp(sc[static_cast<size_t>(j)] - mx);
        sum += sc[static_cast<size_t>(j)];
      }
      float* oh = o + (static_cast<int64_t>(t) * H + h) * head_dim;
      for (int i = 0; i < head_dim; ++i) oh[i] = 0;
      for (int j = 0; j < n; ++j) {
        const float* vr = vcache + rows[static_cast<size_t>(j)] + kvh * head_dim;
        const float p = sc[static_cast<size_t>(j)] / sum;
        for (int i = 0; i < head_dim; ++i) oh[i] += p * vr[i];
      }
    }
  }
}

void attention(const float* q, const float* k, const float* v, int T, int pos, float* kcache,
               float* vcache, bool f16_cache, int H, int Hkv, int head_dim, float scale, float* o,
               int window, int64_t ring) {
  std::vector<int32_t> p(static_cast<size_t>(T)), s(static_cast<size_t>(T), 0);
  for (int t = 0; t < T; ++t) p[static_cast<size_t>(t)] = pos + t;
  const int32_t block0 = 0;
  const KvRows kv{p.data(), s.data(), &block0, 1, pos + T, ring};
  attention_rows(q, k, v, T, kv, kcache, vcache, f16_cache, H, Hkv, head_dim, scale, o, window);
}

void swiglu(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void geglu(const float* gate, const float* up, int64_t n, float* y) {
  // PyTorch's GeluType::Tanh: kBeta = sqrt(2) * (2 / sqrt(pi)) * 0.5, kKappa = 0.044715.
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = beta * (x + kappa * (x * x * x));
    y[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}

void scale(const float* x, int64_t n, float s, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void bias_add(const float* x, int T, int64_t N, const float* b, float* y) {
  for (int t = 0; t < T; ++t)
    for (int64_t j = 0; j < N; ++j) y[t * N + j] = x[t * N + j] + b[j];
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace vkllm::cpu
