// batch_rules.cpp: the packed-batch validity rules of
// docs/semantics.md#input-validation-in-precedence-order (table "Input validation, in precedence
// order") as brute-force predicates (independent_rules.hpp). Shares no code with
// model/src/validate.cpp: the broadcast rows are enumerated from index tuples, and each per-token
// rule is a statement about the token and the tokens before it ("an earlier token of
// this document holds a position at or above this one"), where the model scans
// neighbours once. Within one side of one row the first rule of the table that
// holds anywhere wins, and the message names the first token it holds at.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>

#include "attn_oracle/properties/independent_rules.hpp"
#include "attn_oracle/model/memory_budget.hpp"

namespace attn_oracle::inline properties {
namespace {

using Tokens = std::vector<int64_t>;

struct SideRow {
  Tokens ids, pos;
};

// A per-token rule: does it hold at token t of `row`?
struct TokenRule {
  ErrorCode code;
  const char* statement;
  bool (*at)(const SideRow& row, int64_t t, const PackedBatch& batch);
};

bool in_document(const SideRow& r, int64_t t) { return r.ids[t] != 0; }

// Earlier tokens of t's document (those holding its id before t).
template <class F>
bool some_earlier_token_of_its_document(const SideRow& r, int64_t t, F f) {
  for (int64_t s = 0; s < t; ++s)
    if (r.ids[s] == r.ids[t] && f(s)) return true;
  return false;
}

const TokenRule kTokenRules[] = {
    {ErrorCode::negative_id, "ids are >= 0", [](const SideRow& r, int64_t t, const PackedBatch&) { return r.ids[t] < 0; }},
    {ErrorCode::noncontiguous_segment, "a document's tokens are one run",
     [](const SideRow& r, int64_t t, const PackedBatch&) {
       if (!in_document(r, t)) return false;
       // The id held before, with something else between: some u after its
       // first token and before t differs.
       const int64_t first = std::find(r.ids.begin(), r.ids.begin() + t, r.ids[t]) - r.ids.begin();
       for (int64_t u = first + 1; u < t; ++u)
         if (r.ids[u] != r.ids[t]) return true;
       return false;
     }},
    {ErrorCode::too_many_segments, "ids are <= max_segments",
     [](const SideRow& r, int64_t t, const PackedBatch& b) { return r.ids[t] > b.max_segments; }},
    {ErrorCode::ids_out_of_order, "a document's id is above every earlier document's",
     [](const SideRow& r, int64_t t, const PackedBatch&) {
       if (!in_document(r, t)) return false;
       for (int64_t s = 0; s < t; ++s)
         if (r.ids[s] != 0 && r.ids[s] > r.ids[t]) return true;
       return false;
     }},
    {ErrorCode::padding_with_non_padding_mask, "padding only under the padding* kinds",
     [](const SideRow& r, int64_t t, const PackedBatch& b) {
       return r.ids[t] == 0 && !std::string_view(to_string(b.mask)).starts_with("padding");
     }},
    {ErrorCode::positions_not_increasing, "positions rise strictly inside a document",
     [](const SideRow& r, int64_t t, const PackedBatch&) {
       return in_document(r, t) && some_earlier_token_of_its_document(r, t, [&](int64_t s) { return r.pos[s] >= r.pos[t]; });
     }},
    {ErrorCode::negative_position, "positions inside a document are >= 0",
     [](const SideRow& r, int64_t t, const PackedBatch&) { return in_document(r, t) && r.pos[t] < 0; }},
};

int64_t product(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool fills_its_shape(const IntArray& a) {
  if (std::any_of(a.shape.begin(), a.shape.end(), [](int64_t d) { return d < 0; })) return false;
  return static_cast<int64_t>(a.data.size()) == product(a.shape);
}

bool positions_are_a_trailing_suffix(const PackedSide& s) {
  const Shape& ids = s.segment_ids.shape;
  const Shape& pos = s.segment_pos.shape;
  return pos.size() >= 2 && pos.size() <= ids.size() && std::equal(pos.rbegin(), pos.rend(), ids.rbegin());
}

Shape extra_dims(const PackedSide& s) { return Shape(s.segment_ids.shape.begin(), s.segment_ids.shape.end() - 2); }

// Numpy broadcasting, right-aligned; nullopt where two sizes differ and neither is 1.
std::optional<Shape> broadcast(Shape a, Shape b) {
  if (a.size() < b.size()) std::swap(a, b);
  b.insert(b.begin(), a.size() - b.size(), 1);
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d] == b[d] || b[d] == 1) continue;
    if (a[d] != 1) return std::nullopt;
    a[d] = b[d];
  }
  return a;
}

// Which of a side's rows serves broadcast row (index over `extra`, row b):
// dims of size 1 repeat their one slice.
int64_t side_row_of(const Shape& extra, const std::vector<int64_t>& index, const Shape& side_extra, int64_t batch, int64_t b) {
  int64_t row = 0;
  const size_t skip = extra.size() - side_extra.size();
  for (size_t d = 0; d < side_extra.size(); ++d) row = row * side_extra[d] + (side_extra[d] == 1 ? 0 : index[skip + d]);
  return row * batch + b;
}

SideRow side_row(const PackedSide& s, int64_t row) {
  const int64_t T = s.segment_ids.shape.back();
  const int64_t n_pos = static_cast<int64_t>(s.segment_pos.data.size());
  SideRow r;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t flat = row * T + t;
    r.ids.push_back(s.segment_ids.data[flat]);
    r.pos.push_back(s.segment_pos.data[flat % n_pos]);
  }
  return r;
}

