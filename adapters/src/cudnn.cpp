// cudnn.cpp: see cudnn.hpp.
#include "attn_oracle/adapters/cudnn.hpp"

#include <string>

#include "kernel_view.hpp"

namespace attn_oracle::adapters::cudnn {
namespace {

using detail::Band;
using detail::kInt32Max;

// cuDNN's band on one sequence as ours: the left bound is exclusive.
Band their_band(const SdpaRaggedParams& p, int64_t lq, int64_t lkv) {
  const detail::Wide shift = p.alignment == DiagonalAlignment::bottom_right ? detail::Wide(lkv) - lq : 0;
  return Band{shift, p.left_bound ? *p.left_bound - 1 : -1, p.right_bound ? *p.right_bound : -1};
}

std::string band_name(const SdpaRaggedParams& p) {
  std::string s = p.alignment == DiagonalAlignment::bottom_right ? "cuDNN's BOTTOM_RIGHT band" : "cuDNN's TOP_LEFT band";
  s += " (left bound " + (p.left_bound ? std::to_string(*p.left_bound) : std::string("none"));
  s += ", right bound " + (p.right_bound ? std::to_string(*p.right_bound) : std::string("none")) + ")";
  return s;
}

// Sequence starts in tokens, checked: [B + 1] offsets, multiples of the stride, never decreasing.
Expected<std::vector<int64_t>> token_offsets(const char* side, const std::vector<int64_t>& offsets,
                                             const std::vector<int64_t>& lengths, int64_t per_token) {
  const std::string name = std::string("ragged_offset_") + side;
  if (per_token < 1)
    return detail::bad_metadata(std::string(side) + "_elements_per_token = " + std::to_string(per_token) + " is below 1");
  std::vector<int64_t> tokens(offsets.size());
  for (size_t b = 0; b < offsets.size(); ++b) {
    if (offsets[b] < 0 || offsets[b] % per_token != 0)
      return detail::bad_metadata(name + "[" + std::to_string(b) + "] = " + std::to_string(offsets[b]) +
                                  " is not a non-negative multiple of " + std::to_string(per_token) + " elements per token");
    tokens[b] = offsets[b] / per_token;
  }
  for (size_t b = 0; b < lengths.size(); ++b) {
    const std::string seq = "seq_len_" + std::string(side) + "[" + std::to_string(b) + "] = " + std::to_string(lengths[b]);
    if (lengths[b] < 0 || lengths[b] > kInt32Max) return detail::bad_metadata(seq + " is negative or past int32");
    if (tokens[b + 1] < tokens[b]) return detail::bad_metadata(name + " decreases at entry " + std::to_string(b + 1));
    if (lengths[b] > tokens[b + 1] - tokens[b])
      return detail::bad_metadata(seq + " runs past the next sequence's start (" + name + "[" + std::to_string(b + 1) + "])");
  }
  return tokens;
}

}  // namespace

Expected<PackedBatch> to_packed_batch(const SdpaRaggedParams& p) {
  const size_t batch = p.seq_len_q.size();
  if (batch < 1 || p.seq_len_kv.size() != batch || p.ragged_offset_q.size() != batch + 1 ||
      p.ragged_offset_kv.size() != batch + 1)
    return detail::bad_metadata("seq_len_q, seq_len_kv, ragged_offset_q, ragged_offset_kv have " +
                                std::to_string(batch) + ", " + std::to_string(p.seq_len_kv.size()) + ", " +
                                std::to_string(p.ragged_offset_q.size()) + ", " + std::to_string(p.ragged_offset_kv.size()) +
                                " entries: they need B >= 1, B, B + 1, B + 1");
  const auto q = token_offsets("q", p.ragged_offset_q, p.seq_len_q, p.q_elements_per_token);
  if (!q) return q.error();
  const auto kv = token_offsets("kv", p.ragged_offset_kv, p.seq_len_kv, p.kv_elements_per_token);
  if (!kv) return kv.error();
  if (p.left_bound && (*p.left_bound < 1 || *p.left_bound > kInt32Max))
    return detail::bad_window("left bound " + std::to_string(*p.left_bound) + ": cuDNN takes 1 .. int32 max (exclusive bound)");
  if (p.right_bound && (*p.right_bound < 0 || *p.right_bound > kInt32Max))
    return detail::bad_window("right bound " + std::to_string(*p.right_bound) + ": cuDNN takes 0 .. int32 max");

  std::vector<detail::LaidOutDocument> laid(batch);
  for (size_t b = 0; b < batch; ++b)
    laid[b] = {q.value()[b], p.seq_len_q[b], kv.value()[b], p.seq_len_kv[b], 0, 0};
  const int64_t q_tokens = q->back(), kv_tokens = kv->back();
  const Window window{p.left_bound ? *p.left_bound - 1 : -1, p.right_bound ? *p.right_bound : -1};
  const bool bottom_right = p.alignment == DiagonalAlignment::bottom_right;
  if (p.right_bound == 0)
    return detail::one_row_batch(laid, q_tokens, kv_tokens, bottom_right ? MaskKind::causal_bottom_right : MaskKind::causal,
                                 Window{window.left, -1});
  if (bottom_right && (p.left_bound || p.right_bound))
    for (auto& d : laid) detail::anchor_bottom_right(d);
  return detail::one_row_batch(laid, q_tokens, kv_tokens, MaskKind::no_mask, window);
}

Expected<SdpaRaggedParams> to_cudnn(const PackedBatch& batch, int64_t q_elements_per_token,
                                    int64_t kv_elements_per_token) {
  if (q_elements_per_token < 1 || kv_elements_per_token < 1)
    return detail::bad_metadata("elements per token must be >= 1");
  const auto view = detail::view_batch(batch, "cuDNN");
  if (!view) return view.error();
  SdpaRaggedParams p;
  p.q_elements_per_token = q_elements_per_token, p.kv_elements_per_token = kv_elements_per_token;
  if (is_causal(batch.mask)) p.right_bound = 0;
  else if (batch.window.right >= 0 && batch.window.right <= kInt32Max) p.right_bound = batch.window.right;
  // A left side past int32 max - 1 keys has no cuDNN spelling: passed as no bound, compared below.
  if (batch.window.left >= 0 && batch.window.left < kInt32Max) p.left_bound = batch.window.left + 1;
  const BatchLayout& l = view->layout;
  for (const detail::DocumentView& d : view->documents) {
    if (d.trimmed_q_len() == 0) continue;  // no valid token: not in the call
    if (d.trimmed_q_len() > kInt32Max || d.kv_kept > kInt32Max)
      return detail::refuse(detail::document_name(d, d.trimmed_q_len(), d.kv_kept) + ": cuDNN's seq_len is int32");
    p.seq_len_q.push_back(d.trimmed_q_len());
    p.seq_len_kv.push_back(d.kv_kept);
    p.ragged_offset_q.push_back((d.q_begin + d.q_dropped) * q_elements_per_token);
    p.ragged_offset_kv.push_back(d.kv_begin * kv_elements_per_token);
  }
  p.ragged_offset_q.push_back(l.rows() * l.q_len * q_elements_per_token);
  p.ragged_offset_kv.push_back(l.rows() * l.kv_len * kv_elements_per_token);

  // The kind's own alignment first; the other one where it happens to attend the same.
  const DiagonalAlignment natural =
      is_bottom_right(batch.mask) ? DiagonalAlignment::bottom_right : DiagonalAlignment::top_left;
  std::optional<std::string> first_refusal;
  for (DiagonalAlignment alignment : {natural, natural == DiagonalAlignment::top_left ? DiagonalAlignment::bottom_right
                                                                                      : DiagonalAlignment::top_left}) {
    p.alignment = alignment;
    std::optional<std::string> refusal;
    for (const detail::DocumentView& d : view->documents) {
    if (d.trimmed_q_len() == 0) continue;  // no valid token: not in the call
      const int64_t lq = d.trimmed_q_len(), lkv = d.kv_kept;
      if (auto diff = detail::first_band_difference(d.trimmed_band(), their_band(p, lq, lkv), lq, lkv, band_name(p))) {
        refusal = detail::document_name(d, lq, lkv) + ": " + *diff;
        break;
      }
    }
    if (!refusal) return p;
    if (!first_refusal) first_refusal = refusal;
  }
  return detail::refuse(*first_refusal);
}

}  // namespace attn_oracle::adapters::cudnn
