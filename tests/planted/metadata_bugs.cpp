// metadata_bugs.cpp: planted metadata bugs. Each is the reference with one
// real-world mistake applied, so that exactly that mistake is under test.
#include <algorithm>
#include <tuple>
#include <cstdint>

#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/properties/batch_transforms.hpp"
#include "attn_oracle/model/validate.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {
namespace {

// The reference's metadata of `batch` with `mistake` applied to it (rejected
// inputs pass through): the shape of most planted metadata bugs.
template <class Mistake>
Expected<Metadata> reference_with(const PackedBatch& batch, Mistake mistake) {
  auto md = ref::metadata(batch);
  if (!md) return md;
  Metadata m = md.value();
  mistake(m, validate_shapes(batch).value());
  return m;
}

// Offsets taken as the running sum of the lengths (what cu_seqlens would be),
// as if documents started at token 0 and had no gaps: ignores leading padding.
Expected<Metadata> offsets_from_seqlens(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout&) {
    const int64_t M = m.max_segments;
    for (auto [lens, offs] : {std::pair{&m.q_seqlens, &m.q_offsets}, std::pair{&m.kv_seqlens, &m.kv_offsets}})
      for (size_t r = 0; r * M < lens->size(); ++r) {
        int64_t start = 0, next = 0;
        for (int64_t k = 0; k < M; ++k) {
          if ((*lens)[r * M + k] == 0) continue;
          (*offs)[r * (M + 1) + next++] = start;
          start += (*lens)[r * M + k];
        }
      }
  });
}

// Flattened indexing: every row reads the positions of row 0.
Expected<Metadata> row0_positions(const PackedBatch& batch) {
  PackedBatch b = batch;
  for (PackedSide* s : {&b.q, &b.kv}) {
    const int64_t len = s->segment_pos.shape.back();
    for (size_t i = 0; i < s->segment_pos.data.size(); ++i) s->segment_pos.data[i] = s->segment_pos.data[i % std::max<int64_t>(1, len)];
  }
  return ref::metadata(b);
}

// Row r's last document with valid tokens: its slot and its index among the
// row's compacted offsets; slot -1 when the row has none.
std::pair<int64_t, int64_t> last_document(const std::vector<int64_t>& seqlens, int64_t M, int64_t r) {
  int64_t slot = -1, docs = 0;
  for (int64_t k = 0; k < M; ++k)
    if (seqlens[r * M + k] > 0) slot = k, ++docs;
  return {slot, docs - 1};
}

// Lengths from "next start - this start" with the last document ending at T:
// the last document of a row absorbs the trailing padding.
Expected<Metadata> last_document_to_row_end(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout& l) {
    const int64_t M = m.max_segments;
    for (auto [lens, offs, len] : {std::tuple{&m.q_seqlens, &m.q_offsets, l.q_len}, std::tuple{&m.kv_seqlens, &m.kv_offsets, l.kv_len}})
      for (int64_t r = 0; r < l.rows(); ++r) {
        const auto [slot, doc] = last_document(*lens, M, r);
        if (slot >= 0) (*lens)[r * M + slot] = len - (*offs)[r * (M + 1) + doc];
      }
  });
}

// Cross-attention compaction that strides kv rows by Tq.
Expected<Metadata> kv_ragged_with_q_stride(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout& l) {
    for (size_t s = 0; s + 1 < m.ragged_offsets_kv.size(); ++s) {
      const int64_t g = m.ragged_offsets_kv[s];
      m.ragged_offsets_kv[s] = (g / l.kv_len) * l.q_len + g % l.kv_len;
    }
  });
}

// The contiguity check only compares with the previous *document*, so an id
// that reappears after padding is accepted (here: its second run is dropped).
Expected<Metadata> reappear_after_padding_accepted(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (md || md.error().code != ErrorCode::noncontiguous_segment) return md;
  PackedBatch b = batch;
  for (PackedSide* s : {&b.q, &b.kv}) {
    const int64_t len = s->segment_ids.shape.back();
    for (size_t r = 0; len > 0 && r * len < s->segment_ids.data.size(); ++r) {
      int64_t* ids = s->segment_ids.data.data() + r * len;
      int64_t previous_doc = 0;
      for (int64_t t = 0; t < len; ++t) {
        if (ids[t] == 0 || (t > 0 && ids[t - 1] == ids[t])) continue;
        if (ids[t] == previous_doc && t > 0 && ids[t - 1] == 0) {
          for (int64_t u = t; u < len && ids[u] == previous_doc; ++u) ids[u] = 0;
          continue;
        }
        previous_doc = ids[t];
      }
    }
  }
  return ref::metadata(b);
}

