// context_parallel.cpp: the layout validator and the permutation built chunk by
// chunk (context_parallel.hpp).
#include "attn_oracle/model/context_parallel.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline model {
namespace {

constexpr std::array<std::string_view, 3> kStrategyNames = {"all_gather", "ring", "all_to_all"};
constexpr std::array<std::string_view, 5> kBalanceNames = {"contiguous", "dual_chunk_swap", "striped", "head_tail",
                                                           "explicit_indices"};

Error error(ErrorCode code, const std::string& message) { return Error{code, message}; }
std::string str(int64_t v) { return std::to_string(v); }

std::optional<Error> check_layout_alone(const CpLayout& l) {
  if (l.cp < 1) return error(ErrorCode::cp_bad_layout, "cp = " + str(l.cp) + ": a layout needs at least one rank");
  if (l.balance == CpBalance::striped && l.stripe < 1)
    return error(ErrorCode::cp_bad_layout, "stripe = " + str(l.stripe) + ": a stripe holds at least one token");
  if (l.balance != CpBalance::explicit_indices && !l.indices.data.empty())
    return error(ErrorCode::cp_bad_layout,
                 "indices given to the " + std::string(to_string(l.balance)) + " balance: only explicit_indices takes them");
  return std::nullopt;
}

// The row's token count must split evenly into the layout's chunks.
std::optional<Error> check_divisible(const CpLayout& l, int64_t t) {
  int64_t unit = l.cp;
  std::string what = "cp = " + str(l.cp);
  if (l.balance == CpBalance::dual_chunk_swap) unit = 2 * l.cp, what = "2*cp = " + str(unit) + " (dual_chunk_swap)";
  if (l.balance == CpBalance::striped) unit = l.cp * l.stripe, what = "cp*stripe = " + str(unit) + " (striped)";
  if (t % unit == 0) return std::nullopt;
  return error(ErrorCode::cp_not_divisible, "T = " + str(t) + " is not a multiple of " + what);
}

// The spans head_tail splits, as [start, end): each document with the padding
// after it, and a row's leading padding alone.
std::vector<std::pair<int64_t, int64_t>> spans(const int64_t* ids, int64_t t) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < t;) {
    int64_t j = i + 1;
    while (j < t && (ids[j] == 0 || ids[j] == ids[i])) ++j;
    if (ids[i] == 0)  // leading padding: up to the first document
      for (j = i + 1; j < t && ids[j] == 0;) ++j;
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

std::optional<Error> check_documents(const CpLayout& l, const PackedSide& side, int64_t rows, int64_t t) {
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t* ids = side.segment_ids.data.data() + b * t;
    for (const auto& [start, end] : spans(ids, t)) {
      if ((end - start) % (2 * l.cp) == 0) continue;
      const std::string doc = ids[start] == 0 ? "leading padding" : "document " + str(ids[start]) + " with the padding after it";
      return error(ErrorCode::cp_document_not_divisible,
                   "row " + str(b) + ", " + doc + " (tokens " + str(start) + ".." + str(end - 1) + "): length " +
                       str(end - start) + " is not a multiple of 2*cp = " + str(2 * l.cp) + " (head_tail)");
    }
  }
  return std::nullopt;
}

std::optional<Error> check_indices(const CpLayout& l, int64_t rows, int64_t t) {
  const int64_t local = t / l.cp;
  if (l.indices.shape != Shape{rows, t})
    return error(ErrorCode::cp_bad_permutation, "indices of shape " + shape_to_string(l.indices.shape) +
                                                    " where the batch is " + shape_to_string({rows, t}));
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<int64_t> slot_of(t, -1);
    for (int64_t s = 0; s < t; ++s) {
      const int64_t v = l.indices.data[b * t + s];
      const std::string where = "row " + str(b) + ", slot " + str(s) + ": index " + str(v);
      if (v < 0 || v >= t) return error(ErrorCode::cp_bad_permutation, where + " is outside [0, " + str(t) + ")");
      if (slot_of[v] >= 0)
        return error(ErrorCode::cp_bad_permutation, where + " is listed already at slot " + str(slot_of[v]));
      slot_of[v] = s;
      const int64_t before = s % local == 0 ? -1 : l.indices.data[b * t + s - 1];
      if (before > v)
        return error(ErrorCode::cp_bad_permutation, where + " follows token " + str(before) + " in rank " +
                                                        str(s / local) + ": a rank keeps its tokens in row order");
    }
  }
  return std::nullopt;
}

