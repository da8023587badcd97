// cudnn_plan.hpp: how one attention problem is laid out for cuDNN SDPA, computed
// on the host from the production metadata (docs/semantics.md#3-metadata) without touching
// cuDNN, so that it is tested on the CPU (tests/cudnn_backend_rules_test.cpp).
//
// The seam's tensors are [R, T, H, D] = THD [R*T, H, D] with gaps. Two layouts:
//  - bshd: every row holds exactly one document, starting at the row's first
//    token on both sides. cuDNN sees [R, H, T, D] with strides (T*H*D, D, H*D, 1)
//    and per-row lengths (padding mask); no ragged offsets.
//  - thd: anything else. cuDNN sees [S, H, s_max, D] with per-document ragged
//    offsets in ELEMENTS (token index * H * D) and lengths, so the gaps between
//    documents (padding, trimmed tokens) are never read or written. s_max is
//    rounded up to a multiple of 64 so that problems of similar lengths share a graph.
// Either way cuDNN writes only the tokens of documents: the caller zero-fills o
// and the gradients first and sets lse = -inf for every other token
// (docs/semantics.md#5-attention-outputs-and-gradients). Stats (cuDNN's natural-log LSE) are packed
// [S, Hq, s_max, 1] in both layouts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn_oracle/model/metadata.hpp"

namespace attn_oracle::inline backends::cudnn {

enum class Layout { bshd, thd };
inline const char* to_string(Layout layout) { return layout == Layout::bshd ? "bshd" : "thd"; }

struct Plan {
  Layout layout = Layout::thd;
  int64_t docs = 0;                       // S: cuDNN's batch (R for bshd)
  int64_t s_max_q = 0, s_max_kv = 0;      // cuDNN's sequence dims
  int64_t total_q = 0, total_kv = 0;      // tokens of the seam's tensors: R*Tq, R*Tkv
  std::vector<int32_t> seq_len_q;         // [S] valid tokens of each document
  std::vector<int32_t> seq_len_kv;        // [S]
  std::vector<int64_t> token_offset_q;    // [S+1] first token of each document; last = total_q
  std::vector<int64_t> token_offset_kv;   // [S+1]
};

// The plan for a problem with `rows` rows of tq and tkv tokens and metadata `md`.
Plan make_plan(const Metadata& md, int64_t rows, int64_t tq, int64_t tkv);

// Ragged offsets in elements for a side with `heads` heads of `head_dim`.
std::vector<int64_t> element_offsets(const std::vector<int64_t>& token_offsets, int64_t heads, int64_t head_dim);

// lse [Hq, total_q] (-inf where no document covers a token) from packed stats
// [S, Hq, s_max_q].
std::vector<float> lse_from_stats(const Plan& plan, int64_t heads_q, const std::vector<float>& stats);

// "thd S=3 s_max=64/128" for messages and the backend's version line.
std::string describe(const Plan& plan);

}  // namespace attn_oracle::backends::cudnn
