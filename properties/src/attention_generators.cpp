// attention_generators.cpp: attention problems: a packed batch (packed_batch)
// with heads, a head dim, a dtype, forward or backward, an optional explicit
// scale and the seed its tensors are generated from (generate_inputs). The
// mix it draws: AttentionOptions (generator_types.hpp); the budget a
// kernel-tile draw's heads are taken down to: KernelTileBudget. Also the
// nearest shape a kernel backend supports.
//
// Checked by tests/generators_test.cpp: every draw is a valid problem, and the
// default draws reach where kernels tile (documents past 256 and 1024 keys, GQA
// groups of 8, head dims 64..256) inside the budget.
#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

// The domain's dtypes among those the options draw; all of the domain's when
// they exclude each other (fp32 only asked of a backend without fp32).
std::vector<Dtype> drawable_dtypes(const AttentionOptions& o) {
  std::vector<Dtype> out;
  for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (o.batch.domain.takes_dtype(dtype) && (o.low_precision || dtype == Dtype::fp32)) out.push_back(dtype);
  return out.empty() ? o.batch.domain.dtypes : out;
}

struct Heads {
  int64_t kv, group, dim;
  Dtype dtype;
  bool backward, explicit_scale;
  bool wide_group;  // 8 query heads a kv head instead of `group`
  // With a document one key past a kernel kv tile (document_sizes.hpp): a head dim
  // of the kernels' wide path (64 or more) where the drawn one is narrower.
  bool wide_at_tile_edge;
};

// 1 draw in 4 a group of 8 (Llama-3 70B), shrinking towards the group drawn
// beside it; drawn last, so that the other draws stay as they were.
rc::Gen<bool> wide_group() { return shrinking_weighted<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}}); }

// 3 draws in 4 (shrinking towards no); drawn after wide_group, for the same reason.
rc::Gen<bool> wide_at_tile_edge() {
  return shrinking_weighted<bool>({{1, rc::gen::just(false)}, {3, rc::gen::just(true)}});
}

// The smallest of `dims` (sorted) that is 64 or more, for a draw at a tile edge; `dim` when none is.
int64_t wide_dim(const std::vector<int64_t>& dims, int64_t dim) {
  for (int64_t d : dims)
    if (d >= 64) return std::max(d, dim);
  return dim;
}

// Rows x the longer side's T (the tokens of each [rows, T, heads, D] tensor),
// and rows x Tq x Tkv (one head's scores).
struct BatchExtent {
  int64_t tokens = 0, cells = 0;
};

BatchExtent batch_extent(const PackedBatch& b) {
  const Shape& q = b.q.segment_ids.shape;
  const Shape& kv = b.kv.segment_ids.shape;
  if (q.size() < 2 || kv.size() < 2) return {};
  const int64_t rows = shape_product(Shape(q.begin(), q.end() - 1));
  return {rows * std::max(q.back(), kv.back()), rows * q.back() * kv.back()};
}

// The heads of a draw that would pass the budget (kernel_tile_budget: work
// where a document is long, elements and cells always), taken down until it
// fits: one kv head, then half the group (down to min_group: 2 keeps a GQA
// draw GQA), then the next smaller of `dims` (sorted). Short draws never reach
// it; a size menu's heads stay as they are.
Heads within_work_budget(Heads h, const DocumentSizes& docs, const BatchExtent& extent,
                         const std::vector<int64_t>& dims, int64_t min_group, const KernelTileBudget& budget) {
  const bool long_docs = docs.longest >= kLongDocMin;  // the short draws' heads stay as drawn
  auto fits = [&] {
    const int64_t heads = h.kv * h.group, width = heads * h.dim;
    return (!long_docs || docs.pairs * heads * (h.dim + kPairOverhead) <= budget.work) &&
           extent.tokens * width <= budget.elements && extent.cells * heads <= budget.cells;
  };
  if (fits()) return h;
  h.kv = 1;
  while (!fits() && h.group > min_group) h.group /= 2;
  for (auto d = dims.rbegin(); d != dims.rend() && !fits(); ++d)
    if (*d < h.dim) h.dim = *d;
  return h;
}

}  // namespace