// Rank r's chunks c and 2*cp-1-c of [start, start + n) appended to its list.
void append_head_tail(std::vector<std::vector<int64_t>>& per_rank, int64_t start, int64_t n, int64_t cp) {
  const int64_t chunk = n / (2 * cp);
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t c : {r, 2 * cp - 1 - r})
      for (int64_t i = 0; i < chunk; ++i) per_rank[r].push_back(start + c * chunk + i);
}

std::vector<std::vector<int64_t>> rank_tokens(const CpLayout& l, const int64_t* ids, int64_t t) {
  std::vector<std::vector<int64_t>> per_rank(l.cp);
  const int64_t local = t / l.cp;
  switch (l.balance) {
    case CpBalance::contiguous:
      for (int64_t r = 0; r < l.cp; ++r)
        for (int64_t i = 0; i < local; ++i) per_rank[r].push_back(r * local + i);
      break;
    case CpBalance::dual_chunk_swap: append_head_tail(per_rank, 0, t, l.cp); break;
    case CpBalance::head_tail:
      for (const auto& [start, end] : spans(ids, t)) append_head_tail(per_rank, start, end - start, l.cp);
      break;
    case CpBalance::striped:
      for (int64_t s = 0; s < t / l.stripe; ++s)
        for (int64_t i = 0; i < l.stripe; ++i) per_rank[s % l.cp].push_back(s * l.stripe + i);
      break;
    case CpBalance::explicit_indices: break;  // read directly by cp_permutation
  }
  return per_rank;
}

MaskKind top_left(MaskKind kind) {
  if (kind == MaskKind::causal_bottom_right) return MaskKind::causal;
  if (kind == MaskKind::padding_causal_bottom_right) return MaskKind::padding_causal;
  return kind;
}

// [B, L] tokens of `rank` in `perm`, or every token in row order (rank < 0).
std::vector<int64_t> tokens_of(const std::vector<int64_t>& perm, int64_t rows, int64_t t_len, int64_t local,
                               int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(rows * (rank < 0 ? t_len : local));
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < (rank < 0 ? t_len : local); ++j)
      out.push_back(rank < 0 ? j : perm[b * t_len + rank * local + j]);
  return out;
}

// One side of a rank problem: the ids and positions of `tokens` ([B, L]).
PackedSide gather_side(const PackedBatch& batch, const BatchLayout& layout, const std::vector<int64_t>& tokens,
                       int64_t rows) {
  const int64_t len = static_cast<int64_t>(tokens.size()) / rows;
  PackedSide side{IntArray::filled({rows, len}, 0), IntArray::filled({rows, len}, 0)};
  for (int64_t b = 0; b < rows; ++b) {
    const RowView row = side_row(batch.q, {}, layout, b);
    for (int64_t j = 0; j < len; ++j) {
      side.segment_ids.data[b * len + j] = row.ids[tokens[b * len + j]];
      side.segment_pos.data[b * len + j] = row.pos[tokens[b * len + j]];
    }
  }
  return side;
}

// values [B, T, heads, d] at tokens [B, L] and heads [h0, h0 + h).
std::vector<double> gather(const std::vector<double>& values, int64_t t_len, int64_t heads, int64_t d,
                           const std::vector<int64_t>& tokens, int64_t rows, int64_t h0, int64_t h) {
  if (values.empty()) return {};
  const int64_t len = static_cast<int64_t>(tokens.size()) / rows;
  std::vector<double> out;
  out.reserve(tokens.size() * h * d);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < len; ++j) {
      const double* src = values.data() + ((b * t_len + tokens[b * len + j]) * heads + h0) * d;
      out.insert(out.end(), src, src + h * d);
    }
  return out;
}

}  // namespace

std::vector<double> cp_reorder_tokens(const std::vector<double>& values, const std::vector<int64_t>& perm,
                                      int64_t t_len, int64_t width, bool inverse) {
  std::vector<double> out(values.size(), 0.0);
  for (size_t slot = 0; slot < perm.size(); ++slot) {
    const size_t token = slot / t_len * t_len + perm[slot];
    const size_t from = inverse ? slot : token, to = inverse ? token : slot;
    std::copy_n(values.begin() + from * width, width, out.begin() + to * width);
  }
  return out;
}

