// context_parallel_generators.cpp: see context_parallel_generators.hpp.
#include "attn_oracle/properties/context_parallel_generators.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

// Uniform in [lo, hi] whatever RapidCheck's size, shrinking towards lo.
rc::Gen<int64_t> uniform(int64_t lo, int64_t hi) { return rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1)); }

template <class T, size_t N>
std::vector<T> taken(const T (&all)[N], const std::vector<T>& listed) {
  std::vector<T> out;
  for (const T& x : all)
    if (listed.empty() || std::find(listed.begin(), listed.end(), x) != listed.end()) out.push_back(x);
  return out;
}

// Whether some length on the size menu (any, without one) is a multiple of `unit`.
bool menu_divisible(const InputDomain& d, int64_t unit) {
  if (d.sizes.tokens.empty()) return true;
  for (int64_t t : d.sizes.tokens)
    if (t % unit == 0) return true;
  return false;
}

// Under a size menu, the sizes whose chunks of 2*cp some length on it holds.
std::vector<int64_t> drawable_cp_sizes(const InputDomain& d) {
  const std::vector<int64_t> all = d.cp_sizes.empty() ? std::vector<int64_t>{2, 3, 4, 8, 1} : d.cp_sizes;
  std::vector<int64_t> out;
  for (int64_t cp : all)
    if (menu_divisible(d, 2 * cp)) out.push_back(cp);
  return out.empty() ? all : out;
}

// Long stripes only with cp = 2: a row is then 128 or 256 tokens. Under a size
// menu, the stripes some length on it holds whole rounds of.
std::vector<int64_t> drawable_stripes(const InputDomain& d, int64_t cp) {
  std::vector<int64_t> all = d.cp_stripes.empty() ? std::vector<int64_t>{1, 2, 3, 64, 128} : d.cp_stripes;
  std::vector<int64_t> out;
  for (int64_t s : all)
    if ((s < 64 || cp <= 2) && menu_divisible(d, cp * s)) out.push_back(s);
  return out.empty() ? all : out;
}

constexpr MaskKind kMaskOrder[] = {MaskKind::causal,  MaskKind::padding_causal, MaskKind::no_mask, MaskKind::padding,
                                   MaskKind::causal_bottom_right, MaskKind::padding_causal_bottom_right};

std::vector<Dtype> drawable_dtypes(const InputDomain& d) {
  std::vector<Dtype> out;
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (d.takes_dtype(t)) out.push_back(t);
  return out;
}

// The unit a row's length must be a multiple of (context_parallel.hpp, rule 6).
int64_t row_unit(const CpLayout& l) {
  if (l.balance == CpBalance::dual_chunk_swap || l.balance == CpBalance::head_tail) return 2 * l.cp;
  if (l.balance == CpBalance::striped) return l.cp * l.stripe;
  return l.cp;
}

// The units a document's length is drawn around: the layout's, and for stripes
// the lengths that end a stripe short of a full round.
std::vector<int64_t> document_units(const CpLayout& l) {
  std::vector<int64_t> units = {row_unit(l)};
  if (l.balance == CpBalance::striped) {
    if (l.cp > 1) units.push_back((l.cp - 1) * l.stripe);
    units.push_back(l.stripe);
  }
  if (l.balance == CpBalance::contiguous || l.balance == CpBalance::explicit_indices) units.push_back(2 * l.cp);
  return units;
}

// One document: its length class around a unit, and the padding after it.
struct DocDraw {
  int64_t length = 1, pad_after = 0;
};

// A document as drawn, before the layout gives it a unit: which unit, how many
// of it, the class (at, one below, one above a multiple, 1 token, odd, free)
// and the padding after it. Drawn apart from the layout, so that a layout
// shrinks (cp 8 to 2) while the documents keep their shape.
struct DocKnob {
  int64_t unit = 0, k = 1, kind = 0, free = 1, pad = 0;
};

rc::Gen<DocKnob> doc_knob() {
  return rc::gen::build<DocKnob>(
      rc::gen::set(&DocKnob::unit, uniform(0, 2)), rc::gen::set(&DocKnob::k, uniform(1, 3)),
      rc::gen::set(&DocKnob::kind, uniform(0, 5)), rc::gen::set(&DocKnob::free, uniform(1, 48)),
      rc::gen::set(&DocKnob::pad, shrinking_weighted<int64_t>({{3, rc::gen::just<int64_t>(0)}, {1, uniform(1, 3)}})));
}

