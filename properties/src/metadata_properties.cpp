// metadata_properties.cpp: the properties of DESIGN section 4, written once
// against the metadata capability and run on every backend. Integers are compared
// exactly. Each property has a planted-bug backend in tests/planted/ that it must
// catch (tests/planted_bugs_test.cpp).
#include <sstream>
#include <tuple>

#include "attn_oracle/batch_transforms.hpp"
#include "attn_oracle/generators.hpp"
#include "attn_oracle/property_runner.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/validate.hpp"

namespace attn_oracle {
namespace {

Case metadata_case(const PackedBatch& batch) {
  Case c;
  c.op = CaseOp::metadata;
  c.batch = batch;
  return c;
}

Metadata metadata_or_fail(Backend& backend, const PackedBatch& batch) {
  Expected<Metadata> md = backend.metadata()->metadata(batch);
  if (!md) RC_FAIL("backend rejected a valid input: " + std::string(to_string(md.error().code)) + ": " + md.error().message);
  return md.value();
}

// "q_offsets[5]: backend 3, reference 4" for the first differing field, or "".
std::string first_difference(const Metadata& got, const Metadata& want) {
  if (got.extra != want.extra || got.batch != want.batch || got.max_segments != want.max_segments)
    return "shapes differ: extra " + shape_to_string(got.extra) + " vs " + shape_to_string(want.extra);
  const std::pair<const char*, std::pair<const std::vector<int64_t>*, const std::vector<int64_t>*>> fields[] = {
      {"q_seqlens", {&got.q_seqlens, &want.q_seqlens}},
      {"kv_seqlens", {&got.kv_seqlens, &want.kv_seqlens}},
      {"q_offsets", {&got.q_offsets, &want.q_offsets}},
      {"kv_offsets", {&got.kv_offsets, &want.kv_offsets}},
      {"cu_seqlens_q", {&got.cu_seqlens_q, &want.cu_seqlens_q}},
      {"cu_seqlens_kv", {&got.cu_seqlens_kv, &want.cu_seqlens_kv}},
      {"ragged_offsets_q", {&got.ragged_offsets_q, &want.ragged_offsets_q}},
      {"ragged_offsets_kv", {&got.ragged_offsets_kv, &want.ragged_offsets_kv}}};
  for (const auto& [name, pair] : fields) {
    const auto& [a, b] = pair;
    for (size_t i = 0; i < std::max(a->size(), b->size()); ++i) {
      if (i < a->size() && i < b->size() && (*a)[i] == (*b)[i]) continue;
      std::ostringstream os;
      os << name << "[" << i << "]: backend " << (i < a->size() ? std::to_string((*a)[i]) : "missing")
         << ", expected " << (i < b->size() ? std::to_string((*b)[i]) : "missing");
      return os.str();
    }
  }
  return "";
}

void matches_reference(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = *packed_batch();
  recorder.current(metadata_case(batch));
  const Metadata want = ref::metadata(batch).value();
  const std::string diff = first_difference(metadata_or_fail(backend, batch), want);
  if (!diff.empty()) RC_FAIL(diff);
}

void rejects_invalid_inputs(Backend& backend, CaseRecorder& recorder) {
  const InvalidBatch draw = *invalid_batch();
  recorder.current(metadata_case(draw.batch));
  const Expected<Metadata> got = backend.metadata()->metadata(draw.batch);
  if (got) RC_FAIL("accepted an input that must give " + std::string(to_string(draw.expected)));
  if (got.error().code != draw.expected)
    RC_FAIL("gave " + std::string(to_string(got.error().code)) + " (" + got.error().message +
            ") where " + std::string(to_string(draw.expected)) + " was due");
}

// Small arbitrary inputs, valid or not: the same metadata, or the same code.
void arbitrary_inputs_match_reference(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = *arbitrary_batch();
  recorder.current(metadata_case(batch));
  const Expected<Metadata> want = ref::metadata(batch), got = backend.metadata()->metadata(batch);
  RC_TAG(want ? std::string("valid") : std::string(to_string(want.error().code)));
  if (want && !got) RC_FAIL("rejected with " + std::string(to_string(got.error().code)) + " (" + got.error().message + "); the reference accepts it");
  if (!want && got) RC_FAIL("accepted; the reference gives " + std::string(to_string(want.error().code)) + " (" + want.error().message + ")");
  if (!want && got.error().code != want.error().code)
    RC_FAIL("gave " + std::string(to_string(got.error().code)) + " (" + got.error().message + "); the reference gives " +
            std::string(to_string(want.error().code)) + " (" + want.error().message + ")");
  if (want) {
    const std::string diff = first_difference(got.value(), want.value());
    if (!diff.empty()) RC_FAIL(diff);
  }
}

// Pairing: the s-th compacted entries of both sides are the same document of the
// same row; lengths agree with the per-slot seqlens; offsets stay inside rows.
void compacted_form_pairs_documents(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = *packed_batch();
  recorder.current(metadata_case(batch));
  const Metadata md = metadata_or_fail(backend, batch);
  const BatchLayout l = validate_shapes(batch).value();
  const int64_t M = l.max_segments, S = md.documents();
  RC_ASSERT(md.cu_seqlens_kv.size() == md.cu_seqlens_q.size());
  RC_ASSERT(md.ragged_offsets_q.size() == md.cu_seqlens_q.size());
  RC_ASSERT(md.ragged_offsets_kv.size() == md.cu_seqlens_q.size());
  RC_ASSERT(md.cu_seqlens_q.front() == 0 && md.cu_seqlens_kv.front() == 0);
  RC_ASSERT(md.ragged_offsets_q.back() == l.rows() * l.q_len);
  RC_ASSERT(md.ragged_offsets_kv.back() == l.rows() * l.kv_len);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t gq = md.ragged_offsets_q[s], gkv = md.ragged_offsets_kv[s];
    RC_ASSERT(gq >= 0 && gq < l.rows() * l.q_len && gkv >= 0 && gkv < l.rows() * l.kv_len);
    const int64_t row = gq / l.q_len;
    RC_ASSERT(gkv / l.kv_len == row);
    const RowView q = side_row(batch.q, l.q_extra, l, row), kv = side_row(batch.kv, l.kv_extra, l, row);
    const int64_t id = q.ids[gq % l.q_len];
    RC_ASSERT(id > 0 && kv.ids[gkv % l.kv_len] == id);
    RC_ASSERT(md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s] == md.q_seqlens[row * M + id - 1]);
    RC_ASSERT(md.cu_seqlens_kv[s + 1] - md.cu_seqlens_kv[s] == md.kv_seqlens[row * M + id - 1]);
  }
  for (auto [offsets, len] : {std::pair{&md.q_offsets, l.q_len}, std::pair{&md.kv_offsets, l.kv_len}})
    for (int64_t r = 0; r < l.rows(); ++r) {
      bool unused_seen = false;
      for (int64_t k = 0; k <= M; ++k) {
        const int64_t o = (*offsets)[r * (M + 1) + k];
        RC_ASSERT(o == -1 || (o >= 0 && o < len && !unused_seen));
        unused_seen = unused_seen || o == -1;
      }
    }
}

