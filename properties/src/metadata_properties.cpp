// metadata_properties.cpp: the properties of docs/semantics.md#3-metadata, written once
// against the metadata capability and run on every backend. Integers are compared
// exactly. Each property is a draw (a metadata case, plus the side and padding a
// metamorphic property adds, recorded in the case) and a check on the case, so
// a counterexample replays the exact check. Each has a planted-bug backend in
// tests/planted/ that it must catch (tests/planted_bugs_test.cpp).
#include <algorithm>
#include <sstream>
#include <tuple>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/metadata_difference.hpp"
#include "attn_oracle/properties/batch_transforms.hpp"
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/independent_rules.hpp"
#include "attn_oracle/properties/metadata_through_attention.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

using nlohmann::json;

Case metadata_case(const PackedBatch& batch) { return Case{MetadataCase{batch}, {}, {}, {}}; }

const PackedBatch& batch_of(const Case& c) { return payload_of<MetadataCase>(c).batch; }

std::string describe(const Error& e) { return std::string(to_string(e.code)) + " (" + e.message + ")"; }

// The backend's metadata of a valid batch (drawn or transformed); a decline
// when the backend does not take it (backend_calls.hpp).
Metadata metadata_or_fail(Backend& backend, const PackedBatch& batch, CheckRecord& record) {
  Expected<Metadata> md = call_metadata(backend, batch, record);
  if (!md) fail_with("backend rejected a valid input: ", md.error());
  return md.value();
}

// A drawn case is valid; a replayed one may not be, and only the code properties
// judge those. Validity is what the independent rules and the model's validator
// agree on (independent_rules.hpp), or the case fails.
BatchLayout valid_layout_or_decline(const PackedBatch& batch, CheckRecord& record) {
  if (const auto v = agreed_batch_verdict(batch, record))
    decline_case("not a valid input (" + v->describe() + "); rejectsInvalidInputsWithTheirCode judges those");
  return reference_calls().validate_batch(batch).value();
}


std::string vec(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// `what` of row r, two ways: equal, or a failure naming both.
void require_same_row(const std::string& what, const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                      const std::string& got_name, const std::string& want_name) {
  if (got != want) fail_case(what + ": " + got_name + " " + vec(got) + ", " + want_name + " " + vec(want));
}

// The four per-row fields of row `r_got` of `got` and row `r_want` of `want`.
void require_same_rows(const std::string& where, const Metadata& got, int64_t r_got, const Metadata& want,
                       int64_t r_want, const std::string& got_name, const std::string& want_name) {
  const int64_t M = want.max_segments;
  require_same_row("q_seqlens of " + where, row_slice(got.q_seqlens, M, r_got), row_slice(want.q_seqlens, M, r_want),
                   got_name, want_name);
  require_same_row("kv_seqlens of " + where, row_slice(got.kv_seqlens, M, r_got),
                   row_slice(want.kv_seqlens, M, r_want), got_name, want_name);
  require_same_row("q_offsets of " + where, row_slice(got.q_offsets, M + 1, r_got),
                   row_slice(want.q_offsets, M + 1, r_want), got_name, want_name);
  require_same_row("kv_offsets of " + where, row_slice(got.kv_offsets, M + 1, r_got),
                   row_slice(want.kv_offsets, M + 1, r_want), got_name, want_name);
}

// The side a padding transformation goes into: q, kv, or both (a
// self-attention backend takes q and kv as one batch).
std::vector<Side> sides_of(const Case& c) {
  const std::string side = drawn_value<std::string>(c, "side", "q");
  if (side == "both") return {Side::q, Side::kv};
  return {side == "kv" ? Side::kv : Side::q};
}
const char* side_name(Side s) { return s == Side::q ? "q" : "kv"; }
std::string sides_name(const Case& c) {
  const std::string side = drawn_value<std::string>(c, "side", "q");
  return side == "both" ? "q and kv sides" : side + " side";
}
bool shifts(const std::vector<Side>& sides, Side s) { return std::find(sides.begin(), sides.end(), s) != sides.end(); }

// ---------------------------------------------------------------- the properties

void matches_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  valid_layout_or_decline(batch, record);
  const std::string diff = first_difference(metadata_or_fail(backend, batch, record), ref::metadata(batch).value());
  if (!diff.empty()) fail_case(diff);
}

Case draw_invalid(const DrawContext& context) {
  const InvalidBatch draw = *invalid_batch(context.domain, context.profile);
  return with_drawn(metadata_case(draw.batch), {{"expected_code", std::string(to_string(draw.expected))}});
}