// 1..4 documents: 0..3 in a container (any can be dropped while shrinking) and one more.
template <class T>
rc::Gen<std::vector<T>> one_to_four(rc::Gen<T> one) {
  return rc::gen::map(rc::gen::pair(rc::gen::resize(3, rc::gen::container<std::vector<T>>(one)), one), [](auto t) {
    t.first.push_back(t.second);
    return t.first;
  });
}

DocDraw resolve(const DocKnob& knob, const std::vector<int64_t>& units, bool padding) {
  const int64_t u = std::max<int64_t>(1, units[knob.unit % units.size()]);
  const int64_t k = u >= 64 ? 1 : knob.k;
  int64_t length = 1;
  switch (knob.kind) {
    case 0: length = k * u; break;
    case 1: length = std::max<int64_t>(1, k * u - 1); break;
    case 2: length = k * u + 1; break;
    case 3: length = 1; break;
    case 4: length = 2 * (knob.free % std::max<int64_t>(1, u + 1)) + 1; break;
    default: length = 1 + (knob.free - 1) % std::min<int64_t>(3 * u, 48);
  }
  return {length, padding ? knob.pad : 0};
}

// Under a size menu, rows longer than its longest length the unit divides lose
// documents from their end, and a last one too long is cut (a span stays a
// multiple of the unit: the menu length is one).
void trim_to_menu(int64_t unit, std::vector<std::vector<DocDraw>>& rows, std::vector<int64_t>& tails,
                  const std::vector<int64_t>& token_menu) {
  int64_t longest = 0;
  for (int64_t m : token_menu)
    if (m % unit == 0) longest = std::max(longest, m);
  if (longest == 0) return;
  for (size_t b = 0; b < rows.size(); ++b) {
    auto length = [&] {
      int64_t len = tails[b];
      for (const DocDraw& d : rows[b]) len += d.length + d.pad_after;
      return len;
    };
    while (length() > longest && rows[b].size() > 1) rows[b].pop_back();
    if (length() <= longest) continue;
    tails[b] = 0;
    DocDraw& only = rows[b].front();
    only.pad_after = std::min(only.pad_after, longest - 1);
    only.length = longest - only.pad_after;
  }
}

// Grows documents (or their padding) until every precondition of the layout holds:
// spans of 2*cp under head_tail, then rows of one length, a multiple of the row
// unit, and on the size menu when one is given (the smallest such length on it).
void meet_preconditions(const CpLayout& l, std::vector<std::vector<DocDraw>>& rows, std::vector<int64_t>& tails,
                        bool padding, const std::vector<int64_t>& token_menu) {
  const int64_t unit = row_unit(l);
  if (l.balance == CpBalance::head_tail)
    for (auto& row : rows)
      for (DocDraw& d : row) {
        const int64_t short_by = (2 * l.cp - (d.length + d.pad_after) % (2 * l.cp)) % (2 * l.cp);
        (padding ? d.pad_after : d.length) += short_by;
      }
  if (l.balance == CpBalance::head_tail) std::fill(tails.begin(), tails.end(), 0);  // padding joins the last span
  trim_to_menu(unit, rows, tails, token_menu);
  int64_t t = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    int64_t len = tails[b];
    for (const DocDraw& d : rows[b]) len += d.length + d.pad_after;
    t = std::max(t, len);
  }
  t = (t + unit - 1) / unit * unit;
  std::optional<int64_t> on_menu;
  for (int64_t m : token_menu)
    if (m >= t && m % unit == 0 && (!on_menu || m < *on_menu)) on_menu = m;
  t = on_menu.value_or(t);
  for (size_t b = 0; b < rows.size(); ++b) {
    int64_t len = tails[b];
    for (const DocDraw& d : rows[b]) len += d.length + d.pad_after;
    if (!padding) rows[b].back().length += t - len;
    else if (l.balance == CpBalance::head_tail) rows[b].back().pad_after += t - len;
    else tails[b] += t - len;
  }
}