// Row b computed alone equals row b of the batch.
void rows_are_independent(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = *packed_batch();
  recorder.current(metadata_case(batch));
  const Metadata whole = metadata_or_fail(backend, batch);
  const int64_t B = whole.batch, M = whole.max_segments, slices = shape_product(whole.extra);
  for (int64_t b = 0; b < B; ++b) {
    const Metadata alone = metadata_or_fail(backend, keep_row(batch, b));
    for (int64_t e = 0; e < slices; ++e) {
      const int64_t r = e * B + b;
      RC_ASSERT(row_slice(alone.q_seqlens, M, e) == row_slice(whole.q_seqlens, M, r));
      RC_ASSERT(row_slice(alone.kv_seqlens, M, e) == row_slice(whole.kv_seqlens, M, r));
      RC_ASSERT(row_slice(alone.q_offsets, M + 1, e) == row_slice(whole.q_offsets, M + 1, r));
      RC_ASSERT(row_slice(alone.kv_offsets, M + 1, e) == row_slice(whole.kv_offsets, M + 1, r));
    }
  }
}

PackedBatch padding_kind(PackedBatch batch) {
  batch.mask = with_padding(batch.mask);
  return batch;
}

// Appending padding at the end of every row changes no length and no offset.
void trailing_padding_changes_nothing(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = padding_kind(*packed_batch());
  const Side side = *rc::gen::element(Side::q, Side::kv);
  const int64_t pads = *rc::gen::inRange<int64_t>(1, 5);
  const PackedBatch padded = pad_side(batch, side, {}, pads);
  recorder.current(metadata_case(padded));
  const Metadata before = metadata_or_fail(backend, batch), after = metadata_or_fail(backend, padded);
  RC_ASSERT(after.q_seqlens == before.q_seqlens);
  RC_ASSERT(after.kv_seqlens == before.kv_seqlens);
  RC_ASSERT(after.q_offsets == before.q_offsets);
  RC_ASSERT(after.kv_offsets == before.kv_offsets);
  RC_ASSERT(after.cu_seqlens_q == before.cu_seqlens_q);
  RC_ASSERT(after.cu_seqlens_kv == before.cu_seqlens_kv);
}