std::optional<RuleVerdict> row_verdict(const SideRow& r, const PackedBatch& batch, const std::string& where, bool has_extra) {
  for (const TokenRule& rule : kTokenRules)
    for (int64_t t = 0; t < static_cast<int64_t>(r.ids.size()); ++t)
      if (rule.at(r, t, batch)) {
        // "q side, row 3, token 5:" or, with extra dims, "q side, row 3 (index [...]), token 5:".
        const std::string token = ", token " + std::to_string(t) + ":";
        return has_extra ? RuleVerdict{rule.code, rule.statement, where + " (index ", "), token " + std::to_string(t) + ":"}
                         : RuleVerdict{rule.code, rule.statement, where + token, ""};
      }
  return std::nullopt;
}

RuleVerdict whole(ErrorCode code, const char* statement) { return RuleVerdict{code, statement, "", ""}; }

}  // namespace

std::optional<RuleVerdict> batch_rules_verdict(const PackedBatch& batch) {
  const std::pair<const char*, const PackedSide*> sides[] = {{"q", &batch.q}, {"kv", &batch.kv}};
  for (const auto& [name, side] : sides)
    if (!fills_its_shape(side->segment_ids) || !fills_its_shape(side->segment_pos))
      return whole(ErrorCode::bad_case, "arrays have non-negative dims their values fill");
  if (batch.max_segments < 1) return whole(ErrorCode::bad_max_segments, "max_segments >= 1");
  for (const auto& [name, side] : sides)
    if (side->segment_ids.rank() < 2 || side->segment_ids.rank() < side->segment_pos.rank())
      return whole(ErrorCode::rank_mismatch, "ids have >= 2 dims and no fewer than positions");
  for (const auto& [name, side] : sides)
    if (!positions_are_a_trailing_suffix(*side))
      return whole(ErrorCode::shape_mismatch, "positions are a trailing suffix of the ids, at least [B, T]");
  const Shape& qs = batch.q.segment_ids.shape;
  const Shape& ks = batch.kv.segment_ids.shape;
  if (qs[qs.size() - 2] != ks[ks.size() - 2]) return whole(ErrorCode::shape_mismatch, "q and kv have the same B");
  const std::optional<Shape> extra = broadcast(extra_dims(batch.q), extra_dims(batch.kv));
  if (!extra) return whole(ErrorCode::extra_dims_mismatch, "q and kv extra dims broadcast");
  const int64_t B = qs[qs.size() - 2];
  // The four [rows, M + 1] int64 metadata outputs, counted without overflow.
  long double bytes = static_cast<long double>(B) * (static_cast<long double>(batch.max_segments) + 1) * 4 * 8;
  for (int64_t d : *extra) bytes *= static_cast<long double>(d);
  // M + 1 past int64 is over budget whatever the row count (the outputs' width alone overflows).
  if (batch.max_segments == INT64_MAX || bytes > static_cast<long double>(memory_budget()))
    return whole(ErrorCode::over_memory_budget, "the metadata outputs fit the memory budget");

  const Shape q_extra = extra_dims(batch.q), kv_extra = extra_dims(batch.kv);
  std::vector<int64_t> index(extra->size(), 0);
  for (int64_t slice = 0; slice < product(*extra); ++slice) {
    for (int64_t rest = slice, d = static_cast<int64_t>(extra->size()) - 1; d >= 0; --d)
      index[d] = rest % (*extra)[d], rest /= (*extra)[d];
    for (int64_t b = 0; b < B; ++b)
      for (const auto& [name, side] : sides) {
        const Shape& own = side == &batch.q ? q_extra : kv_extra;
        const int64_t row = side_row_of(*extra, index, own, B, b);
        const std::string where = std::string(name) + " side, row " + std::to_string(row);
        if (auto v = row_verdict(side_row(*side, row), batch, where, !own.empty())) return v;
      }
  }
  return std::nullopt;
}

std::vector<std::string> batch_rule_edges(const PackedBatch& batch) {
  std::vector<std::string> edges;
  for (const PackedSide* side : {&batch.q, &batch.kv}) {
    if (!fills_its_shape(side->segment_ids) || !fills_its_shape(side->segment_pos) || side->segment_ids.rank() < 2 ||
        side->segment_pos.data.empty())
      continue;
    const int64_t T = side->segment_ids.shape.back();
    for (int64_t row = 0; T > 0 && row < product(side->segment_ids.shape) / T; ++row) {
      const SideRow r = side_row(*side, row);
      for (int64_t t = 1; t < T; ++t) {
        const bool same_doc = r.ids[t] != 0 && r.ids[t] == r.ids[t - 1];
        const bool equal = same_doc && r.pos[t] == r.pos[t - 1];
        if (equal) edges.push_back("edge equal positions in a document");
        if (equal && t == T - 1) edges.push_back("edge equal positions at a row's last token");
        if (equal && (t == 1 || r.ids[t - 2] != r.ids[t])) edges.push_back("edge equal positions at a document's second token");
        if (same_doc && r.pos[t] < r.pos[t - 1]) edges.push_back("edge decreasing positions in a document");
        if (r.ids[t] > r.ids[t - 1] + 1 && r.ids[t - 1] != 0) edges.push_back("edge ids skip");
        if (r.ids[t] != 0 && r.ids[t] != r.ids[t - 1] &&
            std::find(r.ids.begin(), r.ids.begin() + t, r.ids[t]) != r.ids.begin() + t)
          edges.push_back("edge an id reappears");
        if (r.ids[t] != 0 && r.ids[t - 1] != 0 && r.ids[t] < r.ids[t - 1]) edges.push_back("edge an id below the one before it");
      }
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  return edges;
}

}  // namespace attn_oracle::properties
