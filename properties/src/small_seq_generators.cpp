// small_seq_generators.cpp: generators of small-seq problems
// (docs/semantics.md#8-small-sequence-problems), valid and invalid. See generators.hpp.
//
// Like packed_batch, a problem is drawn as a spec (rows of documents, each one
// query and its key count, gaps, where the query sits) and built by
// build_small_seq_batch, so that shrinking drops rows and documents, shortens key
// runs and moves the query to its first key's position while every shrunk value
// is still a small-seq problem. Decode-like documents (the query one past its
// last key) are the common case; the query at its first key (representable:
// what matchesGeneralAttention can use), at its last key, or at an explicit
// position are the others. Each document holds one query and 1..16 keys (16
// drawn more often); heads as attention_draw's (heads_kv 1..2, group {1, 2, 4,
// 8}, head dims mostly {1, 2, 4, 8}, sometimes 64), every mask kind the domain
// takes, windows sometimes.
//
// Checked by tests/small_seq_generators_test.cpp: every valid draw is accepted by
// small_seq_documents, every invalid draw gives its tagged code on ref::small_seq.
#include <algorithm>
#include <vector>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

// Where a document's query sits: at its first key's position (with unit key
// stride always representable,
// docs/semantics.md#the-kernels-index-rule-and-representability; what a failure
// shrinks towards), one past its last key (decode), at its last key, or at an
// explicit position.
enum class QueryAt { first_key, after_keys, last_key, explicit_pos };

struct SmallSeqDocSpec {
  int keys = 1;                // 1..16; 0 or > 16 only in invalid draws
  int queries = 1;             // 1; 2 only in invalid draws
  int q_gap = 0, kv_gap = 0;   // padding tokens before it (padding kinds)
  int id_step = 1;             // id = previous id + id_step (>= 1)
  int kv_start = 0;            // position of the first key
  QueryAt query_at = QueryAt::after_keys;
  int query_pos = 0;           // QueryAt::explicit_pos
};

struct SmallSeqSpec {
  MaskKind mask = MaskKind::padding;
  Window window;
  int kv_stride = 1;                    // key positions kv_start + kv_stride * j
  bool all_at_first_key = false;        // every query at QueryAt::first_key (representable)
  int q_trailing = 0, kv_trailing = 0;  // padding after the last document (padding kinds)
  std::vector<std::vector<SmallSeqDocSpec>> rows;
};

struct Token {
  int64_t id = 0, pos = 0;
};

struct BuiltRow {
  std::vector<Token> q, kv;
  int64_t last_id = 0;
};

int64_t query_position(const SmallSeqDocSpec& d, int stride, bool at_first_key) {
  const int64_t last_key = d.kv_start + int64_t{stride} * std::max(0, d.keys - 1);
  switch (at_first_key ? QueryAt::first_key : d.query_at) {
    case QueryAt::first_key: return d.kv_start;
    case QueryAt::explicit_pos: return d.query_pos;
    case QueryAt::last_key: return last_key;
    case QueryAt::after_keys: return d.keys == 0 ? d.kv_start : last_key + 1;
  }
  return 0;
}

BuiltRow build_row(const std::vector<SmallSeqDocSpec>& docs, const SmallSeqSpec& spec, bool padding) {
  BuiltRow row;
  for (const SmallSeqDocSpec& d : docs) {
    row.last_id += std::max(1, d.id_step);
    if (padding) {
      row.q.insert(row.q.end(), d.q_gap, Token{0, 0});
      row.kv.insert(row.kv.end(), d.kv_gap, Token{0, 0});
    }
    const int64_t qpos = query_position(d, spec.kv_stride, spec.all_at_first_key);
    for (int i = 0; i < std::max(1, d.queries); ++i) row.q.push_back(Token{row.last_id, qpos + i});
    for (int j = 0; j < d.keys; ++j) row.kv.push_back(Token{row.last_id, d.kv_start + int64_t{spec.kv_stride} * j});
  }
  return row;
}

void write_side(PackedSide& side, const std::vector<std::vector<Token>>& rows, int64_t len) {
  const auto batch = static_cast<int64_t>(rows.size());
  side.segment_ids = IntArray::filled({batch, len}, 0);
  side.segment_pos = IntArray::filled({batch, len}, 0);
  for (int64_t r = 0; r < batch; ++r)
    for (size_t t = 0; t < rows[r].size(); ++t) {
      side.segment_ids.data[r * len + t] = rows[r][t].id;
      side.segment_pos.data[r * len + t] = rows[r][t].pos;
    }
}