// The code is the one the generator planted (drawn); a replayed case without one
// is held to the code of the independent rules, which the model's validator must
// give too (independent_rules.hpp; a generator's tag and the rules agree on
// every draw, tests/independent_rules_test.cpp).
void rejects_invalid_inputs(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  const std::optional<RuleVerdict> rules = agreed_batch_verdict(batch, record);
  const std::string fallback = rules ? std::string(to_string(rules->code)) : "";
  const std::string expected = drawn_value<std::string>(c, "expected_code", fallback);
  if (expected.empty()) decline_case("a valid input: matchesReference judges those");
  const Expected<Metadata> got = call_metadata(backend, batch, record);
  if (got) fail_case("accepted an input that must give " + expected);
  if (to_string(got.error().code) != expected)
    fail_with("gave ", got.error(), " where " + expected + " was due");
}

// Small arbitrary inputs, valid or not: the same metadata, or the same code.
void arbitrary_inputs_match_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  agreed_batch_verdict(batch, record);
  const Expected<Metadata> want = ref::metadata(batch), got = call_metadata(backend, batch, record);
  record.classify(true, want ? std::string("valid") : std::string(to_string(want.error().code)));
  if (want && !got) fail_case("rejected with " + describe(got.error()) + "; the reference accepts it");
  if (!want && got) fail_with("accepted; the reference gives ", want.error());
  if (!want && got.error().code != want.error().code)
    fail_case("gave " + describe(got.error()) + "; the reference gives " + describe(want.error()));
  if (want) {
    const std::string diff = first_difference(got.value(), want.value());
    if (!diff.empty()) fail_case(diff);
  }
}

// Pairing: the s-th compacted entries of both sides are the same document of the
// same row; lengths agree with the per-slot seqlens; offsets stay inside rows.
void compacted_form_pairs_documents(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  const BatchLayout l = valid_layout_or_decline(batch, record);
  const Metadata md = metadata_or_fail(backend, batch, record);
  const int64_t M = l.max_segments, S = md.documents(), rows = l.rows();
  const size_t entries = md.cu_seqlens_q.size();
  require(md.cu_seqlens_kv.size() == entries && md.ragged_offsets_q.size() == entries &&
              md.ragged_offsets_kv.size() == entries,
          "cu_seqlens_q " + vec(md.cu_seqlens_q) + ", cu_seqlens_kv " + vec(md.cu_seqlens_kv) +
              ", ragged_offsets_q " + vec(md.ragged_offsets_q) + ", ragged_offsets_kv " +
              vec(md.ragged_offsets_kv) + " differ in length");
  require(md.cu_seqlens_q.front() == 0 && md.cu_seqlens_kv.front() == 0,
          "cu_seqlens_q " + vec(md.cu_seqlens_q) + ", cu_seqlens_kv " + vec(md.cu_seqlens_kv) + ": must start at 0");
  require(md.ragged_offsets_q.back() == rows * l.q_len && md.ragged_offsets_kv.back() == rows * l.kv_len,
          "ragged_offsets_q " + vec(md.ragged_offsets_q) + ", ragged_offsets_kv " + vec(md.ragged_offsets_kv) +
              ": must end at the token counts " + std::to_string(rows * l.q_len) + " and " +
              std::to_string(rows * l.kv_len));
  for (int64_t s = 0; s < S; ++s) {
    const std::string at = "compacted entry " + std::to_string(s) + ": ";
    const int64_t gq = md.ragged_offsets_q[s], gkv = md.ragged_offsets_kv[s];
    require(gq >= 0 && gq < rows * l.q_len && gkv >= 0 && gkv < rows * l.kv_len,
            at + "ragged offsets " + std::to_string(gq) + ", " + std::to_string(gkv) + " outside the tokens");
    const int64_t row = gq / l.q_len;
    require(gkv / l.kv_len == row, at + "q token " + std::to_string(gq) + " is in row " + std::to_string(row) +
                                       ", kv token " + std::to_string(gkv) + " in row " + std::to_string(gkv / l.kv_len));
    const RowView q = side_row(batch.q, l.q_extra, l, row), kv = side_row(batch.kv, l.kv_extra, l, row);
    const int64_t id = q.ids[gq % l.q_len];
    require(id > 0 && kv.ids[gkv % l.kv_len] == id, at + "q token " + std::to_string(gq) + " has id " +
                                                        std::to_string(id) + ", kv token " + std::to_string(gkv) +
                                                        " id " + std::to_string(kv.ids[gkv % l.kv_len]));
    const int64_t lq = md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s], lkv = md.cu_seqlens_kv[s + 1] - md.cu_seqlens_kv[s];
    require(lq == md.q_seqlens[row * M + id - 1] && lkv == md.kv_seqlens[row * M + id - 1],
            at + "lengths " + std::to_string(lq) + ", " + std::to_string(lkv) + " from cu_seqlens, but q_seqlens " +
                std::to_string(md.q_seqlens[row * M + id - 1]) + ", kv_seqlens " +
                std::to_string(md.kv_seqlens[row * M + id - 1]) + " for document " + std::to_string(id) + " of row " +
                std::to_string(row));
  }
  for (auto [name, offsets, len] : {std::tuple{"q_offsets", &md.q_offsets, l.q_len},
                                    std::tuple{"kv_offsets", &md.kv_offsets, l.kv_len}})
    for (int64_t r = 0; r < rows; ++r) {
      bool unused_seen = false;
      for (int64_t k = 0; k <= M; ++k) {
        const int64_t o = (*offsets)[r * (M + 1) + k];
        require(o == -1 || (o >= 0 && o < len && !unused_seen),
                std::string(name) + " of row " + std::to_string(r) + " " + vec(row_slice(*offsets, M + 1, r)) +
                    ": starts inside the row, then -1 only");
        unused_seen = unused_seen || o == -1;
      }
    }
}