enum class PositionMode { from_zero, through_padding, over_the_row, offset };

PackedBatch build(const std::vector<std::vector<DocDraw>>& rows, const std::vector<int64_t>& tails, PositionMode mode,
                  uint64_t offsets_seed) {
  int64_t t = tails[0], m = 1;
  for (const DocDraw& d : rows[0]) t += d.length + d.pad_after;
  const int64_t b = static_cast<int64_t>(rows.size());
  for (const auto& row : rows) m = std::max<int64_t>(m, static_cast<int64_t>(row.size()));
  PackedSide side{IntArray::filled({b, t}, 0), IntArray::filled({b, t}, 0)};
  std::mt19937_64 offsets(offsets_seed);
  for (int64_t r = 0; r < b; ++r) {
    int64_t at = r * t, counted = 0;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const int64_t start = mode == PositionMode::offset ? static_cast<int64_t>(offsets() % 8) : 0;
      for (int64_t j = 0; j < rows[r][i].length; ++j, ++at, ++counted) {
        side.segment_ids.data[at] = static_cast<int64_t>(i) + 1;
        side.segment_pos.data[at] = mode == PositionMode::over_the_row ? at - r * t : start + j;
      }
      for (int64_t j = 0; j < rows[r][i].pad_after; ++j, ++at, ++counted)
        side.segment_pos.data[at] = mode == PositionMode::from_zero || mode == PositionMode::offset
                                        ? 0
                                        : (mode == PositionMode::over_the_row ? at - r * t : rows[r][i].length + j);
    }
    for (; counted < t; ++at, ++counted) side.segment_pos.data[at] = mode == PositionMode::over_the_row ? at - r * t : 0;
  }
  PackedBatch batch;
  batch.q = batch.kv = side;
  batch.max_segments = m;
  return batch;
}

// Each rank's tokens drawn at random (seed 0: contiguous), kept in row order.
IntArray explicit_indices(int64_t rows, int64_t t, int64_t cp, uint64_t seed) {
  IntArray out = IntArray::filled({rows, t}, 0);
  std::mt19937_64 rng(seed);
  const int64_t local = t / cp;
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<int64_t> tokens(t);
    for (int64_t i = 0; i < t; ++i) tokens[i] = i;
    if (seed != 0) std::shuffle(tokens.begin(), tokens.end(), rng);
    for (int64_t r = 0; r < cp; ++r) std::sort(tokens.begin() + r * local, tokens.begin() + (r + 1) * local);
    std::copy(tokens.begin(), tokens.end(), out.data.begin() + b * t);
  }
  return out;
}

// The layout and everything else a draw picks besides its documents, as
// indices into the domain's lists (resolved by draw_from_knobs).
struct LayoutKnob {
  int64_t strategy = 0, balance = 0, cp = 0, stripe = 0, mask = 0, positions = 0, spare = 0;
  bool window = false;
  int64_t left = -1, right = -1;
  uint32_t explicit_seed = 0, offsets_seed = 0;
};

struct ShapeKnob {
  int64_t kv_heads = 1, group = 1, head_dim = 0, dtype = 0;
  bool backward = false;
  uint32_t seed = 0;
};

struct RowsKnob {
  std::vector<std::vector<DocKnob>> rows;
  std::vector<int64_t> tails;
};

rc::Gen<LayoutKnob> layout_knob() {
  const auto window_side = shrinking_weighted<int64_t>({{1, rc::gen::just<int64_t>(-1)}, {3, uniform(0, 8)}});
  return rc::gen::build<LayoutKnob>(
      rc::gen::set(&LayoutKnob::strategy, uniform(0, 2)), rc::gen::set(&LayoutKnob::balance, uniform(0, 4)),
      rc::gen::set(&LayoutKnob::cp, uniform(0, 4)), rc::gen::set(&LayoutKnob::stripe, uniform(0, 4)),
      rc::gen::set(&LayoutKnob::mask, uniform(0, 5)), rc::gen::set(&LayoutKnob::positions, uniform(0, 3)),
      rc::gen::set(&LayoutKnob::spare, uniform(0, 1)),
      rc::gen::set(&LayoutKnob::window, shrinking_weighted<bool>({{4, rc::gen::just(false)}, {1, rc::gen::just(true)}})),
      rc::gen::set(&LayoutKnob::left, window_side), rc::gen::set(&LayoutKnob::right, window_side),
      rc::gen::set(&LayoutKnob::explicit_seed, rc::gen::arbitrary<uint32_t>()),
      rc::gen::set(&LayoutKnob::offsets_seed, rc::gen::arbitrary<uint32_t>()));
}

