// input_domain.cpp: whether an input lies inside a backend's declared domain
// (input_domain.hpp). Reads raw arrays defensively: the invalid-input
// properties ask about inputs whose shapes do not validate.
#include "attn_oracle/seam/input_domain.hpp"

#include <algorithm>

#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline seam {
namespace {

template <class T>
bool listed_or_empty(const std::vector<T>& list, const T& value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

template <class T>
std::string listed(const std::vector<T>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += i == 0 ? "" : i + 1 == values.size() ? " and " : ", ";
    if constexpr (std::is_same_v<T, int64_t>) out += std::to_string(values[i]);
    else out += std::string(to_string(values[i]));
  }
  return out;
}

// The domain field a reason rests on, as backends declare it (InputDomain, a worker's
// hello, attn_oracle.Domain): " (domain field no_padding)".
std::string field(const char* name) { return std::string(" (domain field ") + name + ")"; }

bool consistent(const IntArray& a) { return static_cast<int64_t>(a.data.size()) == shape_product(a.shape); }

std::optional<std::string> shape_fields(const InputDomain& d, const PackedBatch& batch) {
  if (!d.takes_mask(batch.mask))
    return "mask " + std::string(to_string(batch.mask)) + "; the backend takes masks " + listed(d.mask_kinds) + field("mask_kinds");
  if (!d.windows && batch.window != Window{})
    return "window (" + std::to_string(batch.window.left) + ", " + std::to_string(batch.window.right) +
           "); the backend takes no windows" + field("windows");
  if (d.causal_windows_only && batch.window != Window{} && batch.window.right != 0 && !is_causal(batch.mask))
    return "window (" + std::to_string(batch.window.left) + ", " + std::to_string(batch.window.right) + ") under mask " +
           std::string(to_string(batch.mask)) + "; the backend takes a window only where it ends at the query (right 0, " +
           "or a causal mask)" + field("causal_windows_only");
  if (d.self_attention_only && batch.q != batch.kv)
    return "q and kv differ; the backend takes self-attention only (the same ids, positions, T and extra dims)" +
           field("self_attention_only");
  for (const auto& [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}}) {
    const Shape& shape = side->segment_ids.shape;
    if (!d.extra_dims && shape.size() > 2)
      return std::string(name) + " ids of shape " + shape_to_string(shape) + "; the backend takes no extra leading dims" + field("extra_dims");
    if (!d.positions_extra_dims && shape.size() > 2 && side->segment_pos.shape.size() > 2)
      return std::string(name) + " positions of shape " + shape_to_string(side->segment_pos.shape) +
             " carry the extra dims of the ids; the backend takes positions [B, T], shared by every slice" +
             field("positions_extra_dims");
    if (d.max_rows > 0 && shape.size() >= 2 && shape[shape.size() - 2] > d.max_rows)
      return std::to_string(shape[shape.size() - 2]) + " rows; the backend takes at most " + std::to_string(d.max_rows) + field("max_rows");
  }
  return std::nullopt;
}

// A padding token, a row that is not one sequence, a position past max_position,
// or a document whose positions do not run 0, 1, 2, ...
std::optional<std::string> content_fields(const InputDomain& d, const char* name, const PackedSide& side) {
  const IntArray &ids = side.segment_ids, &pos = side.segment_pos;
  if (ids.shape.empty() || !consistent(ids) || !consistent(pos)) return std::nullopt;
  const int64_t len = ids.shape.back(), pos_size = std::max<int64_t>(1, shape_product(pos.shape));
  for (int64_t t = 0; t < static_cast<int64_t>(ids.data.size()); ++t) {
    const int64_t id = ids.data[t], row = len > 0 ? t / len : 0, col = len > 0 ? t % len : 0;
    const std::string at = std::string(name) + " row " + std::to_string(row) + " token " + std::to_string(col);
    if (d.no_padding && id == 0) return "a padding token (id 0) at " + at + "; the backend takes no padding" + field("no_padding");
    if (d.one_sequence_a_row && id != 0 && col > 0 && ids.data[t - 1] != id)
      return (ids.data[t - 1] == 0 ? "a document after padding" : "a second document") + std::string(" (id ") +
             std::to_string(id) + ") at " + at + "; the backend takes one sequence a row (one document from token 0, " +
             "then padding)" + field("one_sequence_a_row");
    if (d.max_position > 0 && id != 0 && !pos.data.empty() && pos.data[t % pos_size] > d.max_position)
      return "position " + std::to_string(pos.data[t % pos_size]) + " at " + at + "; the backend takes positions up to " +
             std::to_string(d.max_position) + field("max_position");
    if (!d.positions_from_zero || id == 0 || pos.data.empty()) continue;
    const bool starts = col == 0 || ids.data[t - 1] != id;
    const int64_t want = starts ? 0 : pos.data[(t - 1) % pos_size] + 1;
    if (pos.data[t % pos_size] != want)
      return "position " + std::to_string(pos.data[t % pos_size]) + " at " + at + " (document " + std::to_string(id) +
             "); the backend takes positions 0, 1, 2, ... in every document" + field("positions_from_zero");
  }
  return std::nullopt;
}

