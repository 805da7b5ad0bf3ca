// One continuous-batching scenario for the batched forward (docs/ir.md "Batched forward"), run
// through a BatchExecutor and, as the reference, through one single-sequence Executor per
// sequence: three sequences A, B, C with scattered KV blocks; A and B prefill together, then C's
// prompt joins while A and B decode, then all three decode in a shuffled row order. The inputs are
// fixed token ids (not the outputs), so the two runs stay aligned whatever their argmax does.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/executor.h"

namespace vkllm::testutil {

struct BatchOutput {
  int step = 0, seq = 0;
  int32_t token = 0;
  std::vector<float> logits;
};

struct BatchScenario {
  static constexpr int kBlockTokens = 4, kBlocks = 16, kStride = 4, kSeqs = 3, kDecodeSteps = 6;
  std::vector<int32_t> prompt[kSeqs] = {
      {5, 17, 29, 3, 42}, {8, 1, 66, 12, 40, 77, 23, 9, 50}, {31, 2, 60}};
  const int32_t table[kSeqs * kStride] = {5, 1, 9, 14, 0, 7, 3, 8, 2, 11, 6, 15};
  int32_t decode_token(int step, int seq, int vocab) const {
    return static_cast<int32_t>((7 * step + 13 * seq + 1) % vocab);
  }

  // One batch forward a step; each entry of a step's list: (seq, first position, tokens).
  struct Part {
    int seq, pos;
    std::vector<int32_t> ids;
  };
  std::vector<std::vector<Part>> steps(int vocab) const {
    std::vector<std::vector<Part>> s;
    s.push_back({{0, 0, prompt[0]}, {1, 0, prompt[1]}});
    s.push_back({{0, 5, {decode_token(1, 0, vocab)}},
                 {2, 0, prompt[2]},
                 {1, 9, {decode_token(1, 1, vocab)}}});
    for (int k = 0; k < kDecodeSteps; ++k) {
      const int st = 2 + k;
      s.push_back({{2, 3 + k, {decode_token(st, 2, vocab)}},
                   {0, 6 + k, {decode_token(st, 0, vocab)}},
                   {1, 10 + k, {decode_token(st, 1, vocab)}}});
    }
    return s;
  }

  std::vector<BatchOutput> run_batched(BatchExecutor& ex, int vocab) const {
    std::vector<BatchOutput> out;
    const auto all = steps(vocab);
    for (size_t st = 0; st < all.size(); ++st) {
      std::vector<int32_t> ids, pos, seq, rows;
      for (const Part& p : all[st]) {
        for (size_t i = 0; i < p.ids.size(); ++i) {
          ids.push_back(p.ids[i]);
          pos.push_back(p.pos + static_cast<int32_t>(i));
          seq.push_back(p.seq);
        }
        rows.push_back(static_cast<int32_t>(ids.size()) - 1);
      }
      std::vector<int32_t> next(rows.size());
      std::vector<float> logits(rows.size() * static_cast<size_t>(vocab));
      BatchForward b;
      b.T = static_cast<int>(ids.size());
      b.ids = ids.data();
      b.pos = pos.data();
      b.seq = seq.data();
      b.n_seqs = kSeqs;
      b.block_table = table;
      b.table_stride = kStride;
      b.out_rows = rows.data();
      b.n_out = static_cast<int>(rows.size());
      b.next_tokens = next.data();
      b.logits = logits.data();
      ex.forward(b);
      for (size_t i = 0; i < rows.size(); ++i)
        out.push_back({static_cast<int>(st), all[st][i].seq, next[i],
                       std::vector<float>(logits.begin() + static_cast<long>(i) * vocab,
                                          logits.begin() + static_cast<long>(i + 1) * vocab)});
    }
    return out;
  }

  std::vector<BatchOutput> run_single(const std::function<std::unique_ptr<Executor>()>& make,
                                      int vocab) const {
    std::unique_ptr<Executor> ex[kSeqs];
    for (auto& e : ex) e = make();
    std::vector<BatchOutput> out;
    const auto all = steps(vocab);
    for (size_t st = 0; st < all.size(); ++st)
      for (const Part& p : all[st]) {
        std::vector<float> logits(static_cast<size_t>(vocab));
        const int32_t t =
            ex[p.seq]->forward(p.ids.data(), static_cast<int>(p.ids.size()), p.pos, logits.data());
        out.push_back({static_cast<int>(st), p.seq, t, logits});
      }
    return out;
  }
};

}  // namespace vkllm::testutil