rc::Gen<ShapeKnob> shape_knob() {
  return rc::gen::build<ShapeKnob>(
      rc::gen::set(&ShapeKnob::kv_heads, uniform(1, 2)), rc::gen::set(&ShapeKnob::group, uniform(1, 2)),
      rc::gen::set(&ShapeKnob::head_dim, shrinking_weighted<int64_t>({{4, uniform(0, 1)}, {1, rc::gen::just<int64_t>(2)}})), rc::gen::set(&ShapeKnob::dtype, uniform(0, 2)),
      rc::gen::set(&ShapeKnob::backward, rc::gen::arbitrary<bool>()),
      rc::gen::set(&ShapeKnob::seed, rc::gen::arbitrary<uint32_t>()));
}

rc::Gen<RowsKnob> rows_knob() {
  const auto row = one_to_four(doc_knob());
  const auto rows = rc::gen::map(rc::gen::pair(rc::gen::resize(2, rc::gen::container<std::vector<std::vector<DocKnob>>>(row)), row),
                                 [](auto t) {
                                   t.first.push_back(t.second);
                                   return t.first;
                                 });
  const auto tail = shrinking_weighted<int64_t>({{2, rc::gen::just<int64_t>(0)}, {1, uniform(1, 3)}});
  return rc::gen::map(rc::gen::pair(rows, rc::gen::container<std::vector<int64_t>>(3, tail)), [](auto t) {
    return RowsKnob{t.first, t.second};
  });
}

template <class T>
T pick(const std::vector<T>& list, int64_t index) {
  return list[static_cast<size_t>(index) % list.size()];
}