// Row b computed alone equals row b of the batch.
void rows_are_independent(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  valid_layout_or_decline(batch, record);
  const Metadata whole = metadata_or_fail(backend, batch, record);
  const int64_t B = whole.batch, slices = shape_product(whole.extra);
  for (int64_t b = 0; b < B; ++b) {
    const Metadata alone = metadata_or_fail(backend, keep_row(batch, b), record);
    for (int64_t e = 0; e < slices; ++e)
      require_same_rows("row " + std::to_string(b) + " (slice " + std::to_string(e) + ")", alone, e, whole,
                        e * B + b, "computed alone", "in the batch");
  }
}

PackedBatch padding_kind(PackedBatch batch) {
  batch.mask = with_padding(batch.mask);
  return batch;
}

// A padding-kind batch (the transformations insert padding), or a decline.
const PackedBatch& padding_batch_of(const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  valid_layout_or_decline(batch, record);
  if (!allows_padding(batch.mask)) decline_case("mask " + std::string(to_string(batch.mask)) + " allows no padding");
  return batch;
}

// Valid batches for the metadata properties: 2 draws in 24 in the kernel-tile
// mode (generators.hpp), rows of up to kMetadataLongRow tokens: several of the
// token-parallel metadata kernels' blocks of a few hundred to a thousand tokens.
constexpr int kMetadataLongRow = 4100;
BatchOptions metadata_options(const DrawContext& context) {
  BatchOptions options = within(context.domain);
  options.profile = context.profile;
  options.kernel_tile_weight = 2;
  options.long_row_len = kMetadataLongRow;
  return options;
}

// A domain that lists its mask kinds gets its padding kinds drawn (not every
// kind then turned into its padding twin, which it may not take).
Case draw_padding_batch(const DrawContext& context, json drawn) {
  BatchOptions options = metadata_options(context);
  options.any_mask = context.domain.mask_kinds.empty();
  return with_drawn(metadata_case(padding_kind(*packed_batch(options))), std::move(drawn));
}

// The side a padding transformation goes into, drawn: both for self-attention.
std::string draw_side(const InputDomain& domain) {
  if (domain.self_attention_only) return "both";
  return *shrinking_element<std::string>({"q", "kv"});
}

// Appending padding at the end of every row changes no length and no offset.
void trailing_padding_changes_nothing(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = padding_batch_of(c, record);
  const int64_t pads = drawn_value<int64_t>(c, "pads", 1);
  const Metadata before = metadata_or_fail(backend, batch, record);
  PackedBatch padded = batch;
  for (Side side : sides_of(c)) padded = pad_side(padded, side, {}, pads);
  const Metadata after = metadata_or_fail(backend, padded, record);
  const std::string what = std::to_string(pads) + " trailing pads on the " + sides_name(c);
  for (auto [name, a, b] : {std::tuple{"q_seqlens", &after.q_seqlens, &before.q_seqlens},
                            std::tuple{"kv_seqlens", &after.kv_seqlens, &before.kv_seqlens},
                            std::tuple{"q_offsets", &after.q_offsets, &before.q_offsets},
                            std::tuple{"kv_offsets", &after.kv_offsets, &before.kv_offsets},
                            std::tuple{"cu_seqlens_q", &after.cu_seqlens_q, &before.cu_seqlens_q},
                            std::tuple{"cu_seqlens_kv", &after.cu_seqlens_kv, &before.cu_seqlens_kv}})
    require_same_row(std::string(name) + " with " + what, *a, *b, "padded", "unpadded");
}