// Padding kinds pad rows to one length; non-padding kinds keep the first n
// documents of every row (n = the fewest in a row) and fill short kv rows with a
// kv-only document (ignored by small-seq: it has no query). M = the highest id.
PackedBatch build_small_seq_batch(const SmallSeqSpec& spec) {
  const bool padding = allows_padding(spec.mask);
  size_t keep = SIZE_MAX;
  for (const auto& docs : spec.rows) keep = std::min(keep, docs.size());
  std::vector<BuiltRow> rows;
  int64_t q_len = 0, kv_len = 0;
  for (const auto& docs : spec.rows) {
    // Non-padding kinds: q rows must have one length, so every row keeps `keep` documents.
    const std::vector<SmallSeqDocSpec> kept = padding ? docs : std::vector<SmallSeqDocSpec>(docs.begin(), docs.begin() + keep);
    rows.push_back(build_row(kept, spec, padding));
    q_len = std::max<int64_t>(q_len, rows.back().q.size());
    kv_len = std::max<int64_t>(kv_len, rows.back().kv.size());
  }
  if (padding) {
    q_len += spec.q_trailing;
    kv_len += spec.kv_trailing;
  }
  int64_t max_id = 1;
  std::vector<std::vector<Token>> q, kv;
  for (BuiltRow& r : rows) {
    if (!padding && static_cast<int64_t>(r.kv.size()) < kv_len) {
      // A kv-only filler document: no query reads it, so small-seq ignores it.
      const int64_t id = r.last_id + 1;
      for (int64_t p = 0; static_cast<int64_t>(r.kv.size()) < kv_len; ++p) r.kv.push_back(Token{id, p});
    }
    for (const auto* side : {&r.q, &r.kv})
      for (const Token& t : *side) max_id = std::max(max_id, t.id);
    q.push_back(std::move(r.q));
    kv.push_back(std::move(r.kv));
  }
  PackedBatch batch;
  batch.mask = spec.mask;
  batch.window = spec.window;
  batch.max_segments = max_id;
  write_side(batch.q, q, q_len);
  write_side(batch.kv, kv, kv_len);
  return batch;
}

rc::Gen<Window> small_seq_window() {
  auto side = shrinking_weighted<int64_t>(
      {{3, rc::gen::just<int64_t>(-1)}, {1, rc::gen::just<int64_t>(0)}, {3, rc::gen::inRange<int64_t>(0, 9)}});
  return shrinking_weighted<Window>({{3, rc::gen::just(Window{})}, {2, rc::gen::construct<Window>(side, side)}});
}

// Keys: uniform in 1..16 (not size-scaled: 16 is an edge a kernel must see early),
// with a full 16 drawn more often; shrinks towards 1.
rc::Gen<int> key_count() {
  return shrinking_weighted<int>({{6, rc::gen::inRange(1, 17)}, {1, rc::gen::just(16)}});
}

rc::Gen<SmallSeqDocSpec> small_seq_doc(bool padding) {
  auto gap = padding ? shrinking_weighted<int>({{3, rc::gen::just(0)}, {1, rc::gen::inRange(1, 3)}})
                     : rc::gen::just(0);
  auto query_at = shrinking_weighted<QueryAt>({{2, rc::gen::just(QueryAt::first_key)},
                                                   {5, rc::gen::just(QueryAt::after_keys)},
                                                   {2, rc::gen::just(QueryAt::last_key)},
                                                   {1, rc::gen::just(QueryAt::explicit_pos)}});
  return rc::gen::build<SmallSeqDocSpec>(
      rc::gen::set(&SmallSeqDocSpec::keys, key_count()),
      rc::gen::set(&SmallSeqDocSpec::q_gap, gap), rc::gen::set(&SmallSeqDocSpec::kv_gap, gap),
      rc::gen::set(&SmallSeqDocSpec::id_step, shrinking_weighted<int>({{6, rc::gen::just(1)}, {1, rc::gen::just(2)}})),
      rc::gen::set(&SmallSeqDocSpec::kv_start, shrinking_weighted<int>({{3, rc::gen::just(0)}, {1, rc::gen::inRange(1, 9)}})),
      rc::gen::set(&SmallSeqDocSpec::query_at, query_at),
      rc::gen::set(&SmallSeqDocSpec::query_pos, shrinking_weighted<int>({{2, rc::gen::just(0)}, {1, rc::gen::inRange(0, 20)}})));
}

