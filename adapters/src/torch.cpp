// torch.cpp: see torch.hpp.
#include "attn_oracle/adapters/torch.hpp"

#include <algorithm>
#include <string>

#include "attn_oracle/model/validate.hpp"
#include "kernel_view.hpp"

namespace attn_oracle::adapters::torch {
namespace {

using detail::Band;

std::string sdpa_name(SdpaCausal c) {
  switch (c) {
    case SdpaCausal::none: return "SDPA without a mask";
    case SdpaCausal::is_causal: return "SDPA's is_causal=True (top-left)";
    case SdpaCausal::causal_lower_right: return "SDPA's causal_lower_right";
  }
  return "SDPA";
}

Band sdpa_band(SdpaCausal c, int64_t lq, int64_t lkv) {
  if (c == SdpaCausal::none) return Band{0, -1, -1};
  return Band{c == SdpaCausal::causal_lower_right ? detail::Wide(lkv) - lq : 0, -1, 0};
}

// Every document's full runs against `theirs`, or the first difference.
template <class TheirBand>
std::optional<Error> compare_full_runs(const detail::BatchView& view, TheirBand theirs, const std::string& name) {
  for (const detail::DocumentView& d : view.documents)
    if (auto diff = detail::first_band_difference(d.band, theirs(d), d.q_len, d.kv_len, name))
      return detail::refuse(detail::document_name(d, d.q_len, d.kv_len) + ": " + *diff);
  return std::nullopt;
}

}  // namespace

Expected<PackedBatch> to_packed_batch(const SdpaParams& p) {
  if (p.batch < 1 || p.q_len < 1 || p.kv_len < 1)
    return detail::bad_metadata("SDPA shape N = " + std::to_string(p.batch) + ", L = " + std::to_string(p.q_len) +
                                ", S = " + std::to_string(p.kv_len) + ": each must be >= 1");
  PackedBatch b;
  b.q.segment_ids = IntArray::filled({p.batch, p.q_len}, 1);
  b.kv.segment_ids = IntArray::filled({p.batch, p.kv_len}, 1);
  b.q.segment_pos = IntArray({p.batch, p.q_len}, {});
  b.kv.segment_pos = IntArray({p.batch, p.kv_len}, {});
  for (int64_t row = 0; row < p.batch; ++row) {
    for (int64_t t = 0; t < p.q_len; ++t) b.q.segment_pos.data.push_back(t);
    for (int64_t t = 0; t < p.kv_len; ++t) b.kv.segment_pos.data.push_back(t);
  }
  b.mask = p.causal == SdpaCausal::none        ? MaskKind::no_mask
           : p.causal == SdpaCausal::is_causal ? MaskKind::causal
                                               : MaskKind::causal_bottom_right;
  b.max_segments = 1;
  return b;
}

Expected<SdpaParams> to_sdpa(const PackedBatch& batch) {
  const auto view = detail::view_batch(batch, "SDPA");
  if (!view) return view.error();
  const BatchLayout& l = view->layout;
  if (!l.extra.empty()) return detail::refuse("extra leading dims " + shape_to_string(l.extra) + ": flatten them into B first");
  // One document covering every token of the row, on both sides.
  std::vector<int64_t> covered(l.rows(), 0);
  for (const detail::DocumentView& d : view->documents)
    if (d.q_len == l.q_len && d.kv_len == l.kv_len) ++covered[d.row];
  for (int64_t row = 0; row < l.rows(); ++row)
    if (covered[row] != 1)
      return detail::refuse("row " + std::to_string(row) +
                            " is not one document over all its q and kv tokens: SDPA has no padding or packing");
  SdpaParams p{l.batch, l.q_len, l.kv_len, SdpaCausal::none};
  if (is_causal(batch.mask))
    p.causal = is_bottom_right(batch.mask) ? SdpaCausal::causal_lower_right : SdpaCausal::is_causal;
  auto band = [&](const detail::DocumentView& d) { return sdpa_band(p.causal, d.q_len, d.kv_len); };
  if (auto refusal = compare_full_runs(view.value(), band, sdpa_name(p.causal))) return *refusal;
  return p;
}

Expected<PackedBatch> to_packed_batch(const FlexDocumentMask& m) {
  const IntArray& doc = m.document_id;
  if (doc.rank() != 2 || static_cast<int64_t>(doc.data.size()) != shape_product(doc.shape))
    return Error{ErrorCode::rank_mismatch, "document_id has shape " + shape_to_string(doc.shape) + ": flex takes [B, T]"};
  if (m.sliding_window < -1)
    return detail::bad_window("sliding_window = " + std::to_string(m.sliding_window) + ": -1 (none) or >= 0");
  if (m.window_right < -1)
    return detail::bad_window("window_right = " + std::to_string(m.window_right) + ": -1 (none) or >= 0");
  PackedBatch b;
  b.q.segment_ids = IntArray(doc.shape, std::vector<int64_t>(doc.data.size()));
  b.q.segment_pos = IntArray(doc.shape, std::vector<int64_t>(doc.data.size()));
  const int64_t T = doc.shape[1];
  int64_t largest = 0;
  bool padding = false;
  for (size_t at = 0; at < doc.data.size(); ++at) {
    const int64_t d = doc.data[at];
    if (d < -1) return detail::bad_metadata("document_id[" + std::to_string(at / T) + ", " + std::to_string(at % T) +
                                            "] = " + std::to_string(d) + ": -1 (padding) or >= 0");
    if (d > INT64_MAX - 1) return detail::bad_metadata("document_id " + std::to_string(d) + " has no id after it");
    b.q.segment_ids.data[at] = d + 1;
    const bool continues = at % T != 0 && doc.data[at - 1] == d && d >= 0;
    b.q.segment_pos.data[at] = continues ? b.q.segment_pos.data[at - 1] + 1 : 0;
    largest = std::max(largest, d + 1);
    padding = padding || d < 0;
  }
  b.kv = b.q;
  b.mask = m.causal ? (padding ? MaskKind::padding_causal : MaskKind::causal)
                    : (padding ? MaskKind::padding : MaskKind::no_mask);
  b.window = Window{m.sliding_window, m.window_right};
  b.max_segments = std::max<int64_t>(1, largest);
  if (auto v = validate(b); !v) return v.error();  // one increasing run per document
  return b;
}

Expected<FlexDocumentMask> to_flex_document_mask(const PackedBatch& batch) {
  const auto view = detail::view_batch(batch, "flex attention");
  if (!view) return view.error();
  const BatchLayout& l = view->layout;
  if (!l.extra.empty() || batch.q.segment_ids != batch.kv.segment_ids)
    return detail::refuse("flex's document mask is self-attention on [B, T]: q and kv ids must be the same array");
  FlexDocumentMask m;
  m.document_id = IntArray(batch.q.segment_ids.shape, {});
  for (int64_t id : batch.q.segment_ids.data) m.document_id.data.push_back(id - 1);
  m.causal = is_causal(batch.mask);
  m.sliding_window = batch.window.left >= 0 ? batch.window.left : -1;
  // A bottom-right kind ignores the right side; under q_idx >= kv_idx a right bound changes nothing.
  m.window_right = batch.window.right >= 0 && !is_bottom_right(batch.mask) ? batch.window.right : -1;
  const std::string name =
      std::string("flex's document mask") + (m.causal ? " with q_idx >= kv_idx" : "") +
      (m.sliding_window >= 0 ? ", q_idx - kv_idx <= " + std::to_string(m.sliding_window) : "") +
      (m.window_right >= 0 ? ", kv_idx - q_idx <= " + std::to_string(m.window_right) : "");
  auto band = [&](const detail::DocumentView&) {
    return Band{0, m.sliding_window, m.causal ? 0 : m.window_right};
  };
  if (auto refusal = compare_full_runs(view.value(), band, name)) return *refusal;
  return m;
}

}  // namespace attn_oracle::adapters::torch