CpDraw draw_from_knobs(const CpOptions& o, const LayoutKnob& lk, const RowsKnob& rk, const ShapeKnob& sk) {
  const InputDomain& dom = o.domain;
  CpDraw d;
  CpLayout& l = d.layout;
  l.strategy = pick(taken(kAllCpStrategies, dom.cp_strategies), lk.strategy);
  l.balance = pick(taken(kAllCpBalances, dom.cp_balances), lk.balance);
  l.cp = pick(drawable_cp_sizes(dom), lk.cp);
  if (l.strategy == CpStrategy::all_to_all && !dom.sizes.heads.empty()) {  // a cp the menu's heads split
    const auto splits = [&](int64_t cp) {
      return std::any_of(dom.sizes.heads.begin(), dom.sizes.heads.end(),
                         [cp](const auto& h) { return h.first % cp == 0 && h.second % cp == 0; });
    };
    for (int64_t cp : drawable_cp_sizes(dom))
      if (!splits(l.cp) && splits(cp)) l.cp = cp;
  }
  if (l.balance == CpBalance::striped) l.stripe = pick(drawable_stripes(dom, l.cp), lk.stripe);
  const MaskKind mask = pick(taken(kMaskOrder, dom.mask_kinds), lk.mask);
  const bool padding = allows_padding(mask) && !dom.no_padding;
  const int64_t max_rows = std::min<int64_t>(dom.max_rows > 0 ? dom.max_rows : 3, l.stripe >= 64 ? 1 : 3);
  const std::vector<int64_t> units = document_units(l);
  std::vector<std::vector<DocDraw>> rows;
  for (size_t r = 0; r < rk.rows.size() && static_cast<int64_t>(r) < max_rows; ++r) {
    rows.emplace_back();
    for (const DocKnob& k : rk.rows[r]) rows.back().push_back(resolve(k, units, padding));
  }
  std::vector<int64_t> tails(rows.size(), 0);
  for (size_t r = 0; padding && r < rows.size(); ++r) tails[r] = rk.tails[r];
  if (!dom.sizes.rows.empty()) {  // as many rows as the menu's nearest size, the last one repeated
    int64_t want = next_on_menu(dom.sizes.rows, static_cast<int64_t>(rows.size()));
    if (std::find(dom.sizes.rows.begin(), dom.sizes.rows.end(), want) == dom.sizes.rows.end())
      want = *std::max_element(dom.sizes.rows.begin(), dom.sizes.rows.end());
    while (static_cast<int64_t>(rows.size()) < want) rows.push_back(rows.back()), tails.push_back(tails.back());
    while (static_cast<int64_t>(rows.size()) > want) rows.pop_back(), tails.pop_back();
  }
  meet_preconditions(l, rows, tails, padding, dom.sizes.tokens);
  const PositionMode mode = dom.positions_from_zero ? PositionMode::from_zero : static_cast<PositionMode>(lk.positions);
  d.problem.batch = build(rows, tails, mode, lk.offsets_seed);
  d.problem.batch.mask = mask;
  d.problem.batch.max_segments += lk.spare;
  if (!dom.sizes.max_segments.empty())
    d.problem.batch.max_segments = next_on_menu(dom.sizes.max_segments, d.problem.batch.max_segments);
  if (o.windows && dom.windows && lk.window) {
    Window& w = d.problem.batch.window;
    w.left = lk.left;
    if (!is_causal(mask)) w.right = dom.causal_windows_only ? 0 : lk.right;
    if (w.left < 0 && w.right < 0) w.left = 0;
  }
  const int64_t b = d.problem.batch.q.segment_ids.shape[0], t = d.problem.batch.q.segment_ids.shape[1];
  if (l.balance == CpBalance::explicit_indices) l.indices = explicit_indices(b, t, l.cp, lk.explicit_seed);
  AttentionShape& s = d.problem.shape;
  const int64_t per_rank = l.strategy == CpStrategy::all_to_all ? l.cp : 1;
  s.heads_kv = per_rank * (per_rank > 2 ? 1 : sk.kv_heads);
  s.heads_q = s.heads_kv * sk.group;
  for (const auto& [hq, hkv] : dom.sizes.heads)  // the first menu pair the strategy can split
    if (hq % per_rank == 0 && hkv % per_rank == 0) {
      s.heads_q = hq, s.heads_kv = hkv;
      break;
    }
  // 64: the smallest head dim the CUDA kernels instantiate (their CP draws would all be declined without it).
  s.head_dim = pick(dom.head_dims.empty() ? std::vector<int64_t>{4, 8, 64} : dom.head_dims, sk.head_dim);
  s.dtype = pick(drawable_dtypes(dom), sk.dtype);
  s.backward = o.backward && sk.backward;
  d.seed = sk.seed;
  return d;
}

}  // namespace

rc::Gen<CpDraw> cp_draw(const CpOptions& o) {
  return rc::gen::map(rc::gen::tuple(layout_knob(), rows_knob(), shape_knob()),
                      [o](const std::tuple<LayoutKnob, RowsKnob, ShapeKnob>& t) {
                        return draw_from_knobs(o, std::get<0>(t), std::get<1>(t), std::get<2>(t));
                      })
      .as("context-parallel call");
}

namespace {

enum class Break { layout, self_attention, heads, row_length, span, permutation };

// Moves the first token of a later span's document into the span before it
// (its padding, or its document): the spans' lengths move off 2*cp, the row's do not.
bool shift_span_boundary(PackedBatch& batch) {
  const int64_t rows = batch.q.segment_ids.shape[0], t = batch.q.segment_ids.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t* ids = batch.q.segment_ids.data.data() + r * t;
    int64_t* pos = batch.q.segment_pos.data.data() + r * t;
    for (int64_t s = 1; s + 1 < t; ++s) {
      if (ids[s] == 0 || ids[s] == ids[s - 1] || ids[s + 1] != ids[s]) continue;  // a document of 2+ tokens starts at s
      if (ids[s - 1] == 0) {
        ids[s] = 0;
      } else {
        ids[s] = ids[s - 1];
        pos[s] = pos[s - 1] + 1;
      }
      batch.kv = batch.q;
      return true;
    }
  }
  return false;
}

