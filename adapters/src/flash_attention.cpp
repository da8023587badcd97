// flash_attention.cpp: see flash_attention.hpp.
#include "attn_oracle/adapters/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernel_view.hpp"

namespace attn_oracle::adapters::flash_attention {
namespace {

using detail::Band;
using detail::kInt32Max;

const char* version_name(Version v) { return v == Version::fa2 ? "FlashAttention 2" : "FlashAttention 3"; }

// The window FlashAttention applies, negative = unbounded: causal fixes the
// right side at 0; FA2 first reads a side >= max_seqlen_k as -1, then a -1
// side as max_seqlen_k once the other is bounded.
Band their_band(Version v, bool causal, int64_t left, int64_t right, int64_t max_seqlen_k, int64_t lq, int64_t lkv) {
  if (causal) right = 0;
  if (v == Version::fa2) {
    if (left >= max_seqlen_k) left = -1;
    if (right >= max_seqlen_k) right = -1;
    if (left < 0 && right >= 0) left = max_seqlen_k;
    else if (left >= 0 && right < 0) right = max_seqlen_k;
  }
  return Band{detail::Wide(lkv) - lq, left, right};
}

std::optional<Error> check_cu_seqlens(const char* name, const std::vector<int64_t>& cu) {
  if (cu.front() != 0) return detail::bad_metadata(std::string(name) + "[0] is " + std::to_string(cu.front()) + ", not 0");
  for (size_t k = 1; k < cu.size(); ++k) {
    if (cu[k] < cu[k - 1])
      return detail::bad_metadata(std::string(name) + " decreases at entry " + std::to_string(k) + ": " +
                                  std::to_string(cu[k - 1]) + " then " + std::to_string(cu[k]));
    if (cu[k] > kInt32Max)
      return detail::bad_metadata(std::string(name) + "[" + std::to_string(k) + "] = " + std::to_string(cu[k]) +
                                  " does not fit FlashAttention's int32");
  }
  return std::nullopt;
}

std::optional<Error> check_max_seqlen(const char* name, int64_t max_seqlen, const std::vector<int64_t>& cu) {
  if (max_seqlen > kInt32Max)
    return detail::bad_metadata(std::string(name) + " = " + std::to_string(max_seqlen) + " does not fit int32");
  for (size_t k = 1; k < cu.size(); ++k)
    if (cu[k] - cu[k - 1] > max_seqlen)
      return detail::bad_metadata(std::string(name) + " = " + std::to_string(max_seqlen) + " is below the length " +
                                  std::to_string(cu[k] - cu[k - 1]) + " of document " + std::to_string(k - 1));
  return std::nullopt;
}

std::optional<Error> check_window_side(const char* name, int64_t side) {
  if (side < -1) return detail::bad_window(std::string(name) + " = " + std::to_string(side) + ": FlashAttention takes -1 or >= 0");
  if (side > kInt32Max) return detail::bad_window(std::string(name) + " = " + std::to_string(side) + " does not fit int32");
  return std::nullopt;
}

}  // namespace

Expected<PackedBatch> to_packed_batch(const VarlenParams& p) {
  if (p.cu_seqlens_q.size() != p.cu_seqlens_k.size() || p.cu_seqlens_q.size() < 2)
    return detail::bad_metadata("cu_seqlens_q and cu_seqlens_k have " + std::to_string(p.cu_seqlens_q.size()) +
                                " and " + std::to_string(p.cu_seqlens_k.size()) +
                                " entries: they need the same count, at least 2 (one document)");
  for (auto check : {check_cu_seqlens("cu_seqlens_q", p.cu_seqlens_q), check_cu_seqlens("cu_seqlens_k", p.cu_seqlens_k),
                     check_max_seqlen("max_seqlen_q", p.max_seqlen_q, p.cu_seqlens_q),
                     check_max_seqlen("max_seqlen_k", p.max_seqlen_k, p.cu_seqlens_k),
                     check_window_side("window_size[0]", p.window_left),
                     check_window_side("window_size[1]", p.window_right)})
    if (check) return *check;

  // The window as FlashAttention applies it (any lq, lkv: only the sides are read).
  const Band band = their_band(p.version, p.causal, p.window_left, p.window_right, p.max_seqlen_k, 0, 0);
  const size_t docs = p.cu_seqlens_q.size() - 1;
  std::vector<detail::LaidOutDocument> laid(docs);
  for (size_t k = 0; k < docs; ++k) {
    laid[k].q_begin = p.cu_seqlens_q[k], laid[k].q_len = p.cu_seqlens_q[k + 1] - p.cu_seqlens_q[k];
    laid[k].kv_begin = p.cu_seqlens_k[k], laid[k].kv_len = p.cu_seqlens_k[k + 1] - p.cu_seqlens_k[k];
  }
  const int64_t q_tokens = p.cu_seqlens_q.back(), kv_tokens = p.cu_seqlens_k.back();
  if (band.right == 0) {
    // A left side of max_seqlen_k or more reaches past every key: j >= i + Lk - Lq - left
    // holds for j = 0 since i + Lk - Lq <= Lk - 1 < max_seqlen_k.
    const int64_t left = band.left >= p.max_seqlen_k ? -1 : band.left;
    return detail::one_row_batch(laid, q_tokens, kv_tokens, MaskKind::causal_bottom_right, Window{left, -1});
  }
  if (band.left < 0 && band.right < 0)
    return detail::one_row_batch(laid, q_tokens, kv_tokens, MaskKind::no_mask, Window{});
  for (auto& d : laid) detail::anchor_bottom_right(d);
  return detail::one_row_batch(laid, q_tokens, kv_tokens, MaskKind::no_mask, Window{band.left, band.right});
}

Expected<VarlenCall> to_flash_attention(const PackedBatch& batch, Version version) {
  const auto view = detail::view_batch(batch, version_name(version));
  if (!view) return view.error();
  VarlenCall call;
  VarlenParams& p = call.params;
  p.version = version;
  p.causal = is_causal(batch.mask);
  // A side FlashAttention cannot hold (past int32) is passed as unbounded; the
  // comparison below refuses it where that is not the same.
  p.window_left = batch.window.left < 0 || batch.window.left > kInt32Max ? -1 : batch.window.left;
  p.window_right = p.causal || batch.window.right < 0 || batch.window.right > kInt32Max ? -1 : batch.window.right;
  p.cu_seqlens_q = {0};
  p.cu_seqlens_k = {0};
  for (const detail::DocumentView& d : view->documents) {
    if (d.trimmed_q_len() == 0) continue;  // no valid token: not in the call
    const int64_t lq = d.trimmed_q_len(), lkv = d.kv_kept;
    p.max_seqlen_q = std::max(p.max_seqlen_q, lq);
    p.max_seqlen_k = std::max(p.max_seqlen_k, lkv);
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + lq);
    p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + lkv);
    for (int64_t t = 0; t < lq; ++t) call.q_tokens.push_back(d.q_begin + d.q_dropped + t);
    for (int64_t t = 0; t < lkv; ++t) call.kv_tokens.push_back(d.kv_begin + t);
  }
  // Any max_seqlen_k >= every length is valid, and FA2's window rule reads it:
  // pick one under which the rule says what we mean. A bounded right side R
  // survives when R < max_seqlen_k; a -1 right side (read as max_seqlen_k)
  // reaches every key when max_seqlen_k >= lq - 1 for every document.
  if (version == Version::fa2 && !p.causal && (p.window_left >= 0 || p.window_right >= 0)) {
    const int64_t wanted = p.window_right >= 0 ? p.window_right + 1 : p.max_seqlen_q;
    p.max_seqlen_k = std::max(p.max_seqlen_k, std::min(wanted, kInt32Max));
  }
  if (p.cu_seqlens_q.back() > kInt32Max || p.cu_seqlens_k.back() > kInt32Max)
    return detail::refuse("the batch has " + std::to_string(p.cu_seqlens_q.back()) + " valid q and " +
                          std::to_string(p.cu_seqlens_k.back()) + " valid kv tokens; FlashAttention's cu_seqlens are int32");
  for (const detail::DocumentView& d : view->documents) {
    if (d.trimmed_q_len() == 0) continue;  // no valid token: not in the call
    const int64_t lq = d.trimmed_q_len(), lkv = d.kv_kept;
    const Band theirs = their_band(version, p.causal, p.window_left, p.window_right, p.max_seqlen_k, lq, lkv);
    const std::string name = std::string(version_name(version)) + (p.causal ? "'s causal=True" : "") +
                             " window (" + std::to_string(p.window_left) + ", " + std::to_string(p.window_right) +
                             "), anchored bottom-right";
    if (auto diff = detail::first_band_difference(d.trimmed_band(), theirs, lq, lkv, name))
      return detail::refuse(detail::document_name(d, lq, lkv) + ": " + *diff);
  }
  return call;
}

AttentionResult outputs_to_ours(const VarlenCall& call, const std::vector<double>& out,
                                const std::vector<double>& softmax_lse, const AttentionSizes& sizes) {
  const int64_t hq = sizes.heads_q, d = sizes.head_dim, tq = sizes.q_len;
  const int64_t total_q = static_cast<int64_t>(call.q_tokens.size());
  AttentionResult r;
  r.o.assign(sizes.q_elems(), 0.0);
  r.lse.assign(sizes.lse_elems(), -INFINITY);
  for (int64_t t = 0; t < total_q; ++t) {
    const int64_t ours = call.q_tokens[t], row = ours / tq, i = ours % tq;
    std::copy(out.begin() + t * hq * d, out.begin() + (t + 1) * hq * d, r.o.begin() + ours * hq * d);
    for (int64_t h = 0; h < hq; ++h) {
      const double lse = softmax_lse[h * total_q + t];
      r.lse[(row * hq + h) * tq + i] = lse == INFINITY ? -INFINITY : lse;
    }
  }
  return r;
}

}  // namespace attn_oracle::adapters::flash_attention