// Shifting row b of one side right by k padding tokens adds k to its offsets.
void shifting_a_row_shifts_its_offsets(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = padding_batch_of(c, record);
  const std::vector<Side> sides = sides_of(c);
  const BatchLayout l = validate_shapes(batch).value();
  const int64_t b = drawn_value<int64_t>(c, "row", 0), k = drawn_value<int64_t>(c, "shift", 1);
  if (b < 0 || b >= l.batch || k < 0) decline_case("row " + std::to_string(b) + " shifted by " + std::to_string(k));
  std::vector<int64_t> leading(l.batch, 0);
  leading[b] = k;
  const Metadata before = metadata_or_fail(backend, batch, record);
  PackedBatch shifted = batch;
  for (Side side : sides) shifted = pad_side(shifted, side, leading, 0);
  const Metadata after = metadata_or_fail(backend, shifted, record);
  const std::string what = "row " + std::to_string(b) + " of the " + sides_name(c) + " shifted by " + std::to_string(k);
  require_same_row("q_seqlens with " + what, after.q_seqlens, before.q_seqlens, "shifted", "unshifted");
  require_same_row("kv_seqlens with " + what, after.kv_seqlens, before.kv_seqlens, "shifted", "unshifted");
  const int64_t M = l.max_segments;
  for (int64_t r = 0; r < l.rows(); ++r)
    for (auto [which, off_before, off_after] : {std::tuple{Side::q, &before.q_offsets, &after.q_offsets},
                                                std::tuple{Side::kv, &before.kv_offsets, &after.kv_offsets}}) {
      std::vector<int64_t> want = row_slice(*off_before, M + 1, r);
      if (shifts(sides, which) && r % l.batch == b)
        for (int64_t& o : want) o = o < 0 ? o : o + k;
      require_same_row(std::string(side_name(which)) + "_offsets of broadcast row " + std::to_string(r) + " with " + what,
                       row_slice(*off_after, M + 1, r), want, "backend", "expected");
    }
}

// Batched over extra dims == every slice computed on its own.
void extra_dims_equal_slice_by_slice(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  const BatchLayout l = valid_layout_or_decline(batch, record);
  record.classify(!l.extra.empty(), "extra dims");
  const Metadata whole = metadata_or_fail(backend, batch, record);
  for (int64_t e = 0; e < shape_product(l.extra); ++e) {
    const Metadata slice = metadata_or_fail(backend, extra_slice(batch, l, e), record);
    for (int64_t b = 0; b < l.batch; ++b)
      require_same_rows("slice " + std::to_string(e) + ", row " + std::to_string(b), slice, b, whole, e * l.batch + b,
                        "the slice alone", "batched");
  }
}

// Positions moved to the top of the int64 range change no metadata integer
// (trimming compares a position with another plus a run length: no wrap).
void extreme_positions_change_nothing(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  valid_layout_or_decline(batch, record);
  const int64_t top = drawn_value<int64_t>(c, "top", INT64_MAX), margin = drawn_value<int64_t>(c, "margin", 0);
  const PackedBatch extreme = at_extreme_integers(batch, margin, -1, -1, top);
  const Metadata want = ref::metadata(batch).value();
  const Expected<Metadata> truth = ref::metadata(extreme);
  if (!truth) fail_with("the reference rejected the extreme form: ", truth.error(), " (oracle suspect)");
  if (const std::string diff = first_difference(truth.value(), want); !diff.empty())
    fail_case("the reference changed with the extreme positions (oracle suspect): " + diff);
  const std::string diff = first_difference(metadata_or_fail(backend, extreme, record), want);
  if (!diff.empty())
    fail_case("with the largest position moved to " + std::string(top == INT64_MAX ? "INT64_MAX" : std::to_string(top)) +
              " - " + std::to_string(margin) + ": " + diff);
}

// Positions go to the top of what the backend's domain takes (max_position), kept in the case for its replay.
Case draw_extreme_positions(const DrawContext& context) {
  nlohmann::json drawn = {{"margin", *shrinking_element<int64_t>({0, 1, 2, 3})}};
  if (context.domain.max_position > 0) drawn["top"] = context.domain.max_position;
  return with_drawn(metadata_case(*packed_batch(metadata_options(context))), std::move(drawn));
}

Case draw_valid(const DrawContext& context) { return metadata_case(*packed_batch(metadata_options(context))); }