rc::Gen<std::vector<SmallSeqDocSpec>> small_seq_row(bool padding, int max_docs) {
  return rc::gen::withSize([=](int size) {
    const int most = std::max(1, std::min(max_docs, 1 + size / 20));
    return rc::gen::mapcat(rc::gen::inRange(1, most + 1), [=](int n) {
      return rc::gen::container<std::vector<SmallSeqDocSpec>>(n, small_seq_doc(padding));
    });
  });
}

rc::Gen<SmallSeqSpec> small_seq_spec(int max_rows, int max_docs, bool padding_only, const InputDomain& domain = {}) {
  std::vector<MaskKind> kinds;
  for (MaskKind kind : kAllMaskKinds)
    if ((!padding_only || allows_padding(kind)) && domain.takes_mask(kind) && !(domain.no_padding && allows_padding(kind)))
      kinds.push_back(kind);
  if (kinds.empty()) kinds.assign(std::begin(kAllMaskKinds), std::end(kAllMaskKinds));  // each draw declined then
  auto mask = shrinking_element(kinds);
  auto head = rc::gen::pair(mask, rc::gen::inRange(1, max_rows + 1));
  return rc::gen::mapcat(head, [=](std::pair<MaskKind, int> h) {
    const bool padding = allows_padding(h.first);
    auto trailing = padding ? shrinking_weighted<int>({{2, rc::gen::just(0)}, {1, rc::gen::inRange(1, 3)}}) : rc::gen::just(0);
    return rc::gen::build<SmallSeqSpec>(
        rc::gen::set(&SmallSeqSpec::mask, rc::gen::just(h.first)),
        rc::gen::set(&SmallSeqSpec::window, small_seq_window()),
        rc::gen::set(&SmallSeqSpec::kv_stride, shrinking_weighted<int>({{5, rc::gen::just(1)}, {1, rc::gen::inRange(2, 4)}})),
        // 1 in 4: every query at its first key, so that multi-document problems
        // are representable often enough for matchesGeneralAttention.
        rc::gen::set(&SmallSeqSpec::all_at_first_key, shrinking_weighted<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}})),
        rc::gen::set(&SmallSeqSpec::q_trailing, trailing), rc::gen::set(&SmallSeqSpec::kv_trailing, trailing),
        rc::gen::set(&SmallSeqSpec::rows, rc::gen::container<std::vector<std::vector<SmallSeqDocSpec>>>(h.second, small_seq_row(padding, max_docs))));
  });
}

struct Heads {
  int64_t kv, group, dim;
  Dtype dtype;
  bool backward, explicit_scale;
  bool wide_group;  // 8 query heads a kv head instead of `group`
};

rc::Gen<Heads> small_seq_heads(const SmallSeqOptions& o) {
  std::vector<Dtype> dtypes;
  for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (o.domain.takes_dtype(dtype) && (o.low_precision || dtype == Dtype::fp32)) dtypes.push_back(dtype);
  auto dtype = shrinking_element<Dtype>(dtypes.empty() ? o.domain.dtypes : dtypes);
  // 5 draws in 6 from {1, 2, 4, 8}, 1 in 6 is 64 (the kernels' head dim); a
  // domain's head dims instead, shrinking towards the smallest.
  std::vector<int64_t> dims = o.domain.head_dims;
  std::sort(dims.begin(), dims.end());
  if (dims.empty()) dims = {1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 64, 64};
  auto dim = shrinking_element<int64_t>(dims);
  // 1 draw in 4 a group of 8 query heads a kv head (decoding Llama-3 70B),
  // drawn last so that the other draws stay as they were.
  return rc::gen::construct<Heads>(shrinking_element<int64_t>({1, 2}), shrinking_element<int64_t>({1, 2, 4}), dim, dtype,
                                   o.backward ? rc::gen::arbitrary<bool>() : rc::gen::just(false),
                                   shrinking_element<bool>({false, false, false, false, true}),
                                   shrinking_weighted<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}}));
}

AttentionDraw make_draw(PackedBatch batch, const Heads& h, uint64_t seed) {
  AttentionDraw d;
  d.problem.batch = std::move(batch);
  d.problem.shape.heads_kv = h.kv;
  d.problem.shape.heads_q = h.kv * (h.wide_group ? 8 : h.group);
  d.problem.shape.head_dim = h.dim;
  d.problem.shape.dtype = h.dtype;
  d.problem.shape.backward = h.backward;
  if (h.explicit_scale) d.problem.shape.scale = 0.5;
  d.seed = seed;
  return d;
}

