// reference_metadata.cpp: explicit masks (docs/semantics.md#2-the-attention-mask) and the metadata
// read off them (docs/semantics.md#3-metadata). See attn_oracle/reference/metadata.hpp for the contract.
#include "attn_oracle/reference/metadata.hpp"

#include <algorithm>
#include <sstream>

#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::ref {
namespace {

// Number of tokens of each id in a row ("rl" of docs/semantics.md#2-the-attention-mask), per token.
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

// The non-segment terms of docs/semantics.md#2-the-attention-mask for one (query, key) pair: causal
// or bottom-right alignment, then the window. The one place the reference spells
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
  std::vector<int64_t> cover(m.kv_len + 1, 0);  // +1 where a run starts, -1 where it ends
  for (int64_t i = 0; i < m.q_len; ++i) v.q[i] = m.attends(i);
  for (const KeyRun& run : m.runs) ++cover[run.first], --cover[run.end];
  for (int64_t j = 0, runs = 0; j < m.kv_len; ++j) v.kv[j] = (runs += cover[j]) > 0;
  return v;
}

// The maximal runs of one id of a row (padding left out), by id and then in
// row order: the keys a query of that id may attend.
struct IdRun {
  int64_t id;
  KeyRun tokens;
};

std::vector<IdRun> runs_by_id(const RowView& row) {
  std::vector<IdRun> out;
  for (int64_t t = 0; t < row.len;) {
    int64_t end = t;
    while (end < row.len && row.ids[end] == row.ids[t]) ++end;
    if (row.ids[t] != 0) out.push_back(IdRun{row.ids[t], KeyRun{t, end}});
    t = end;
  }
  std::stable_sort(out.begin(), out.end(), [](const IdRun& a, const IdRun& b) { return a.id < b.id; });
  return out;
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

bool RowMask::operator()(int64_t i, int64_t j) const {
  for (const KeyRun* run = keys_begin(i); run != keys_end(i); ++run)
    if (j >= run->first && j < run->end) return true;
  return false;
}

std::vector<char> RowMask::dense() const {
  std::vector<char> out(q_len * kv_len, 0);
  for (int64_t i = 0; i < q_len; ++i)
    for (const KeyRun* run = keys_begin(i); run != keys_end(i); ++run)
      std::fill(out.begin() + i * kv_len + run->first, out.begin() + i * kv_len + run->end, 1);
  return out;
}

RowMask explicit_mask(const PackedBatch& batch, const BatchLayout& layout, int64_t row,
                      bool with_window) {
  const RowView q = side_row(batch.q, layout.q_extra, layout, row);
  const RowView kv = side_row(batch.kv, layout.kv_extra, layout, row);
  const std::vector<int64_t> rl_q = run_lengths(q), rl_kv = run_lengths(kv);
  const std::vector<IdRun> kv_runs = runs_by_id(kv);
  RowMask m{q.len, kv.len, {}, {}};
  m.run_start.reserve(q.len + 1);
  for (int64_t i = 0; i < q.len; ++i) {
    m.run_start.push_back(static_cast<int64_t>(m.runs.size()));
    if (q.ids[i] == 0) continue;  // padding attends nothing
    const auto first = std::lower_bound(kv_runs.begin(), kv_runs.end(), q.ids[i],
                                        [](const IdRun& r, int64_t id) { return r.id < id; });
    for (auto r = first; r != kv_runs.end() && r->id == q.ids[i]; ++r)
      for (int64_t j = r->tokens.first; j < r->tokens.end; ++j) {
        if (!pair_allowed(batch.mask, batch.window, with_window, q.pos[i], kv.pos[j], rl_q[i], rl_kv[j])) continue;
        const bool extends = static_cast<int64_t>(m.runs.size()) > m.run_start.back() && m.runs.back().end == j;
        if (extends) ++m.runs.back().end;
        else m.runs.push_back(KeyRun{j, j + 1});
      }
  }
  m.run_start.push_back(static_cast<int64_t>(m.runs.size()));
  return m;
}

Expected<Metadata> metadata(const PackedBatch& batch) {
  auto checked = validate(batch);
  if (!checked) return checked.error();
  const BatchLayout& l = checked.value();
  MemoryNeed need;
  need.add("the explicit mask of one row: a run of keys a query, and the flags of either side", {l.q_len + l.kv_len, 3 * 8});
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
// bottom-right, lq - a <= lkv - b is b <= a + (lkv - lq), the diagonal of
// docs/semantics.md#the-kernels-index-rule-and-representability.
bool kernel_rule_allows(MaskKind mask, Window w, int64_t a, int64_t b, int64_t lq, int64_t lkv) {
  return pair_allowed(mask, w, /*with_window=*/true, a, b, lq, lkv);
}

Representability representability(const PackedBatch& batch) {
  auto checked = validate(batch);
  auto md = metadata(batch);
  if (!checked || !md) return {false, "invalid input"};
  const BatchLayout& l = checked.value();
  const int64_t M = l.max_segments;
  std::vector<char> flags;  // one query's mask entries over its document's trimmed kv run
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
      for (int64_t a = 0; a < lq; ++a) {
        flags.assign(lkv, 0);
        for (const KeyRun* run = m.keys_begin(q0 + a); run != m.keys_end(q0 + a); ++run)
          for (int64_t j = std::max(run->first, kv0); j < std::min(run->end, kv0 + lkv); ++j) flags[j - kv0] = 1;
        for (int64_t b = 0; b < lkv; ++b) {
          const bool rule = kernel_rule_allows(batch.mask, batch.window, a, b, lq, lkv);
          if (rule == bool(flags[b])) continue;
          std::ostringstream os;
          os << "row " << r << ", document " << q.ids[q0 + a] << ": q token " << q0 + a
             << " and kv token " << kv0 + b << " are " << (flags[b] ? "" : "not ")
             << "attended in the token-level mask but the kernels' index rule says "
             << (rule ? "attend" : "do not attend");
          return {false, os.str()};
        }
      }
    }
  }
  return {};
}

}  // namespace attn_oracle::ref
