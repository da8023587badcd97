// convention_mocks.hpp: mock kernels written in other stacks' conventions, run
// through the convention adapters (attn_oracle/adapters/). Each computes its
// forward itself in float64 from nothing but the stack's own arguments:
//  - the FlashAttention mock reads cu_seqlens, causal and window_size on
//    gathered, gap-free q/k/v, anchors causal and the window bottom-right per
//    document, applies its version's -1 rule, and writes +inf as the lse of a
//    query that attends nothing; flash_attention::outputs_to_ours brings its
//    outputs back;
//  - the cuDNN mock reads seq_len, ragged offsets, the diagonal alignment and
//    the band bounds on our own tensors, the left bound exclusive.
// Gradients of backward problems come from the float64 reference: the
// conventions are the forward's. A problem the adapter refuses is unsupported
// (a skip, with the adapter's reason).
//
// Without a mistake both pass the attention properties
// (tests/planted_bugs_test.cpp, ConventionMocks); with the convention
// misapplied they are planted bugs caught and shrunk like every other one.
#pragma once

#include <memory>
#include <string>

#include "attn_oracle/adapters/flash_attention.hpp"
#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::planted {

struct ConventionMistakes {
  // FlashAttention mock: causal=True read as top-left (j <= i) instead of bottom-right.
  bool flash_causal_top_left = false;
  // cuDNN mock: our window left passed as cuDNN's left bound, not left + 1.
  bool cudnn_left_bound_unshifted = false;
};

std::unique_ptr<Backend> flash_attention_mock(
    std::string name, ConventionMistakes mistakes = {},
    adapters::flash_attention::Version version = adapters::flash_attention::Version::fa3);
std::unique_ptr<Backend> cudnn_mock(std::string name, ConventionMistakes mistakes = {});

}  // namespace attn_oracle::planted