rc::Gen<AttentionDraw> attention_draw(AttentionOptions o) {
  auto dtype = shrinking_element<Dtype>(drawable_dtypes(o));
  auto group = o.gqa ? shrinking_element<int64_t>({2, 4}) : shrinking_element<int64_t>({1, 2, 4});
  // 9 draws in 14 from {1, 2, 4, 8}, 4 in 14 the kernels' 64, 128 or 256 (where
  // a kernel's wide-head path lives); a failure shrinks towards head_dim 1.
  // A domain's head dims are drawn alike, shrinking towards the smallest.
  std::vector<int64_t> dims = o.batch.domain.head_dims;
  std::sort(dims.begin(), dims.end());
  if (dims.empty()) dims = {1, 2, 4, 8, 1, 2, 4, 8, 1, 16, 64, 64, 128, 256};
  auto dim = shrinking_element<int64_t>(dims);
  auto backward = o.backward ? rc::gen::arbitrary<bool>() : rc::gen::just(false);
  auto explicit_scale = shrinking_element<bool>({false, false, false, false, true});  // scale 0.5, 1 in 5
  auto heads = rc::gen::construct<Heads>(shrinking_element<int64_t>({1, 2}), group, dim, dtype, backward, explicit_scale,
                                         wide_group(), wide_at_tile_edge());
  // A size menu's heads, the GQA ones for `gqa` (all of them when it has none);
  // without a menu the draws stay exactly as they were.
  std::vector<std::pair<int64_t, int64_t>> menu_heads;
  for (const auto& [q, kv] : o.batch.domain.sizes.heads)
    if (!o.gqa || q > kv) menu_heads.emplace_back(kv, q / kv);
  if (menu_heads.empty())
    for (const auto& [q, kv] : o.batch.domain.sizes.heads) menu_heads.emplace_back(kv, q / kv);
  if (!menu_heads.empty())
    heads = rc::gen::mapcat(shrinking_element(menu_heads), [=](std::pair<int64_t, int64_t> kv_group) {
      return rc::gen::construct<Heads>(rc::gen::just(kv_group.first), rc::gen::just(kv_group.second), dim, dtype,
                                       backward, explicit_scale, rc::gen::just(false), rc::gen::just(false));
    });
  const bool menu = !menu_heads.empty();
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return rc::gen::map(
      rc::gen::tuple(packed_batch(o.batch), heads, rc::gen::arbitrary<uint64_t>()),
      [dims, menu, min_group = o.gqa ? int64_t{2} : int64_t{1},
       budget = kernel_tile_budget(o.batch.profile)](const std::tuple<PackedBatch, Heads, uint64_t>& t) {
        const auto& [batch, as_drawn, seed] = t;
        Heads drawn = as_drawn;
        if (drawn.wide_group) drawn.group = 8;
        if (drawn.wide_at_tile_edge && drawn.dim < 64 && document_sizes(batch).one_key_past_a_tile > 0)
          drawn.dim = wide_dim(dims, drawn.dim);
        const Heads h =
            menu ? drawn : within_work_budget(drawn, document_sizes(batch), batch_extent(batch), dims, min_group, budget);
        AttentionDraw d;
        d.problem.batch = batch;
        d.problem.shape.heads_kv = h.kv;
        d.problem.shape.heads_q = h.kv * h.group;
        d.problem.shape.head_dim = h.dim;
        d.problem.shape.dtype = h.dtype;
        d.problem.shape.backward = h.backward;
        if (h.explicit_scale) d.problem.shape.scale = 0.5;
        d.seed = seed;
        return d;
      });
}

// Kernels take only some head dims and the 16-bit dtypes, and discarding the
// draws they decline would make RapidCheck give up: widen the head dim to 64
// first, then try the dtypes a kernel is most likely to take.
AttentionShape nearest_supported_shape(const AttentionProblem& problem,
                                       const std::function<bool(const AttentionProblem&)>& supported) {
  if (supported(problem)) return problem.shape;
  AttentionProblem wider = problem;
  wider.shape.head_dim = 64;
  for (Dtype dtype : {problem.shape.dtype, Dtype::bf16, Dtype::fp16}) {
    wider.shape.dtype = dtype;
    if (supported(wider)) return wider.shape;
  }
  return problem.shape;
}

}  // namespace attn_oracle::properties