// "2/1, 2/2": a menu's (heads_q, heads_kv) pairs.
std::string heads_list(const std::vector<std::pair<int64_t, int64_t>>& heads) {
  std::string out;
  for (const auto& [q, kv] : heads) out += (out.empty() ? "" : ", ") + std::to_string(q) + "/" + std::to_string(kv);
  return out;
}

// T, B and M against the menu; raw shapes, as shape_fields reads them.
std::optional<std::string> size_fields(const SizeMenu& m, const PackedBatch& batch) {
  for (const auto& [name, side] : {std::pair{"q", &batch.q}, std::pair{"kv", &batch.kv}}) {
    const Shape& shape = side->segment_ids.shape;
    if (shape.size() < 2) continue;
    if (!listed_or_empty(m.tokens, shape.back()))
      return std::string(name) + " has " + std::to_string(shape.back()) + " tokens; the backend's size menu has " +
             listed(m.tokens) + field("sizes.tokens");
    if (!listed_or_empty(m.rows, shape[shape.size() - 2]))
      return std::to_string(shape[shape.size() - 2]) + " rows; the backend's size menu has " + listed(m.rows) + field("sizes.rows");
  }
  if (!listed_or_empty(m.max_segments, batch.max_segments))
    return "max_segments " + std::to_string(batch.max_segments) + "; the backend's size menu has " +
           listed(m.max_segments) + field("sizes.max_segments");
  return std::nullopt;
}

std::optional<std::string> tensor_fields(const InputDomain& d, const AttentionShape& shape) {
  if (!listed_or_empty(d.sizes.heads, std::pair{shape.heads_q, shape.heads_kv})) {
    return "heads " + std::to_string(shape.heads_q) + "/" + std::to_string(shape.heads_kv) +
           "; the backend's size menu has heads (q/kv) " + heads_list(d.sizes.heads) + field("sizes.heads");
  }
  if (!d.takes_dtype(shape.dtype))
    return "dtype " + std::string(to_string(shape.dtype)) + "; the backend takes " + listed(d.dtypes) + field("dtypes");
  if (!d.takes_head_dim(shape.head_dim))
    return "head_dim " + std::to_string(shape.head_dim) + "; the backend takes " + listed(d.head_dims) + field("head_dims");
  return std::nullopt;
}

}  // namespace

SizeMenu default_size_menu() { return SizeMenu{{16, 64, 144}, {1, 2}, {4, 8}, {{2, 1}, {2, 2}}}; }

int64_t next_on_menu(const std::vector<int64_t>& menu, int64_t size) {
  std::optional<int64_t> best;
  for (int64_t m : menu)
    if (m >= size && (!best || m < *best)) best = m;
  return best.value_or(size);
}

bool InputDomain::takes_mask(MaskKind kind) const { return listed_or_empty(mask_kinds, kind); }
bool InputDomain::takes_dtype(Dtype dtype) const { return listed_or_empty(dtypes, dtype); }
bool InputDomain::takes_head_dim(int64_t head_dim) const { return listed_or_empty(head_dims, head_dim); }
bool InputDomain::takes_cp_strategy(CpStrategy s) const { return listed_or_empty(cp_strategies, s); }
bool InputDomain::takes_cp_balance(CpBalance b) const { return listed_or_empty(cp_balances, b); }
bool InputDomain::takes_everything() const { return *this == InputDomain{}; }