// Every token of a document counted: no causal / bottom-right trimming.
Expected<Metadata> no_trimming(const PackedBatch& batch) {
  if (auto e = validate(batch); !e) return e.error();
  PackedBatch b = batch;
  b.mask = allows_padding(batch.mask) ? MaskKind::padding : MaskKind::no_mask;
  return ref::metadata(b);
}

// kv read at broadcast slice e through `kv_slice(e, kv_slices)` instead of numpy broadcasting.
Expected<Metadata> kv_slices_misread(const PackedBatch& batch, int64_t (*kv_slice)(int64_t, int64_t)) {
  auto checked = validate(batch);
  if (!checked) return checked.error();
  const BatchLayout l = checked.value();
  const int64_t kv_slices = shape_product(l.kv_extra), slices = shape_product(l.extra);
  if (kv_slices == 1) return ref::metadata(batch);
  PackedBatch b = batch;
  const int64_t len = l.kv_len;
  Shape shape = l.extra;
  shape.push_back(l.batch);
  shape.push_back(len);
  b.kv.segment_ids = IntArray::filled(shape, 0);
  const bool full_pos = batch.kv.segment_pos.shape == batch.kv.segment_ids.shape;
  if (full_pos) b.kv.segment_pos = IntArray::filled(shape, 0);
  for (int64_t e = 0; e < slices; ++e)
    for (int64_t row = 0; row < l.batch; ++row) {
      const int64_t from = (kv_slice(e, kv_slices) * l.batch + row) * len, to = (e * l.batch + row) * len;
      std::copy_n(batch.kv.segment_ids.data.begin() + from, len, b.kv.segment_ids.data.begin() + to);
      if (full_pos) std::copy_n(batch.kv.segment_pos.data.begin() + from, len, b.kv.segment_pos.data.begin() + to);
    }
  return ref::metadata(b);
}

// The kv extra dims' product taken as 1: every broadcast slice reads kv slice 0.
Expected<Metadata> kv_extra_dims_ignored(const PackedBatch& batch) {
  return kv_slices_misread(batch, [](int64_t, int64_t) -> int64_t { return 0; });
}

// Broadcasting as if size-1 dims could only lead ([1, 3] against [2, 3]): the
// kv slice of flat slice e taken as e mod (kv slices), which is wrong once a
// size-1 dim sits after a larger one ([2, 1] against [2, 3]).
Expected<Metadata> size_one_dims_only_leading(const PackedBatch& batch) {
  return kv_slices_misread(batch, [](int64_t e, int64_t kv_slices) { return e % kv_slices; });
}

// Lengths from "next start - this start" with the end read at index -1 of the
// flattened batch: the last document of every row runs to the end of the batch.
Expected<Metadata> last_doc_end_wraps_to_batch_end(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout& l) {
    const int64_t M = m.max_segments;
    for (int64_t r = 0; r < l.rows(); ++r) {
      const auto [slot, doc] = last_document(m.q_seqlens, M, r);
      if (slot >= 0) m.q_seqlens[r * M + slot] = l.rows() * l.q_len - (r * l.q_len + m.q_offsets[r * (M + 1) + doc]);
    }
  });
}

// Bottom-right trimming with `<` for `<=`: one query too many survives in every
// document that trimming shortens.
Expected<Metadata> bottom_right_off_by_one(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (!md || !is_bottom_right(batch.mask)) return md;
  Metadata m = md.value();
  const BatchLayout l = validate_shapes(batch).value();
  const int64_t M = m.max_segments;
  for (int64_t r = 0; r < l.rows(); ++r) {
    const RowView q = side_row(batch.q, l.q_extra, l, r);
    for (int64_t k = 0, doc = 0; k < M; ++k) {
      if (m.q_seqlens[r * M + k] == 0) continue;
      int64_t run = 0;
      for (int64_t t = 0; t < q.len; ++t) run += q.ids[t] == k + 1;
      int64_t& offset = m.q_offsets[r * (M + 1) + doc++];
      if (m.q_seqlens[r * M + k] < run) ++m.q_seqlens[r * M + k], --offset;
    }
  }
  return m;
}

// Extra shapes compared by rank only: q [2] with kv [3] is accepted, and kv's
// extra dims are then read as if they broadcast (slice 0).
Expected<Metadata> non_broadcasting_extra_dims_accepted(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (md || md.error().code != ErrorCode::extra_dims_mismatch) return md;
  PackedBatch b = batch;
  for (PackedSide* s : {&b.kv}) {
    const Shape& shape = s->segment_ids.shape;
    const int64_t row_elems = shape[shape.size() - 2] * shape.back();
    s->segment_ids = IntArray({shape[shape.size() - 2], shape.back()}, std::vector<int64_t>(s->segment_ids.data.begin(), s->segment_ids.data.begin() + row_elems));
    const Shape& ps = s->segment_pos.shape;
    s->segment_pos = IntArray({ps[ps.size() - 2], ps.back()}, std::vector<int64_t>(s->segment_pos.data.begin(), s->segment_pos.data.begin() + row_elems));
  }
  return ref::metadata(b);
}

