// reference_metadata.cpp: explicit masks (DESIGN section 3) and the metadata read
// off them (section 4). See reference_metadata.hpp for the contract.
#include "attn_oracle/reference/metadata.hpp"

#include <sstream>

#include "attn_oracle/memory_budget.hpp"
#include "attn_oracle/validate.hpp"

namespace attn_oracle::ref {
namespace {

// Number of tokens of each id in a row ("rl" of section 3), per token.
std::vector<int64_t> run_lengths(const RowView& row) {
  std::vector<int64_t> rl(row.len, 0);
  for (int64_t t = 0; t < row.len;) {
    int64_t end = t;
    while (end < row.len && row.ids[end] == row.ids[t]) ++end;
    for (int64_t u = t; u < end; ++u) rl[u] = end - t;
    t = end;
  }
  return rl;
}

// The non-segment terms of DESIGN section 3 for one (query, key) pair: causal or
// bottom-right alignment, then the window. The one place the reference spells
// the rule: explicit_mask applies it to positions and run lengths, and the
// kernels' index rule is the same predicate on indices inside trimmed runs
// (kernel_rule_allows).
// The terms are evaluated in 128-bit integers: positions reach INT64_MAX and a
// window side may be a huge "unbounded" value, so no sum here can wrap.
bool pair_allowed(MaskKind mask, Window w, bool with_window, int64_t pos_q, int64_t pos_kv, int64_t rl_q,
                  int64_t rl_kv) {
  using wide = __int128;
  const wide q = pos_q, kv = pos_kv, left = w.left, right = w.right;
  if (is_bottom_right(mask)) {
    const wide q_from_end = wide{rl_q} - q, kv_from_end = wide{rl_kv} - kv;
    if (q_from_end > kv_from_end) return false;
    return !with_window || w.left < 0 || q_from_end + left >= kv_from_end;
  }
  if ((mask == MaskKind::causal || mask == MaskKind::padding_causal) && q < kv) return false;
  if (!with_window) return true;
  const bool left_ok = w.left < 0 || kv >= q - left;
  const bool right_ok = w.right < 0 || kv <= q + right;
  return left_ok && right_ok;
}

// Per row: valid-token flags of both sides (mask without window).
struct RowValidity {
  std::vector<char> q, kv;
};

RowValidity validity_of(const RowMask& m) {
  RowValidity v{std::vector<char>(m.q_len, 0), std::vector<char>(m.kv_len, 0)};
  for (int64_t i = 0; i < m.q_len; ++i)
    for (int64_t j = 0; j < m.kv_len; ++j)
      if (m(i, j)) v.q[i] = v.kv[j] = 1;
  return v;
}

// Slot-indexed seqlens and compacted first-valid-token offsets of one side of one row.
void side_metadata(const RowView& row, const std::vector<char>& valid, int64_t max_segments,
                   int64_t* seqlens, int64_t* offsets) {
  std::fill(seqlens, seqlens + max_segments, 0);
  std::fill(offsets, offsets + max_segments + 1, -1);
  int64_t next_offset = 0, last_doc = 0;
  for (int64_t t = 0; t < row.len; ++t) {
    if (!valid[t]) continue;
    const int64_t id = row.ids[t];
    ++seqlens[id - 1];
    if (id != last_doc) offsets[next_offset++] = t;
    last_doc = id;
  }
}

}  // namespace

RowMask explicit_mask(const PackedBatch& batch, const BatchLayout& layout, int64_t row,
                      bool with_window) {
  const RowView q = side_row(batch.q, layout.q_extra, layout, row);
  const RowView kv = side_row(batch.kv, layout.kv_extra, layout, row);
  const std::vector<int64_t> rl_q = run_lengths(q), rl_kv = run_lengths(kv);
  RowMask m{q.len, kv.len, std::vector<char>(q.len * kv.len, 0)};
  for (int64_t i = 0; i < q.len; ++i) {
    for (int64_t j = 0; j < kv.len; ++j) {
      m.allowed[i * kv.len + j] = q.ids[i] != 0 && q.ids[i] == kv.ids[j] &&
                                  pair_allowed(batch.mask, batch.window, with_window, q.pos[i], kv.pos[j],
                                               rl_q[i], rl_kv[j]);
    }
  }
  return m;
}

Expected<Metadata> metadata(const PackedBatch& batch) {
  auto checked = validate(batch);
  if (!checked) return checked.error();
  const BatchLayout& l = checked.value();
  MemoryNeed need;
  need.add("the explicit [Tq, Tkv] mask of one row", {l.q_len, l.kv_len});
  if (auto e = need.check("the reference metadata")) return *e;
  const int64_t M = l.max_segments, rows = l.rows();
  Metadata md;
  md.extra = l.extra;
  md.batch = l.batch;
  md.max_segments = M;
  md.q_seqlens.resize(rows * M);
  md.kv_seqlens.resize(rows * M);
  md.q_offsets.resize(rows * (M + 1));
  md.kv_offsets.resize(rows * (M + 1));
  md.cu_seqlens_q = md.cu_seqlens_kv = {0};
  for (int64_t r = 0; r < rows; ++r) {
    const RowValidity v = validity_of(explicit_mask(batch, l, r, /*with_window=*/false));
    int64_t* q_len = &md.q_seqlens[r * M];
    int64_t* kv_len = &md.kv_seqlens[r * M];
    int64_t* q_off = &md.q_offsets[r * (M + 1)];
    int64_t* kv_off = &md.kv_offsets[r * (M + 1)];
    side_metadata(side_row(batch.q, l.q_extra, l, r), v.q, M, q_len, q_off);
    side_metadata(side_row(batch.kv, l.kv_extra, l, r), v.kv, M, kv_len, kv_off);
    // A document has valid q tokens iff it has valid kv tokens, so the compacted
    // offsets of both sides list the same documents in the same order.
    int64_t doc = 0;
    for (int64_t k = 0; k < M; ++k) {
      if (q_len[k] == 0) continue;
      md.cu_seqlens_q.push_back(md.cu_seqlens_q.back() + q_len[k]);
      md.cu_seqlens_kv.push_back(md.cu_seqlens_kv.back() + kv_len[k]);
      md.ragged_offsets_q.push_back(r * l.q_len + q_off[doc]);
      md.ragged_offsets_kv.push_back(r * l.kv_len + kv_off[doc]);
      ++doc;
    }
  }
  md.ragged_offsets_q.push_back(rows * l.q_len);
  md.ragged_offsets_kv.push_back(rows * l.kv_len);
  return md;
}

// Indices as positions and the trimmed runs' lengths as run lengths: for
// bottom-right, lq - a <= lkv - b is b <= a + (lkv - lq), the diagonal of DESIGN 4.
bool kernel_rule_allows(MaskKind mask, Window w, int64_t a, int64_t b, int64_t lq, int64_t lkv) {
  return pair_allowed(mask, w, /*with_window=*/true, a, b, lq, lkv);
}

Representability representability(const PackedBatch& batch) {
  auto checked = validate(batch);
  auto md = metadata(batch);
  if (!checked || !md) return {false, "invalid input"};
  const BatchLayout& l = checked.value();
  const int64_t M = l.max_segments;
  for (int64_t r = 0, s = 0; r < l.rows(); ++r) {
    const RowMask m = explicit_mask(batch, l, r, /*with_window=*/true);
    const RowView q = side_row(batch.q, l.q_extra, l, r);
    for (int64_t k = 0; k < M; ++k) {
      const int64_t lq = md->q_seqlens[r * M + k];
      if (lq == 0) continue;
      const int64_t lkv = md->cu_seqlens_kv[s + 1] - md->cu_seqlens_kv[s];
      const int64_t q0 = md->ragged_offsets_q[s] - r * l.q_len;
      const int64_t kv0 = md->ragged_offsets_kv[s] - r * l.kv_len;
      ++s;
      for (int64_t a = 0; a < lq; ++a)
        for (int64_t b = 0; b < lkv; ++b) {
          const bool rule = kernel_rule_allows(batch.mask, batch.window, a, b, lq, lkv);
          if (rule == m(q0 + a, kv0 + b)) continue;
          std::ostringstream os;
          os << "row " << r << ", document " << q.ids[q0 + a] << ": q token " << q0 + a
             << " and kv token " << kv0 + b << " are " << (m(q0 + a, kv0 + b) ? "" : "not ")
             << "attended in the token-level mask but the kernels' index rule says "
             << (rule ? "attend" : "do not attend");
          return {false, os.str()};
        }
    }
  }
  return {};
}

}  // namespace attn_oracle::ref
