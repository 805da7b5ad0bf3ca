// One prepared op of a program on Vulkan: pipelines chosen, descriptor sets written once (weights
// larger than one binding split into row chunks), dispatches recorded with the token count T as a
// push constant. The position of the forward's first token is not recorded: shaders read it from
// the `step` buffer, so a recorded decode step replays unchanged at every position.
#pragma once
#include <vulkan/vulkan.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vk_memory.h"
#include "backend/vulkan/vk_pipeline.h"
#include "ir/program.h"

namespace vkllm::vk {

// What ops share: the device, pipelines, memory, and scratch owned by the interpreter. It lives
// only while the executor prepares its ops: a record function must not read it (take what it
// needs, such as the Kernels cache or a buffer, when it is made).
// VKLLM_CHAIN_CLOCK=1: the decode chains' phase cycles (linear_8da4w_chain.comp VKLLM_CLOCK), a
// slot per chain stage; print_chain_clock (vk_fused.h) prints them when the executor ends.
struct ChainClock {
  Buffer buf;
  uint32_t groups = 0;
  std::vector<std::string> slots;  // each slot's row: the stage's pattern, widths, place in chain
};

// The shared int8 scratch of linear_8da4w as data: per op of the program, in program order, the
// tensor whose int8 rows the op writes there (writes[k], -1: none) and the tensor the scratch holds
// when the op starts (holds[k], -1: none). A norm over whole rows and a SwiGLU or GeGLU whose only
// readers are linear_8da4w ops quantize their output for them (rms_norm_quant, swiglu_quant); a
// linear_8da4w quantizes its input unless the scratch holds it (q, k and v of one row quantize it
// once). A plan's steps run in their own order: the executor checks that every unfused
// linear_8da4w that only reads the scratch finds its input there (check_scratch).
struct ScratchPlan {
  std::vector<int32_t> writes, holds;
};
ScratchPlan plan_scratch(const Program& p);

struct OpEnv {
  Context& ctx;
  Kernels& kernels;
  Allocator& alloc;
  const Program& program;
  int max_tokens;                                         // rows of every [-1, N] activation buffer
  std::function<const Buffer&(int32_t)> buffer;           // device buffer of a tensor
  std::function<std::span<const uint8_t>(int32_t)> host;  // host bytes of a weight (rope tables)
  // Device-local: word 0 the forward's first position, word 1 the decode steps of the submit so
  // far (the host writes (pos, 0) before each submit; the argmax advances both, argmax.comp).
  Buffer step;
  Buffer tokens;  // host-visible: the tokens of a submit's greedy decode steps (argmax.comp)
  // linear_8da4w scratch (int8 activations and per-token scale / zero point), shared by all ops,
  // and which tensor each op finds in it and writes there (the unfused ops; plan_scratch).
  uint64_t act_q_bytes = 0;
  // The fewest tokens the int8 scratch holds: linear_8da4w_rows_coopmat reads up to 64 rows (its
  // tokens past the forward's are read, never stored).
  static constexpr uint64_t kScratchMinTokens = 64;
  Buffer act_q, act_qp;
  ScratchPlan scratch = plan_scratch(program);
  std::map<std::pair<std::vector<int32_t>, float>, Buffer>
      rope_tables;  // by (inv_freq tensors, factor)
  // Split-K attention partials of a decode step, shared by the attention ops (each one's combine
  // pass is done before the next one starts: a barrier always lies between layers).
  Buffer attn_part;
  Buffer attn_counter;  // the fused decode attention's counters: one per head and one for the row
  Buffer tail_counter;  // the tail runs' finished-workgroup counter (zero between uses)
  Buffer chain_sync;    // the decode chains' grid-sync counters (grid_sync.glsl; zero between uses)
  ChainClock chain_clock;
  // The op family whose fusion into the next op is off (fuses_into_next): the test corruption
  // switch's, or last_row in a batched executor (its rows are gathered, not the last one).
  std::string unfused_family;
  // A batched executor's forwards (docs/ir.md "Batched forward"; null buffer otherwise): the rows
  // buffer (host-visible words: per row t at 4 t: position, its block table's word offset, its
  // sequence's last position in the forward, the cache row of its position; the output rows at
  // out_offset; the block tables after them), the pool's block_tokens, and the output rows of the
  // forward being recorded (the rows of every activation after last_row).
  // With a window pool (batch_window_offset > 0), the words from that byte offset on are the
  // window group's rows view of the same layout (its rows' cache rows and block tables, their
  // offsets from there), bound to the attention ops whose caches are in that group
  // (batch_cache_group: per tensor, 1 for those caches).
  Buffer batch_rows;
  uint32_t batch_out_offset = 0, batch_block_tokens = 0, batch_out = 0;
  uint64_t batch_window_offset = 0;
  std::vector<int> batch_cache_group;
  bool batched() const { return batch_rows.buf != VK_NULL_HANDLE; }
};

// One stage of a recorded op: the buffers it reads and writes.
class PreparedOp {
 public:
  using RecordFn = std::function<void(VkCommandBuffer, int T)>;
  using CheckFn = std::function<void(const int32_t* ids, int T)>;
  PreparedOp(RecordFn r, CheckFn c) : record_(std::move(r)), check_(std::move(c)) {}
  // What the op's recording reads and writes, as the executor's barrier plan and liveness see it:
  // one Phase per stage, the op recording a barrier of its own between consecutive phases
  // (weights and constant tables, never written, are left out). `phases` for forwards of
  // several tokens; `decode_phases` for one token when its recording differs (else empty).
  std::vector<Phase> phases, decode_phases;
  const std::vector<Phase>& phases_for(bool decode) const {
    return decode && !decode_phases.empty() ? decode_phases : phases;
  }
  // An op that records nothing because the next op records it along with its own work (an add
  // or last_row fused into the rms_norm that reads its output: fuses_into_next). The executor plans
  // the pair as one op.
  bool fused_into_next = false;
  // The tensor whose int8 quantization the op writes to the shared scratch (-1: none), so that a
  // plan knows which tensor the scratch holds after the op.
  int32_t quantizes = -1;
  // Records the op's dispatches (with barriers between its own stages; none after the last).
  void record(VkCommandBuffer cb, int T) const { record_(cb, T); }
  // Host-side checks of the forward's inputs (token ids in range).
  void check(const int32_t* ids, int T) const {
    if (check_) check_(ids, T);
  }

 private:
  RecordFn record_;
  CheckFn check_;
};

// Bytes of linear_8da4w scratch the op needs per token (0 for other families).
uint64_t act_quant_bytes_per_token(const Program& p, const Op& op);

// Does op k record nothing because the next op, an rms_norm, computes its output itself: an add
// whose output the norm reads first (rms_norm_add computes the sum), or a last_row whose output
// only the norm reads (the norm reads the row in place)? The executor keeps op k's inputs alive
// through the norm, so that no buffer the fused kernel writes shares memory with them.
bool fuses_into_next(const Program& p, size_t k, const std::string& unfused_family = {});

// Fails unless op k of the program, run alone as a step of a plan, finds what it reads in the int8
// scratch: `held`, the tensor the plan's steps before it left there.
void check_scratch(const OpEnv& env, size_t k, int32_t held);

// Prepares op `op`, which must be an element of env.program.ops (fusion looks at its neighbours).
std::unique_ptr<PreparedOp> prepare_op(OpEnv& env, const Op& op);

// Dispatches recorded so far by this thread (the profile's kernel count).
uint64_t& dispatch_count();

// A compute -> compute memory barrier (every shader write visible to later shader reads/writes).
void compute_barrier(VkCommandBuffer cb);

}  // namespace vkllm::vk
