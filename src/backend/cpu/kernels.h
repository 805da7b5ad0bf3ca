// CPU reference kernels: scalar, obvious, the oracle every other backend is compared against.
// One function per op family of docs/ir.md. All accumulation in fp32 (double where noted).
#pragma once
#include <cstdint>

namespace vkllm::cpu {

// Int4 nibble access (DType::Q4): row-major [rows, cols], rows padded to whole bytes.
inline int q4_get(const uint8_t* data, int64_t cols, int64_t r, int64_t c) {
  const uint8_t b = data[r * ((cols + 1) / 2) + c / 2];
  return static_cast<int>((c & 1) ? (b >> 4) : (b & 15)) - 8;
}

void embedding_f32(const int32_t* ids, int T, const float* table, int64_t V, int64_t D, float* y);
void embedding_f16(const int32_t* ids, int T, const uint16_t* table, int64_t V, int64_t D,
                   float* y);
void embedding_q4(const int32_t* ids, int T, const uint8_t* q, const float* scales, int64_t V,
                  int64_t D, int64_t group, float* y);

// y = x / sqrt(mean(x^2) + eps) * w over each group of `group` elements of each row.
void rms_norm(const float* x, int T, int64_t N, const float* w, int64_t group, float eps, float* y);

// y[T,N] = x[T,K] W[N,K]^T
void linear_f32(const float* x, int T, int64_t K, const float* W, int64_t N, float* y);
void linear_f16(const float* x, int T, int64_t K, const uint16_t* W, int64_t N, float* y);
void linear_q4w(const float* x, int T, int64_t K, const uint8_t* Wq, const float* scales, int64_t N,
                int64_t group, float* y);

// Per-token asymmetric int8 quantization (docs/design.md section 2).
void quantize_act_int8(const float* x, int64_t K, int8_t* q, float* scale, int32_t* zero_point);
void linear_8da4w(const float* x, int T, int64_t K, const uint8_t* Wq, const float* scales,
                  const int32_t* wsum, int64_t N, int64_t group, float* y);

// Rotate-half RoPE on the first rotary_dim dims of each head, positions pos..pos+T-1.
void rope(const float* x, int T, int H, int head_dim, int rotary_dim, const float* inv_freq,
          int pos, float attention_factor, float* y);

// The same with row t at its own position pos[t].
void rope_rows(const float* x, int T, int H, int head_dim, int rotary_dim, const float* inv_freq,
               const int32_t* pos, float attention_factor, float* y);

// Writes k, v rows into the caches at pos..pos+T-1 (rounded through fp16 when f16_cache), then
// causal grouped-query attention over positions 0..pos+t (window W > 0: the last W of them).
// ring > 0: the caches hold `ring` rows, position j at row j % ring (a sliding-window layer's
// ring, which must hold W + T - 1 rows; docs/ir.md "KV caches").
void attention(const float* q, const float* k, const float* v, int T, int pos, float* kcache,
               float* vcache, bool f16_cache, int H, int Hkv, int head_dim, float scale, float* o,
               int window = 0, int64_t ring = 0);

// Where the KV of each row lives in a paged cache (docs/ir.md "Batched forward"): row t is
// position pos[t] of sequence seq[t]; position p of sequence s is cache row
// table[s * stride + p / block_tokens] * block_tokens + p % block_tokens; or, with ring > 0 (one
// sequence's caches of `ring` rows: docs/ir.md "KV caches"), row p % ring.
struct KvRows {
  const int32_t* pos;
  const int32_t* seq;
  const int32_t* table;
  int stride, block_tokens;
  int64_t ring;
  int64_t row(int s, int p) const {
    if (ring > 0) return p % ring;
    return static_cast<int64_t>(table[static_cast<int64_t>(s) * stride + p / block_tokens]) *
               block_tokens +
           p % block_tokens;
  }
};
// attention over a paged cache: every row's k, v written first, then row t attends to positions
// 0..pos[t] of its sequence (window W > 0: max(0, pos[t]-W+1)..pos[t]).
void attention_rows(const float* q, const float* k, const float* v, int T, const KvRows& kv,
                    float* kcache, float* vcache, bool f16_cache, int H, int Hkv, int head_dim,
                    float scale, float* o, int window = 0);

void swiglu(const float* gate, const float* up, int64_t n, float* y);
// y = gelu_tanh(gate) * up (PyTorch's gelu(approximate="tanh"), in fp32).
void geglu(const float* gate, const float* up, int64_t n, float* y);
void scale(const float* x, int64_t n, float s, float* y);
void add(const float* a, const float* b, int64_t n, float* y);
// y[t, j] = x[t, j] + b[j] for T rows of width N.
void bias_add(const float* x, int T, int64_t N, const float* b, float* y);
int32_t argmax(const float* x, int64_t n);

}  // namespace vkllm::cpu
