// The GPU op case table's shared pieces (test_vk_table_*.cpp): each case is one small program of
// one op family (or one fusion pattern against its unfused ops) at one shape, dtype, recipe, token
// count and tuning, run by OpRun (vk_harness.h) and checked against the CPU reference kernels
// (backend/cpu/kernels.h) with the bound of tests/testutil/op_tolerance.h (docs/gates.md,
// "Per-op bounds"), exactly where the code promises exact results. Each case is its own gtest
// (INSTANTIATE_TEST_SUITE_P, named after its parameters). Perf mode (VKLLM_OP_PERF, op_perf_reps)
// times each case's forward after its checks and prints one line; it never asserts on time.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "testutil/op_tolerance.h"
#include "vk_harness.h"

namespace vkllm::test::table {

using TK = TensorKind;

constexpr double kElem = testutil::kElemNmse;       // fp32 elementwise (and exact gathers)
constexpr double kNorm = testutil::kNormNmse;       // rms_norm
constexpr double kMat = testutil::kLinearNmse;      // linear
constexpr double kAttn = testutil::kAttentionNmse;  // attention
constexpr double kF16Out = testutil::kF16OutNmse;   // any op whose output is stored as fp16

// The bound of an op kind's fp32 output, or kF16Out where the output is stored as fp16.
inline double bound_for(double f32_bound, DType out) {
  return out == DType::F16 ? kF16Out : f32_bound;
}

// Prints a checked NMSE with its bound ("[nmse] <case> <value> <bound>": the measurements of
// docs/gates.md, "Per-op bounds") and returns it.
double logged(double e, double bound);

// The activations' or weights' bytes in `dt` (F16: rounded to nearest even).
std::vector<uint8_t> enc(DType dt, const std::vector<float>& v);
// Token ids in [0, V): the first 0, the second V - 1 (both ends of the table), the rest random.
std::vector<int32_t> rand_ids(std::mt19937& rng, int T, int64_t V);
// rows x cols int4 codes, two a byte, every nibble random.
std::vector<uint8_t> rand_q4(std::mt19937& rng, int64_t rows, int64_t cols);
// Per-group sums of the int4 codes (linear_8da4w's weight sums).
std::vector<int32_t> q4_group_sums(const std::vector<uint8_t>& q, int64_t N, int64_t K, int64_t G);

// A gtest-safe case name: every character other than [A-Za-z0-9] becomes '_'.
std::string case_name(const std::string& s);

// Perf mode: after a case's checks, times `r`'s forward of T tokens at `pos` (OpRun::time_us)
// and prints "[perf] <case> <us> us <GB/s> GB/s <TOPS> TOPS": bytes are those of every tensor the
// case's ops read or write (activations T rows, KV caches pos + T rows, weights whole); `ops` the
// arithmetic operations of one forward (0: the TOPS column is "-"). Nothing when perf mode is off.
void perf(OpRun& r, const Case& c, int T, int pos, double ops = 0);

// Tuning variants of the prefill attention: the forced key tile and rows a thread of the portable
// tiled kernel, and, where the cooperative-matrix kernel runs (fp16 q and caches on a device with
// fp16 cooperative matrices), a KV head's query heads in one workgroup (Gqa) and the portable
// kernel in its place (Portable).
enum class AttVar { Default, Bk32, Rq1, Gqa, Portable };
Tuning att_tuning(AttVar v);
const char* att_var_name(AttVar v);  // "", "_bk32", ...
// A Gqa or Portable variant where the cooperative-matrix prefill attention does not run (this
// device, or these dtypes): checks that the variant's plan is the default's (so the default case
// covers it), prints it, and returns true: the case has nothing more to run.
bool variant_inert_here(AttVar v, int hd, DType act, DType cache, int group);

}  // namespace vkllm::test::table
