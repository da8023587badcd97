// transformer_engine.cpp: see transformer_engine.hpp.
#include "attn_oracle/adapters/transformer_engine.hpp"

#include <string>

#include "attn_oracle/model/validate.hpp"
#include "kernel_view.hpp"

namespace attn_oracle::adapters::transformer_engine {
namespace {

using detail::Band;
using detail::kInt32Max;

std::optional<Error> check_window(const WindowSize& w) {
  if (w.left < -1 || w.right < -1)
    return detail::bad_window("window_size (" + std::to_string(w.left) + ", " + std::to_string(w.right) +
                              "): TE takes -1 (unbounded) or >= 0 on each side");
  return std::nullopt;
}

// The anchoring refused in both directions (transformer_engine.hpp).
std::optional<Error> unpinned_window(MaskKind kind, const WindowSize& w, int64_t doc, int64_t lq, int64_t lkv) {
  const bool windowed = w.left >= 0 || (!is_causal(kind) && w.right >= 0);
  if (!windowed || is_bottom_right(kind) || lq == lkv) return std::nullopt;
  return detail::refuse("document " + std::to_string(doc) + " has " + std::to_string(lq) + " q and " +
                        std::to_string(lkv) + " kv tokens: where TE's THD path anchors a window on " +
                        std::string(attn_mask_type(kind)) + " then is not pinned down here");
}

Expected<std::vector<int64_t>> running_totals(const std::string& name, const std::vector<int64_t>& cu, size_t size) {
  if (cu.size() != size) return detail::bad_metadata(name + " has " + std::to_string(cu.size()) + " entries, not " + std::to_string(size));
  if (cu.front() != 0) return detail::bad_metadata(name + "[0] is " + std::to_string(cu.front()) + ", not 0");
  for (size_t k = 1; k < cu.size(); ++k) {
    if (cu[k] < cu[k - 1]) return detail::bad_metadata(name + " decreases at entry " + std::to_string(k));
    if (cu[k] > kInt32Max) return detail::bad_metadata(name + "[" + std::to_string(k) + "] does not fit int32");
  }
  return cu;
}

}  // namespace

Expected<MaskKind> mask_kind_from_attn_mask_type(std::string_view name) {
  if (auto kind = mask_kind_from_string(name)) return *kind;
  return Error{ErrorCode::bad_mask, "attn_mask_type \"" + std::string(name) +
                                        "\" has no mask kind here (\"arbitrary\" is an explicit mask tensor)"};
}

std::string_view attn_mask_type(MaskKind kind) { return to_string(kind); }

Expected<PackedBatch> to_packed_batch(const ThdParams& p) {
  const auto kind = mask_kind_from_attn_mask_type(p.attn_mask_type);
  if (!kind) return kind.error();
  if (auto e = check_window(p.window_size)) return *e;
  const size_t entries = p.cu_seqlens_q.size();
  if (entries < 2) return detail::bad_metadata("cu_seqlens_q has " + std::to_string(entries) + " entries: at least 2");
  const auto q = running_totals("cu_seqlens_q", p.cu_seqlens_q, entries);
  const auto kv = running_totals("cu_seqlens_kv", p.cu_seqlens_kv, entries);
  const auto qp = running_totals("cu_seqlens_q_padded", p.cu_seqlens_q_padded.empty() ? p.cu_seqlens_q : p.cu_seqlens_q_padded, entries);
  const auto kvp = running_totals("cu_seqlens_kv_padded", p.cu_seqlens_kv_padded.empty() ? p.cu_seqlens_kv : p.cu_seqlens_kv_padded, entries);
  for (const auto* e : {&q, &kv, &qp, &kvp})
    if (!*e) return e->error();
  std::vector<detail::LaidOutDocument> laid(entries - 1);
  for (size_t b = 0; b + 1 < entries; ++b) {
    laid[b] = {qp.value()[b], q.value()[b + 1] - q.value()[b], kvp.value()[b], kv.value()[b + 1] - kv.value()[b], 0, 0};
    if (qp.value()[b] + laid[b].q_len > qp.value()[b + 1] || kvp.value()[b] + laid[b].kv_len > kvp.value()[b + 1])
      return detail::bad_metadata("document " + std::to_string(b) + " runs past the next document's padded start");
    if (auto e = unpinned_window(*kind, p.window_size, static_cast<int64_t>(b), laid[b].q_len, laid[b].kv_len)) return *e;
  }
  PackedBatch batch = detail::one_row_batch(laid, qp->back(), kvp->back(), MaskKind::no_mask,
                                            Window{p.window_size.left, p.window_size.right});
  batch.mask = *kind;  // as named: padding between documents needs a padding kind
  if (auto v = validate(batch); !v) return v.error();
  return batch;
}

Expected<ThdParams> to_thd(const PackedBatch& batch) {
  const auto view = detail::view_batch(batch, "TransformerEngine's THD path");
  if (!view) return view.error();
  ThdParams p;
  p.attn_mask_type = std::string(attn_mask_type(batch.mask));
  p.window_size = WindowSize{batch.window.left < 0 ? -1 : batch.window.left, batch.window.right < 0 ? -1 : batch.window.right};
  p.cu_seqlens_q = p.cu_seqlens_kv = {0};
  const BatchLayout& l = view->layout;
  int64_t doc = 0;
  for (const detail::DocumentView& d : view->documents) {
    const int64_t lq = d.trimmed_q_len(), lkv = d.kv_kept;
    if (lq == 0) continue;
    if (auto e = unpinned_window(batch.mask, p.window_size, doc, lq, lkv)) return *e;
    // TE's index rule on the trimmed runs: our kernels' rule
    // (docs/semantics.md#the-kernels-index-rule-and-representability).
    const Band theirs{is_bottom_right(batch.mask) ? detail::Wide(lkv) - lq : 0, batch.window.left,
                      is_causal(batch.mask) ? 0 : batch.window.right};
    if (auto diff = detail::first_band_difference(d.trimmed_band(), theirs, lq, lkv, "TE's " + p.attn_mask_type))
      return detail::refuse(detail::document_name(d, lq, lkv) + ": " + *diff);
    p.cu_seqlens_q_padded.push_back(d.q_begin + d.q_dropped);
    p.cu_seqlens_kv_padded.push_back(d.kv_begin);
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + lq);
    p.cu_seqlens_kv.push_back(p.cu_seqlens_kv.back() + lkv);
    ++doc;
  }
  p.cu_seqlens_q_padded.push_back(l.rows() * l.q_len);
  p.cu_seqlens_kv_padded.push_back(l.rows() * l.kv_len);
  // Padded offsets are cumulative (from 0, padding after each document): tokens
  // before the first document go to a leading document with no valid tokens.
  if (p.cu_seqlens_q_padded.front() != 0 || p.cu_seqlens_kv_padded.front() != 0) {
    p.cu_seqlens_q_padded.insert(p.cu_seqlens_q_padded.begin(), 0);
    p.cu_seqlens_kv_padded.insert(p.cu_seqlens_kv_padded.begin(), 0);
    p.cu_seqlens_q.insert(p.cu_seqlens_q.begin(), 0);
    p.cu_seqlens_kv.insert(p.cu_seqlens_kv.begin(), 0);
  }
  // Tokens the call leaves out (padding, or invalid tokens trimmed off) are
  // padding to TE: a non-padding kind goes out as its padding variant.
  if (p.cu_seqlens_q.back() != p.cu_seqlens_q_padded.back() || p.cu_seqlens_kv.back() != p.cu_seqlens_kv_padded.back()) {
    if (batch.mask == MaskKind::no_mask) p.attn_mask_type = attn_mask_type(MaskKind::padding);
    if (batch.mask == MaskKind::causal) p.attn_mask_type = attn_mask_type(MaskKind::padding_causal);
    if (batch.mask == MaskKind::causal_bottom_right) p.attn_mask_type = attn_mask_type(MaskKind::padding_causal_bottom_right);
  }
  for (int64_t end : {p.cu_seqlens_q_padded.back(), p.cu_seqlens_kv_padded.back()})
    if (end > kInt32Max) return detail::refuse("the tensors hold " + std::to_string(end) + " tokens; TE's cu_seqlens are int32");
  return p;
}

Expected<PackedBatch> to_packed_batch(const SegmentParams& p) {
  const auto kind = mask_kind_from_attn_mask_type(p.attn_mask_type);
  if (!kind) return kind.error();
  if (auto e = check_window(p.window_size)) return *e;
  PackedBatch b{p.q, p.kv, *kind, Window{p.window_size.left, p.window_size.right}, p.max_segments};
  if (auto v = validate(b); !v) return v.error();
  return b;
}

Expected<SegmentParams> to_segments(const PackedBatch& b) {
  if (auto v = validate(b); !v) return v.error();
  return SegmentParams{std::string(attn_mask_type(b.mask)),
                       WindowSize{b.window.left < 0 ? -1 : b.window.left, b.window.right < 0 ? -1 : b.window.right},
                       b.q, b.kv, b.max_segments};
}

}  // namespace attn_oracle::adapters::transformer_engine