InvalidCpDraw broken(CpDraw d, Break what, int64_t variant) {
  CpLayout& l = d.layout;
  PackedBatch& batch = d.problem.batch;
  const int64_t rows = batch.q.segment_ids.shape[0], t = batch.q.segment_ids.shape[1];
  switch (what) {
    case Break::layout:
      if (variant == 0) l.cp = -l.cp + 1;  // 0 or negative
      else if (variant == 1) l.balance = CpBalance::striped, l.stripe = 0, l.indices = {};
      else if (l.balance != CpBalance::explicit_indices) l.indices = explicit_indices(rows, t, 1, 0);
      else l.cp = 0;
      return {d, ErrorCode::cp_bad_layout};
    case Break::self_attention:
      for (int64_t i = rows * t - 1; i >= 0; --i)
        if (batch.kv.segment_ids.data[i] != 0) {
          batch.kv.segment_pos.data[i] += 1;  // still after the token before it
          break;
        }
      return {d, ErrorCode::cp_not_self_attention};
    case Break::heads:
      l.strategy = CpStrategy::all_to_all;
      d.problem.shape.heads_q = d.problem.shape.heads_kv = 1;
      return {d, ErrorCode::cp_heads_not_divisible};
    case Break::row_length: {
      for (IntArray* a : {&batch.q.segment_ids, &batch.q.segment_pos}) {
        IntArray cut = IntArray::filled({rows, t - 1}, 0);
        for (int64_t r = 0; r < rows; ++r) std::copy_n(a->data.begin() + r * t, t - 1, cut.data.begin() + r * (t - 1));
        *a = cut;
      }
      batch.kv = batch.q;
      return {d, ErrorCode::cp_not_divisible};
    }
    case Break::span:  // shift_span_boundary moved the tokens already
      return {d, ErrorCode::cp_document_not_divisible};
    case Break::permutation:
      l.indices = explicit_indices(rows, t, l.cp, 0);
      l.balance = CpBalance::explicit_indices, l.stripe = 1;
      if (variant == 0) l.indices.data[1] = l.indices.data[0];
      else if (variant == 1) l.indices.data[0] = t;
      else std::swap(l.indices.data[0], l.indices.data[1]);
      return {d, ErrorCode::cp_bad_permutation};
  }
  return {d, ErrorCode::cp_bad_layout};
}

}  // namespace

rc::Gen<InvalidCpDraw> invalid_cp_draw(const CpOptions& o) {
  // Each break inside the domain's strategies, balances and self-attention; cp of
  // 2 and more, so that a row of T - 1 tokens splits unevenly.
  const InputDomain& dom = o.domain;
  std::vector<Break> breaks = {Break::row_length, Break::layout};
  if (!dom.self_attention_only) breaks.push_back(Break::self_attention);
  if (dom.takes_cp_strategy(CpStrategy::all_to_all)) breaks.push_back(Break::heads);
  if (dom.takes_cp_balance(CpBalance::head_tail)) breaks.push_back(Break::span);
  if (dom.takes_cp_balance(CpBalance::explicit_indices)) breaks.push_back(Break::permutation);
  CpOptions valid = o;
  valid.windows = false;
  valid.domain.cp_sizes.clear();
  for (int64_t cp : dom.cp_sizes.empty() ? std::vector<int64_t>{2, 3, 4} : dom.cp_sizes)
    if (cp >= 2) valid.domain.cp_sizes.push_back(cp);
  if (valid.domain.cp_sizes.empty()) valid.domain.cp_sizes = {2};
  return rc::gen::exec([valid, breaks] {
    const Break what = *shrinking_element(breaks);
    int64_t variant = *uniform(0, 2);
    CpOptions these = valid;
    if (what == Break::heads) these.domain.cp_strategies = {CpStrategy::all_to_all};
    if (what == Break::span) these.domain.cp_balances = {CpBalance::head_tail};
    if (what == Break::permutation) these.domain.cp_balances = {CpBalance::explicit_indices};
    CpDraw d = *cp_draw(these);
    if (what == Break::span && !shift_span_boundary(d.problem.batch)) return broken(d, Break::row_length, 0);
    if (what == Break::layout && variant == 1 && !valid.domain.takes_cp_balance(CpBalance::striped)) variant = 0;
    if (what == Break::permutation && variant == 2 && d.problem.batch.q.segment_ids.shape[1] / d.layout.cp < 2)
      variant = 0;
    return broken(d, what, variant);
  });
}