// Shifting row b of one side right by k padding tokens adds k to its offsets.
void shifting_a_row_shifts_its_offsets(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = padding_kind(*packed_batch());
  const Side side = *rc::gen::element(Side::q, Side::kv);
  const BatchLayout l = validate_shapes(batch).value();
  const int64_t b = *rc::gen::inRange<int64_t>(0, l.batch), k = *rc::gen::inRange<int64_t>(1, 4);
  std::vector<int64_t> leading(l.batch, 0);
  leading[b] = k;
  const PackedBatch shifted = pad_side(batch, side, leading, 0);
  recorder.current(metadata_case(shifted));
  const Metadata before = metadata_or_fail(backend, batch), after = metadata_or_fail(backend, shifted);
  RC_ASSERT(after.q_seqlens == before.q_seqlens);
  RC_ASSERT(after.kv_seqlens == before.kv_seqlens);
  const int64_t M = l.max_segments;
  for (int64_t r = 0; r < l.rows(); ++r) {
    for (auto [which, off_before, off_after] :
         {std::tuple{Side::q, &before.q_offsets, &after.q_offsets}, std::tuple{Side::kv, &before.kv_offsets, &after.kv_offsets}}) {
      std::vector<int64_t> want = row_slice(*off_before, M + 1, r);
      if (which == side && r % l.batch == b)
        for (int64_t& o : want) o = o < 0 ? o : o + k;
      RC_ASSERT(row_slice(*off_after, M + 1, r) == want);
    }
  }
}

// Batched over extra dims == every slice computed on its own.
void extra_dims_equal_slice_by_slice(Backend& backend, CaseRecorder& recorder) {
  const PackedBatch batch = *packed_batch();
  recorder.current(metadata_case(batch));
  const BatchLayout l = validate_shapes(batch).value();
  RC_CLASSIFY(!l.extra.empty(), "extra dims");
  const Metadata whole = metadata_or_fail(backend, batch);
  const int64_t B = l.batch, M = l.max_segments;
  for (int64_t e = 0; e < shape_product(l.extra); ++e) {
    const Metadata slice = metadata_or_fail(backend, extra_slice(batch, l, e));
    for (int64_t b = 0; b < B; ++b) {
      RC_ASSERT(row_slice(slice.q_seqlens, M, b) == row_slice(whole.q_seqlens, M, e * B + b));
      RC_ASSERT(row_slice(slice.kv_seqlens, M, b) == row_slice(whole.kv_seqlens, M, e * B + b));
      RC_ASSERT(row_slice(slice.q_offsets, M + 1, b) == row_slice(whole.q_offsets, M + 1, e * B + b));
      RC_ASSERT(row_slice(slice.kv_offsets, M + 1, b) == row_slice(whole.kv_offsets, M + 1, e * B + b));
    }
  }
}

}  // namespace

std::vector<PropertyDef> metadata_properties() {
  const Capability c = Capability::metadata;
  return {
      {"metadata/matchesReference", c, "every metadata integer equals the explicit-mask reference", matches_reference},
      {"metadata/rejectsInvalidInputsWithTheirCode", c, "an input with one violation gives exactly its error code", rejects_invalid_inputs},
      {"metadata/arbitraryInputsMatchReference", c, "small arbitrary inputs, valid or not, give the reference's metadata or error code", arbitrary_inputs_match_reference},
      {"metadata/compactedFormPairsDocuments", c, "the s-th compacted q and kv entries are the same document", compacted_form_pairs_documents},
      {"metadata/rowsAreIndependent", c, "a row computed alone equals that row of the batch", rows_are_independent},
      {"metadata/trailingPaddingChangesNothing", c, "appending padding changes no length or offset", trailing_padding_changes_nothing},
      {"metadata/shiftingARowShiftsItsOffsets", c, "k leading pads in a row add k to its offsets", shifting_a_row_shifts_its_offsets},
      {"metadata/extraDimsEqualSliceBySlice", c, "batched over extra dims equals slice by slice", extra_dims_equal_slice_by_slice},
  };
}

}  // namespace attn_oracle