std::string to_string(const InputDomain& d) {
  if (d.takes_everything()) return "every input";
  std::vector<std::string> parts;
  if (d.self_attention_only) parts.emplace_back("self-attention only");
  if (d.no_padding) parts.emplace_back("no padding");
  if (d.positions_from_zero) parts.emplace_back("positions from 0");
  if (d.one_sequence_a_row) parts.emplace_back("one sequence a row");
  if (d.max_position > 0) parts.push_back("positions up to " + std::to_string(d.max_position));
  if (d.max_rows > 0) parts.push_back("at most " + std::to_string(d.max_rows) + (d.max_rows == 1 ? " row" : " rows"));
  if (!d.extra_dims) parts.emplace_back("no extra dims");
  if (!d.positions_extra_dims) parts.emplace_back("positions [B, T] under extra dims");
  if (!d.mask_kinds.empty()) parts.push_back("masks " + listed(d.mask_kinds));
  if (!d.windows) parts.emplace_back("no windows");
  if (d.causal_windows_only) parts.emplace_back("windows ending at the query");
  if (!d.dtypes.empty()) parts.push_back("dtypes " + listed(d.dtypes));
  if (!d.head_dims.empty()) parts.push_back("head dims " + listed(d.head_dims));
  if (!d.sizes.tokens.empty()) parts.push_back("tokens " + listed(d.sizes.tokens));
  if (!d.sizes.rows.empty()) parts.push_back("rows " + listed(d.sizes.rows));
  if (!d.sizes.max_segments.empty()) parts.push_back("M " + listed(d.sizes.max_segments));
  if (!d.sizes.heads.empty()) parts.push_back("heads " + heads_list(d.sizes.heads));
  if (!d.cp_strategies.empty()) parts.push_back("cp strategies " + listed(d.cp_strategies));
  if (!d.cp_balances.empty()) parts.push_back("cp balances " + listed(d.cp_balances));
  if (!d.cp_sizes.empty()) parts.push_back("cp sizes " + listed(d.cp_sizes));
  if (!d.cp_stripes.empty()) parts.push_back("cp stripes " + listed(d.cp_stripes));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

std::optional<std::string> outside_domain(const InputDomain& d, const PackedBatch& batch) {
  if (auto why = shape_fields(d, batch)) return why;
  if (auto why = size_fields(d.sizes, batch)) return why;
  if (!d.no_padding && !d.positions_from_zero && !d.one_sequence_a_row && d.max_position == 0) return std::nullopt;
  if (!validate(batch)) return std::nullopt;  // content fields describe valid inputs
  if (auto why = content_fields(d, "q", batch.q)) return why;
  return content_fields(d, "kv", batch.kv);
}

std::optional<std::string> outside_domain(const InputDomain& d, const AttentionProblem& problem) {
  if (auto why = tensor_fields(d, problem.shape)) return why;
  return outside_domain(d, problem.batch);
}

std::optional<std::string> outside_domain(const InputDomain& d, const KvBufferProblem& problem) {
  return tensor_fields(d, problem.shape);
}

std::optional<std::string> outside_domain(const InputDomain& d, const CpLayout& l, const AttentionProblem& problem) {
  if (!d.takes_cp_strategy(l.strategy))
    return "cp strategy " + std::string(to_string(l.strategy)) + "; the backend takes " + listed(d.cp_strategies) + field("cp_strategies");
  if (!d.takes_cp_balance(l.balance))
    return "cp balance " + std::string(to_string(l.balance)) + "; the backend takes " + listed(d.cp_balances) + field("cp_balances");
  if (!listed_or_empty(d.cp_sizes, l.cp))
    return "cp = " + std::to_string(l.cp) + "; the backend takes " + listed(d.cp_sizes) + field("cp_sizes");
  if (l.balance == CpBalance::striped && !listed_or_empty(d.cp_stripes, l.stripe))
    return "stripe " + std::to_string(l.stripe) + "; the backend takes " + listed(d.cp_stripes) + field("cp_stripes");
  return outside_domain(d, problem);
}

}  // namespace attn_oracle::seam