std::optional<Error> cp_result_shape_error(const CpLayout& l, const AttentionProblem& p, const AttentionResult& r,
                                           bool one_rank, bool lse_required) {
  if (validate_cp(l, p)) return std::nullopt;
  const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
  const bool heads_split = one_rank && l.strategy == CpStrategy::all_to_all;
  const int64_t tokens = one_rank && !heads_split ? t_len / l.cp : t_len;
  const int64_t hq = p.shape.heads_q / (heads_split ? l.cp : 1), hkv = p.shape.heads_kv / (heads_split ? l.cp : 1);
  const int64_t d = p.shape.head_dim;
  const std::string t = one_rank ? "L" : "T";
  std::optional<Error> first;
  const auto expect = [&](const char* name, size_t got, const Shape& shape, const std::string& dims) {
    if (!first && static_cast<int64_t>(got) != shape_product(shape))
      first = Error{ErrorCode::bad_tensor_shape, std::string(name) + " holds " + std::to_string(got) + " values where " +
                                                     dims + " = " + shape_to_string(shape) + " holds " +
                                                     std::to_string(shape_product(shape))};
  };
  expect("o", r.o.size(), {rows, tokens, hq, d}, "[B, " + t + ", Hq, D]");
  if (lse_required || !r.lse.empty()) expect("lse", r.lse.size(), {rows, hq, tokens}, "[B, Hq, " + t + "]");
  if (r.grads) {
    expect("dq", r.grads->dq.size(), {rows, tokens, hq, d}, "[B, " + t + ", Hq, D]");
    expect("dk", r.grads->dk.size(), {rows, tokens, hkv, d}, "[B, " + t + ", Hkv, D]");
    expect("dv", r.grads->dv.size(), {rows, tokens, hkv, d}, "[B, " + t + ", Hkv, D]");
  }
  return first;
}

CpRankProblem cp_rank_problem(const CpLayout& l, const AttentionProblem& p, const std::vector<int64_t>& perm,
                              int64_t rank, int64_t step) {
  const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
  const int64_t local = cp_local_tokens(l, t_len);
  const BatchLayout layout = validate(p.batch).value();
  const bool heads_split = l.strategy == CpStrategy::all_to_all;
  CpRankProblem out;
  out.q_tokens = tokens_of(perm, rows, t_len, local, heads_split ? -1 : rank);
  out.kv_tokens = tokens_of(perm, rows, t_len, local, l.strategy == CpStrategy::ring ? cp_source_rank(l, rank, step) : -1);
  PackedBatch& batch = out.problem.batch;
  batch.q = gather_side(p.batch, layout, out.q_tokens, rows);
  batch.kv = gather_side(p.batch, layout, out.kv_tokens, rows);
  batch.mask = top_left(p.batch.mask);
  batch.window = p.batch.window;
  if (is_bottom_right(p.batch.mask)) batch.window.right = -1;
  batch.max_segments = p.batch.max_segments;
  out.problem.shape = p.shape;
  if (heads_split) {
    out.problem.shape.heads_q = p.shape.heads_q / l.cp;
    out.problem.shape.heads_kv = p.shape.heads_kv / l.cp;
    out.q_head0 = rank * out.problem.shape.heads_q;
    out.kv_head0 = rank * out.problem.shape.heads_kv;
  }
  return out;
}

AttentionInputs cp_rank_inputs(const CpRankProblem& rp, const AttentionProblem& p, const AttentionInputs& in) {
  const int64_t rows = p.batch.q.segment_ids.shape[0], t_len = p.batch.q.segment_ids.shape[1];
  const int64_t d = p.shape.head_dim, hq = rp.problem.shape.heads_q, hkv = rp.problem.shape.heads_kv;
  AttentionInputs out;
  out.q = gather(in.q, t_len, p.shape.heads_q, d, rp.q_tokens, rows, rp.q_head0, hq);
  out.d_o = gather(in.d_o, t_len, p.shape.heads_q, d, rp.q_tokens, rows, rp.q_head0, hq);
  out.k = gather(in.k, t_len, p.shape.heads_kv, d, rp.kv_tokens, rows, rp.kv_head0, hkv);
  out.v = gather(in.v, t_len, p.shape.heads_kv, d, rp.kv_tokens, rows, rp.kv_head0, hkv);
  return out;
}