// Validation in the wrong order: ids above M are reported before ids that
// reappear, so a row with both gives too_many_segments.
Expected<Metadata> too_many_before_noncontiguous(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (md || md.error().code != ErrorCode::noncontiguous_segment) return md;
  for (const PackedSide* s : {&batch.q, &batch.kv})
    for (int64_t id : s->segment_ids.data)
      if (id > batch.max_segments) return Error{ErrorCode::too_many_segments, "id " + std::to_string(id) + " exceeds max_segments"};
  return md;
}

// Positions stored as int32 (a kernel's int position buffer): a position past
// INT32_MAX wraps, usually to a negative one.
Expected<Metadata> positions_as_int32(const PackedBatch& batch) {
  PackedBatch b = batch;
  for (PackedSide* s : {&b.q, &b.kv})
    for (int64_t& p : s->segment_pos.data) p = static_cast<int32_t>(p);
  return ref::metadata(b);
}

// Validation compared positions with `<` where `<=` was meant: a position equal
// to the previous one inside a document is accepted (and read as one past it).
Expected<Metadata> equal_positions_accepted(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (md || md.error().code != ErrorCode::positions_not_increasing) return md;
  PackedBatch b = batch;
  bool equal_only = true;
  for (PackedSide* s : {&b.q, &b.kv}) {
    const int64_t len = s->segment_ids.shape.back();
    if (len == 0 || s->segment_pos.data.size() != s->segment_ids.data.size()) return md;
    for (size_t t = 1; t < s->segment_pos.data.size(); ++t) {
      if (t % len == 0 || s->segment_ids.data[t] != s->segment_ids.data[t - 1] || s->segment_ids.data[t] == 0) continue;
      int64_t& p = s->segment_pos.data[t];
      equal_only = equal_only && p >= s->segment_pos.data[t - 1];
      p = std::max(p, s->segment_pos.data[t - 1] + 1);
    }
  }
  return equal_only ? ref::metadata(b) : md;
}

// A document's length runs to the next document's start: the padding between
// two documents of a row is counted into the first (trailing padding is not).
Expected<Metadata> gap_counted_in_previous_document(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout& l) {
    const int64_t M = m.max_segments;
    for (Side side : {Side::q, Side::kv})
      for (int64_t r = 0; r < l.rows(); ++r) {
        const RowView row = side_row(side == Side::q ? batch.q : batch.kv, side == Side::q ? l.q_extra : l.kv_extra, l, r);
        std::vector<int64_t>& lens = side == Side::q ? m.q_seqlens : m.kv_seqlens;
        for (int64_t k = 0; k < M; ++k) {
          int64_t last = -1;  // the document's last token in the row
          for (int64_t t = 0; t < row.len; ++t)
            if (row.ids[t] == k + 1) last = t;
          if (last < 0 || lens[r * M + k] == 0) continue;
          int64_t next = last + 1;
          while (next < row.len && row.ids[next] == 0) ++next;
          if (next < row.len) lens[r * M + k] += next - last - 1;
        }
      }
  });
}

// Each side's lengths counted from its own ids (a bincount per side): a
// document with tokens on one side only keeps them, although a document with no
// keys (or no queries) has no valid tokens on either side.
Expected<Metadata> one_sided_document_counted(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout& l) {
    const int64_t M = m.max_segments;
    for (int64_t r = 0; r < l.rows(); ++r) {
      const RowView q = side_row(batch.q, l.q_extra, l, r), kv = side_row(batch.kv, l.kv_extra, l, r);
      auto count = [](const RowView& row, int64_t id) { return std::count(row.ids, row.ids + row.len, id); };
      for (int64_t k = 0; k < M; ++k) {
        const int64_t nq = count(q, k + 1), nkv = count(kv, k + 1);
        if ((nq == 0) == (nkv == 0)) continue;
        m.q_seqlens[r * M + k] = nq, m.kv_seqlens[r * M + k] = nkv;
      }
    }
  });
}

// cu_seqlens_kv started at the first document's begin instead of 0 (the kv
// buffer's `cu_seqlens_k[0] = first_document_begin`, in a packed batch): the
// first document's keys are cut short by its leading padding.
Expected<Metadata> cu_seqlens_kv_from_first_document_begin(const PackedBatch& batch) {
  auto md = ref::metadata(batch);
  if (!md || md.value().documents() == 0) return md;
  Metadata m = md.value();
  m.cu_seqlens_kv[0] = m.ragged_offsets_kv[0];
  return m;
}