// The backend's metadata drives a float64 varlen kernel over inputs poisoned
// with NaN wherever no document is (metadata_through_attention.hpp): it must
// compute what the reference's metadata makes it compute, bit for bit. A wrong
// integer that attention never reads passes here and fails matchesReference.
void drives_attention_like_the_reference(Backend& backend, const Case& c, CheckRecord& record) {
  const PackedBatch& batch = batch_of(c);
  valid_layout_or_decline(batch, record);
  const Metadata got = metadata_or_fail(backend, batch, record);
  if (auto difference = attention_difference(batch, got, ref::metadata(batch).value())) fail_case(*difference);
}
Case draw_arbitrary(const DrawContext& context) { return metadata_case(*arbitrary_batch(context.domain)); }

Case draw_trailing_padding(const DrawContext& context) {
  Case c = draw_padding_batch(context, json::object());
  const std::string side = draw_side(context.domain);
  const int64_t pads = *rc::gen::inRange<int64_t>(1, 5);
  return with_drawn(std::move(c), {{"side", side}, {"pads", pads}});
}

Case draw_row_shift(const DrawContext& context) {
  Case c = draw_padding_batch(context, json::object());
  const BatchLayout l = validate_shapes(batch_of(c)).value();
  const std::string side = draw_side(context.domain);
  const int64_t row = *rc::gen::inRange<int64_t>(0, l.batch), shift = *rc::gen::inRange<int64_t>(1, 4);
  return with_drawn(std::move(c), {{"side", side}, {"row", row}, {"shift", shift}});
}

// ---------------------------------------------------------------- what a domain excludes

std::optional<std::string> needs_padding(const InputDomain& d) {
  if (d.no_padding) return "it inserts padding tokens";
  for (MaskKind kind : kAllMaskKinds)
    if (allows_padding(kind) && d.takes_mask(kind)) return std::nullopt;
  return "it needs a padding mask kind";
}

std::optional<std::string> needs_leading_padding(const InputDomain& d) {
  if (d.one_sequence_a_row) return "it inserts padding before a row's tokens";
  return needs_padding(d);
}

std::optional<std::string> needs_extra_dims(const InputDomain& d) {
  if (!d.extra_dims) return "it batches over extra leading dims";
  return std::nullopt;
}

std::optional<std::string> needs_two_rows(const InputDomain& d) {
  if (d.max_rows == 1) return "it compares a row alone with a batch of several";
  return std::nullopt;
}

std::optional<std::string> needs_high_positions(const InputDomain& d) {
  if (d.positions_from_zero) return "it moves positions to the top of the int64 range";
  return std::nullopt;
}

}  // namespace

std::vector<PropertyDef> metadata_properties() {
  const Capability m = Capability::metadata;
  return {
      {"metadata/matchesReference", m, "every metadata integer equals the explicit-mask reference", draw_valid,
       matches_reference},
      {"metadata/rejectsInvalidInputsWithTheirCode", m, "an input with one violation gives exactly its error code",
       draw_invalid, rejects_invalid_inputs},
      {"metadata/arbitraryInputsMatchReference", m,
       "small arbitrary inputs, valid or not, give the reference's metadata or error code", draw_arbitrary,
       arbitrary_inputs_match_reference},
      {"metadata/drivesAttentionLikeTheReference", m,
       "a varlen kernel driven by the metadata computes what the reference's metadata makes it compute, "
       "NaN in every token no document holds",
       draw_valid, drives_attention_like_the_reference},
      {"metadata/compactedFormPairsDocuments", m, "the s-th compacted q and kv entries are the same document",
       draw_valid, compacted_form_pairs_documents},
      {"metadata/rowsAreIndependent", m, "a row computed alone equals that row of the batch", draw_valid,
       rows_are_independent, std::nullopt, {}, needs_two_rows},
      {"metadata/trailingPaddingChangesNothing", m, "appending padding changes no length or offset",
       draw_trailing_padding, trailing_padding_changes_nothing, std::nullopt, {}, needs_padding},
      {"metadata/shiftingARowShiftsItsOffsets", m, "k leading pads in a row add k to its offsets", draw_row_shift,
       shifting_a_row_shifts_its_offsets, std::nullopt, {}, needs_leading_padding},
      {"metadata/extraDimsEqualSliceBySlice", m, "batched over extra dims equals slice by slice", draw_valid,
       extra_dims_equal_slice_by_slice, std::nullopt, {}, needs_extra_dims},
      {"metadata/extremePositionsChangeNothing", m, "positions moved up to INT64_MAX change no metadata integer",
       draw_extreme_positions, extreme_positions_change_nothing, std::nullopt, {}, needs_high_positions},
  };
}

}  // namespace attn_oracle::properties