// Set after drawing, so that the draws of every other domain stay as they were.
SmallSeqSpec within_domain(SmallSeqSpec spec, const InputDomain& d) {
  if (!d.windows) spec.window = Window{};
  if (d.causal_windows_only && spec.window != Window{} && !is_causal(spec.mask)) spec.window.right = 0;
  if (d.positions_from_zero) {
    spec.all_at_first_key = true, spec.kv_stride = 1;
    for (auto& row : spec.rows)
      for (SmallSeqDocSpec& doc : row) doc.kv_start = 0;
  }
  return spec;
}

}  // namespace

rc::Gen<AttentionDraw> small_seq_draw(SmallSeqOptions o) {
  if (o.domain.max_rows > 0) o.max_rows = std::max(1, static_cast<int>(std::min<int64_t>(o.max_rows, o.domain.max_rows)));
  auto spec = small_seq_spec(o.max_rows, o.max_docs, false, o.domain);
  if (!o.domain.windows || o.domain.causal_windows_only || o.domain.positions_from_zero)
    spec = rc::gen::map(spec, [d = o.domain](SmallSeqSpec s) { return within_domain(std::move(s), d); });
  return rc::gen::map(
      rc::gen::tuple(spec, small_seq_heads(o), rc::gen::arbitrary<uint64_t>()),
      [](const std::tuple<SmallSeqSpec, Heads, uint64_t>& t) {
        const auto& [spec, heads, seed] = t;
        return make_draw(build_small_seq_batch(spec), heads, seed);
      });
}

// ------------------------------------------------------------------- invalid
// One violation a problem: two queries in a document or a document with 0 or
// 17+ keys (small_seq_query_count, small_seq_key_count), or heads_q % heads_kv
// != 0 (bad_heads). Padding kinds.

namespace {

enum class SmallSeqViolation { two_queries, zero_keys, too_many_keys, bad_heads };

InvalidSmallSeq inject(SmallSeqSpec spec, Heads heads, uint64_t seed, SmallSeqViolation v, size_t choice, int amount) {
  std::vector<SmallSeqDocSpec*> docs;
  for (auto& row : spec.rows)
    for (SmallSeqDocSpec& d : row) docs.push_back(&d);
  SmallSeqDocSpec& doc = *docs[choice % docs.size()];
  ErrorCode code = ErrorCode::small_seq_key_count;
  switch (v) {
    case SmallSeqViolation::two_queries:
      doc.queries = 2;
      code = ErrorCode::small_seq_query_count;
      break;
    case SmallSeqViolation::zero_keys:
      doc.keys = 0;
      spec.kv_trailing = std::max(spec.kv_trailing, 1);  // never a kv side of length 0
      break;
    case SmallSeqViolation::too_many_keys:
      doc.keys = static_cast<int>(kSmallSeqMaxKeys) + amount;
      break;
    case SmallSeqViolation::bad_heads:
      code = ErrorCode::bad_heads;
      break;
  }
  AttentionDraw d = make_draw(build_small_seq_batch(spec), heads, seed);
  if (v == SmallSeqViolation::bad_heads) {  // heads_kv >= 2 and heads_q one past a multiple of it
    d.problem.shape.heads_kv = heads.kv + 1;
    d.problem.shape.heads_q = d.problem.shape.heads_kv * heads.group + amount % d.problem.shape.heads_kv;
    if (d.problem.shape.heads_q % d.problem.shape.heads_kv == 0) ++d.problem.shape.heads_q;
  }
  return {d, code};
}

}  // namespace

rc::Gen<InvalidSmallSeq> invalid_small_seq() {
  auto violation = shrinking_element<SmallSeqViolation>({SmallSeqViolation::two_queries, SmallSeqViolation::zero_keys,
                                                        SmallSeqViolation::too_many_keys, SmallSeqViolation::bad_heads});
  return rc::gen::mapcat(violation, [](SmallSeqViolation v) {
    return rc::gen::map(rc::gen::tuple(small_seq_spec(2, 4, /*padding_only=*/true), small_seq_heads(SmallSeqOptions{}),
                                       rc::gen::arbitrary<uint64_t>(), rc::gen::inRange<size_t>(0, 1000), rc::gen::inRange(1, 4)),
                        [v](const std::tuple<SmallSeqSpec, Heads, uint64_t, size_t, int>& t) {
                          const auto& [spec, heads, seed, choice, amount] = t;
                          return inject(spec, heads, seed, v, choice, amount);
                        });
  });
}

void showValue(const InvalidSmallSeq& d, std::ostream& os) {
  os << "expects " << to_string(d.expected) << ": ";
  showValue(d.draw, os);
}

}  // namespace attn_oracle::properties