// The prefix sums of the kv lengths leave out each row's last key: the last
// document of every row loses its tail (an exclusive end taken as inclusive).
Expected<Metadata> last_key_of_each_row_dropped(const PackedBatch& batch) {
  return reference_with(batch, [&](Metadata& m, const BatchLayout&) {
    const int64_t tkv = validate_shapes(batch).value().kv_len, S = m.documents();
    int64_t dropped = 0;
    for (int64_t s = 0; s < S; ++s) {
      const bool last_of_row = s + 1 == S || m.ragged_offsets_kv[s + 1] / tkv != m.ragged_offsets_kv[s] / tkv;
      const int64_t length = m.cu_seqlens_kv[s + 1] - m.cu_seqlens_kv[s];
      m.cu_seqlens_kv[s] -= dropped;
      if (last_of_row && length > 0) ++dropped;
    }
    m.cu_seqlens_kv[S] -= dropped;
  });
}

}  // namespace

std::vector<PlantedBug> metadata_bugs() {
  auto bug = [](std::string name, std::string what, std::string property, Expected<Metadata> (*f)(const PackedBatch&)) {
    return PlantedBug{name, property, what, [name, f] { return metadata_backend("planted-" + name, f); }};
  };
  // Its smallest case is [2, 1] against [2, 2]: four broadcast rows.
  auto with_rows = [](int64_t rows, PlantedBug b) {
    b.max_shrunk_rows = rows;
    return b;
  };
  auto in_extra_dims = [](PlantedBug b) {
    b.needs_extra_dims = true;
    return b;
  };
  return {
      bug("offsets_from_seqlens", "offsets taken as the running sum of lengths, ignoring leading padding and gaps", "metadata/shiftingARowShiftsItsOffsets", offsets_from_seqlens),
      bug("row0_positions", "flattened indexing: every row read the positions of row 0", "metadata/rowsAreIndependent", row0_positions),
      bug("last_document_to_row_end", "lengths from next-start minus start with the last document ending at T: trailing padding counted", "metadata/trailingPaddingChangesNothing", last_document_to_row_end),
      bug("kv_ragged_with_q_stride", "cross-attention compaction strided kv rows by Tq", "metadata/compactedFormPairsDocuments", kv_ragged_with_q_stride),
      bug("reappear_after_padding_accepted", "an id reappearing after padding was accepted as a new document instead of noncontiguous_segment", "metadata/rejectsInvalidInputsWithTheirCode", reappear_after_padding_accepted),
      bug("no_trimming", "every token of a document counted: no causal / bottom-right trimming", "metadata/matchesReference", no_trimming),
      bug("last_doc_end_wraps_to_batch_end", "the end of the last document read at index -1 of the flattened batch", "metadata/matchesReference", last_doc_end_wraps_to_batch_end),
      bug("bottom_right_off_by_one", "bottom-right trimming compared with < instead of <=: one query too many", "metadata/matchesReference", bottom_right_off_by_one),
      in_extra_dims(bug("non_broadcasting_extra_dims_accepted", "q and kv extra dims that do not broadcast accepted silently", "metadata/rejectsInvalidInputsWithTheirCode", non_broadcasting_extra_dims_accepted)),
      bug("too_many_before_noncontiguous", "validation order wrong: too_many_segments reported before noncontiguous_segment", "metadata/arbitraryInputsMatchReference", too_many_before_noncontiguous),
      bug("equal_positions_accepted", "positions compared with < for <=: an equal position inside a document accepted", "metadata/rejectsInvalidInputsWithTheirCode", equal_positions_accepted),
      bug("gap_counted_in_previous_document", "a length taken as next start minus own start: padding between documents counted", "metadata/matchesReference", gap_counted_in_previous_document),
      bug("one_sided_document_counted", "lengths counted per side: a document with tokens on one side only kept them", "metadata/matchesReference", one_sided_document_counted),
      bug("cu_seqlens_kv_from_first_document_begin", "cu_seqlens_kv started at the first document's begin, not 0", "metadata/drivesAttentionLikeTheReference", cu_seqlens_kv_from_first_document_begin),
      bug("last_key_of_each_row_dropped", "the kv prefix sums left out each row's last key", "metadata/drivesAttentionLikeTheReference", last_key_of_each_row_dropped),
      bug("positions_as_int32", "positions stored as int32: one past INT32_MAX wraps", "metadata/extremePositionsChangeNothing", positions_as_int32),
      with_rows(4, in_extra_dims(bug("size_one_dims_only_leading", "broadcast as if size-1 extra dims only lead: kv slice = flat slice mod kv slices", "metadata/extraDimsEqualSliceBySlice", size_one_dims_only_leading))),
      in_extra_dims(bug("kv_extra_dims_ignored", "kv extra dims product taken as 1: every broadcast slice read kv slice 0", "metadata/extraDimsEqualSliceBySlice", kv_extra_dims_ignored)),
  };
}

}  // namespace attn_oracle::planted