Case cp_case(const CpDraw& d) {
  return Case{ContextParallelCase{d.layout, AttentionCase{d.problem, d.seed, std::nullopt}}, {}, {}, {}};
}

std::vector<std::string> cp_classes(const CpLayout& l, const AttentionProblem& p) {
  std::set<std::string> out;
  out.insert("cp=" + std::to_string(l.cp));
  out.insert(std::string(to_string(l.strategy)) + " / " + std::string(to_string(l.balance)));
  if (l.balance == CpBalance::striped)
    out.insert(l.stripe == 1 ? "stripe 1" : l.stripe < 64 ? "stripe 2-63" : "stripe " + std::to_string(l.stripe));
  const PackedBatch& b = p.batch;
  if (b.q.segment_ids.rank() != 2 || l.cp < 1) return {out.begin(), out.end()};
  const int64_t rows = b.q.segment_ids.shape[0], t = b.q.segment_ids.shape[1];
  const int64_t unit = row_unit(l);
  const int64_t chunk = l.balance == CpBalance::striped ? l.stripe
                        : l.balance == CpBalance::dual_chunk_swap ? std::max<int64_t>(1, t / (2 * l.cp))
                                                                  : std::max<int64_t>(1, t / l.cp);
  const std::string unit_name = l.balance == CpBalance::striped ? "cp*stripe"
                                : (l.balance == CpBalance::dual_chunk_swap || l.balance == CpBalance::head_tail) ? "2*cp"
                                                                                                                  : "cp";
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* ids = b.q.segment_ids.data.data() + r * t;
    int64_t docs = 0;
    for (int64_t s = 0; s < t;) {
      int64_t e = s + 1;
      while (e < t && ids[e] == ids[s]) ++e;
      if (ids[s] == 0) {
        out.insert(e == t ? "padding at the tail" : s == 0 ? "padding at the head" : "padding between documents");
      } else {
        ++docs;
        const int64_t n = e - s;
        if (n == 1) out.insert("1-token document");
        else if (n % 2 == 1) out.insert("odd document");
        if (unit > 1 && n % unit == 0) out.insert("document at a multiple of " + unit_name);
        if (unit > 1 && n % unit == unit - 1) out.insert("document one below a multiple of " + unit_name);
        if (unit > 1 && n % unit == 1 && n > 1) out.insert("document one above a multiple of " + unit_name);
        if (l.balance != CpBalance::head_tail) {
          if (s > 0 && s % chunk == 0) out.insert("document starts on a chunk boundary");
          if (e < t && e % chunk == 0) out.insert("document ends on a chunk boundary");
          if (s / chunk != (e - 1) / chunk) out.insert("document straddles a chunk boundary");
        }
      }
      s = e;
    }
    if (docs > 1) out.insert("several documents a row");
  }
  for (int64_t r = 1; r < rows; ++r)
    if (!std::equal(b.q.segment_ids.data.begin(), b.q.segment_ids.data.begin() + t, b.q.segment_ids.data.begin() + r * t))
      out.insert("rows of different structure");
  out.insert(std::string(to_string(b.mask)));
  if (b.window != Window{}) out.insert("window");
  if (p.shape.backward) out.insert("backward");
  if (p.shape.heads_q > p.shape.heads_kv) out.insert("GQA");
  return {out.begin(), out.end()};
}

void showValue(const CpDraw& d, std::ostream& os) {
  os << "cp=" << d.layout.cp << " " << to_string(d.layout.strategy) << " " << to_string(d.layout.balance);
  if (d.layout.balance == CpBalance::striped) os << " stripe=" << d.layout.stripe;
  os << " mask=" << to_string(d.problem.batch.mask) << " ids=" << shape_to_string(d.problem.batch.q.segment_ids.shape);
}

void showValue(const InvalidCpDraw& d, std::ostream& os) {
  showValue(d.draw, os);
  os << " expecting " << to_string(d.expected);
}

}  // namespace attn_oracle::properties
