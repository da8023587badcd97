// kernel_view.cpp: see kernel_view.hpp.
#include "kernel_view.hpp"

#include <algorithm>
#include <sstream>

#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::adapters::detail {
namespace {

// One document's run on one side of one row.
struct Run {
  int64_t id = 0, begin = 0, len = 0, pos0 = 0;
  bool contiguous = true;  // pos[begin + t] == pos0 + t
};

std::vector<Run> runs_of(const RowView& row) {
  std::vector<Run> runs;
  for (int64_t t = 0; t < row.len; ++t) {
    if (row.ids[t] == 0) continue;
    if (runs.empty() || runs.back().id != row.ids[t] || runs.back().begin + runs.back().len != t) {
      runs.push_back(Run{row.ids[t], t, 0, row.pos[t], true});
    }
    Run& r = runs.back();
    // pos0 + len cannot wrap: validated positions increase and stay <= INT64_MAX.
    r.contiguous = r.contiguous && row.pos[t] - r.pos0 == r.len;
    ++r.len;
  }
  return runs;
}

std::string to_string_wide(Wide x) {
  if (x == 0) return "0";
  const bool negative = x < 0;
  std::string digits;
  for (; x != 0; x /= 10) digits.push_back(static_cast<char>('0' + (negative ? -(x % 10) : x % 10)));
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

// Keys [lo, hi] query a may attend, clipped to [0, lkv); empty when lo > hi.
std::pair<Wide, Wide> clipped_interval(const Band& band, int64_t a, int64_t lkv) {
  const Wide diagonal = Wide(a) + band.offset;
  Wide lo = band.left < 0 ? Wide(0) : std::max<Wide>(0, diagonal - band.left);
  Wide hi = band.right < 0 ? Wide(lkv - 1) : std::min<Wide>(lkv - 1, diagonal + band.right);
  if (lo > hi) lo = 1, hi = 0;  // one spelling of "nothing"
  return {lo, hi};
}

std::string interval_name(std::pair<Wide, Wide> k) {
  if (k.first > k.second) return "no key";
  return "keys [" + to_string_wide(k.first) + ", " + to_string_wide(k.second) + "]";
}

}  // namespace

Error refuse(std::string message) { return Error{ErrorCode::unsupported, std::move(message)}; }
Error bad_metadata(std::string message) { return Error{ErrorCode::bad_metadata, std::move(message)}; }
Error bad_window(std::string message) { return Error{ErrorCode::bad_window, std::move(message)}; }

Expected<BatchView> view_batch(const PackedBatch& batch, std::string_view stack) {
  const auto layout = validate(batch);
  if (!layout) return layout.error();
  BatchView view{layout.value(), {}};
  const BatchLayout& l = view.layout;
  const bool all_pairs = !is_causal(batch.mask) && batch.window.left < 0 && batch.window.right < 0;
  for (int64_t row = 0; row < l.rows(); ++row) {
    const std::vector<Run> q = runs_of(side_row(batch.q, l.q_extra, l, row));
    const std::vector<Run> kv = runs_of(side_row(batch.kv, l.kv_extra, l, row));
    // Validated ids increase along a row on each side: merge the two lists by id.
    size_t i = 0, j = 0;
    while (i < q.size() || j < kv.size()) {
      const int64_t id = j == kv.size() || (i < q.size() && q[i].id < kv[j].id) ? q[i].id : kv[j].id;
      const Run qr = i < q.size() && q[i].id == id ? q[i++] : Run{id, 0, 0, 0, true};
      const Run kr = j < kv.size() && kv[j].id == id ? kv[j++] : Run{id, 0, 0, 0, true};
      if (qr.len == 0 || kr.len == 0) continue;  // one side only: no valid token on either
      DocumentView doc;
      doc.row = row, doc.id = id;
      doc.q_begin = row * l.q_len + qr.begin, doc.q_len = qr.len;
      doc.kv_begin = row * l.kv_len + kr.begin, doc.kv_len = kr.len;
      if (!all_pairs && !(qr.contiguous && kr.contiguous))
        return refuse("row " + std::to_string(row) + ", document " + std::to_string(id) + ": " +
                      (qr.contiguous ? "kv" : "q") + " positions are not contiguous, and " + std::string(stack) +
                      " reads a document by token index only");
      doc.band.offset = all_pairs ? Wide(0) : Wide(qr.pos0) - kr.pos0;
      if (is_bottom_right(batch.mask)) doc.band.offset += Wide(kr.len) - qr.len;
      doc.band.left = batch.window.left;
      doc.band.right = is_causal(batch.mask) ? 0 : batch.window.right;
      // Valid tokens (window ignored): under a causal term query a attends
      // something iff a + offset >= 0, key b is attended iff b <= lq - 1 + offset.
      doc.kv_kept = kr.len;
      if (is_causal(batch.mask)) {
        const Wide dropped = std::min<Wide>(qr.len, std::max<Wide>(0, -doc.band.offset));
        doc.q_dropped = static_cast<int64_t>(dropped);
        doc.kv_kept = static_cast<int64_t>(std::clamp<Wide>(Wide(qr.len) + doc.band.offset, 0, kr.len));
      }
      view.documents.push_back(doc);
    }
  }
  return view;
}

std::optional<std::string> first_band_difference(const Band& ours, const Band& theirs, int64_t lq, int64_t lkv,
                                                 std::string_view theirs_name) {
  for (int64_t a = 0; a < lq; ++a) {
    const auto want = clipped_interval(ours, a, lkv), got = clipped_interval(theirs, a, lkv);
    if (want == got) continue;
    return "query " + std::to_string(a) + " attends " + interval_name(want) + " here but " + interval_name(got) +
           " under " + std::string(theirs_name);
  }
  return std::nullopt;
}

std::string document_name(const DocumentView& doc, int64_t lq, int64_t lkv) {
  std::ostringstream os;
  os << "row " << doc.row << ", document " << doc.id << " (" << lq << " q tokens, " << lkv << " kv tokens)";
  return os.str();
}

PackedBatch one_row_batch(const std::vector<LaidOutDocument>& docs, int64_t q_tokens, int64_t kv_tokens,
                          MaskKind mask, Window window) {
  PackedBatch b;
  b.q.segment_ids = IntArray::filled({1, q_tokens}, 0);
  b.q.segment_pos = IntArray::filled({1, q_tokens}, 0);
  b.kv.segment_ids = IntArray::filled({1, kv_tokens}, 0);
  b.kv.segment_pos = IntArray::filled({1, kv_tokens}, 0);
  int64_t covered_q = 0, covered_kv = 0;
  for (size_t k = 0; k < docs.size(); ++k) {
    const LaidOutDocument& d = docs[k];
    for (int64_t t = 0; t < d.q_len; ++t) {
      b.q.segment_ids.data[d.q_begin + t] = static_cast<int64_t>(k) + 1;
      b.q.segment_pos.data[d.q_begin + t] = d.q_pos0 + t;
    }
    for (int64_t t = 0; t < d.kv_len; ++t) {
      b.kv.segment_ids.data[d.kv_begin + t] = static_cast<int64_t>(k) + 1;
      b.kv.segment_pos.data[d.kv_begin + t] = d.kv_pos0 + t;
    }
    covered_q += d.q_len, covered_kv += d.kv_len;
  }
  const bool gaps = covered_q < q_tokens || covered_kv < kv_tokens;
  if (gaps && mask == MaskKind::no_mask) mask = MaskKind::padding;
  if (gaps && mask == MaskKind::causal) mask = MaskKind::padding_causal;
  if (gaps && mask == MaskKind::causal_bottom_right) mask = MaskKind::padding_causal_bottom_right;
  b.mask = mask;
  b.window = window;
  b.max_segments = std::max<int64_t>(1, static_cast<int64_t>(docs.size()));
  return b;
}

void anchor_bottom_right(LaidOutDocument& doc) {
  doc.q_pos0 = std::max<int64_t>(0, doc.kv_len - doc.q_len);
  doc.kv_pos0 = std::max<int64_t>(0, doc.q_len - doc.kv_len);
}

}  // namespace attn_oracle::adapters::detail