std::string_view to_string(CpStrategy s) { return kStrategyNames[static_cast<size_t>(s)]; }
std::string_view to_string(CpBalance b) { return kBalanceNames[static_cast<size_t>(b)]; }

std::optional<CpStrategy> cp_strategy_from_string(std::string_view name) {
  for (size_t i = 0; i < kStrategyNames.size(); ++i)
    if (kStrategyNames[i] == name) return static_cast<CpStrategy>(i);
  return std::nullopt;
}

std::optional<CpBalance> cp_balance_from_string(std::string_view name) {
  for (size_t i = 0; i < kBalanceNames.size(); ++i)
    if (kBalanceNames[i] == name) return static_cast<CpBalance>(i);
  return std::nullopt;
}

int64_t cp_steps(const CpLayout& l) { return l.strategy == CpStrategy::ring ? l.cp : 1; }

int64_t cp_source_rank(const CpLayout& l, int64_t rank, int64_t step) {
  if (l.strategy != CpStrategy::ring) return rank;
  return ((rank - step) % l.cp + l.cp) % l.cp;
}

int64_t cp_local_tokens(const CpLayout& l, int64_t row_tokens) { return l.cp > 0 ? row_tokens / l.cp : 0; }

std::optional<Error> validate_cp(const CpLayout& l, const AttentionProblem& p) {
  if (auto e = check_layout_alone(l)) return e;
  const Expected<AttentionSizes> sizes = validate_attention(p);
  if (!sizes) return sizes.error();
  if (p.batch.q.segment_ids.rank() != 2 || p.batch.kv.segment_ids.rank() != 2)
    return error(ErrorCode::unsupported, "context parallelism splits [B, T] rows; these ids have extra leading dims");
  const int64_t rows = p.batch.q.segment_ids.shape[0], t = p.batch.q.segment_ids.shape[1];
  const Expected<BatchLayout> layout = validate(p.batch);
  for (int64_t b = 0; b < rows; ++b) {
    const RowView q = side_row(p.batch.q, {}, layout.value(), b), kv = side_row(p.batch.kv, {}, layout.value(), b);
    if (q.len != kv.len)
      return error(ErrorCode::cp_not_self_attention, "q has " + str(q.len) + " tokens a row and kv " + str(kv.len));
    for (int64_t i = 0; i < q.len; ++i)
      if (q.ids[i] != kv.ids[i] || q.pos[i] != kv.pos[i])
        return error(ErrorCode::cp_not_self_attention,
                     "row " + str(b) + ", token " + str(i) + ": q (id " + str(q.ids[i]) + ", position " + str(q.pos[i]) +
                         ") and kv (id " + str(kv.ids[i]) + ", position " + str(kv.pos[i]) + ") differ");
  }
  if (l.strategy == CpStrategy::all_to_all && (p.shape.heads_q % l.cp != 0 || p.shape.heads_kv % l.cp != 0))
    return error(ErrorCode::cp_heads_not_divisible, "heads_q = " + str(p.shape.heads_q) + ", heads_kv = " +
                                                        str(p.shape.heads_kv) + ": all_to_all needs both multiples of cp = " +
                                                        str(l.cp));
  if (auto e = check_divisible(l, t)) return e;
  if (l.balance == CpBalance::head_tail)
    if (auto e = check_documents(l, p.batch.q, rows, t)) return e;
  if (l.balance == CpBalance::explicit_indices)
    if (auto e = check_indices(l, rows, t)) return e;
  return std::nullopt;
}

Expected<std::vector<int64_t>> cp_permutation(const CpLayout& l, const AttentionProblem& p) {
  if (auto e = validate_cp(l, p)) return *e;
  const int64_t rows = p.batch.q.segment_ids.shape[0], t = p.batch.q.segment_ids.shape[1];
  if (l.balance == CpBalance::explicit_indices) return l.indices.data;
  std::vector<int64_t> perm;
  perm.reserve(rows * t);
  for (int64_t b = 0; b < rows; ++b)
    for (const std::vector<int64_t>& tokens : rank_tokens(l, p.batch.q.segment_ids.data.data() + b * t, t))
      perm.insert(perm.end(), tokens.begin(), tokens.end());
  return perm;
}

}  // namespace attn_oracle::model
