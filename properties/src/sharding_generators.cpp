// sharding_generators.cpp: valid and invalid sharded attention calls (see
// sharding_generators.hpp). A layout (mesh, axis roles, sizes per shard, batch
// parameters) is drawn first; `build` turns it into specs, shapes and the
// packed batch, so shrinking acts on the layout and every shrunk draw is still
// what it was tagged as.
#include "attn_oracle/properties/sharding_generators.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <tuple>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

namespace attn_oracle::inline properties {
namespace {

namespace gen = rc::gen;

constexpr const char* kAxisNames[] = {"fsdp", "context", "tensor"};
enum Role { kUnused = 0, kBatch = 1, kSequence = 2, kHeads = 3 };


struct RowParams {
  int docs = 1;                       // 1..3
  std::array<int, 3> q_len{}, kv_len{};  // 1..4 each
  int q_start = 0, kv_start = 0;      // first position of every document
  bool pad_tail = false;              // padding kinds: trailing padding
};

// One of the three mesh slots ('fsdp', 'context', 'tensor'). Each slot carries its
// own size and role, so shrinking one slot (dropping it, size towards 1, role
// towards unused) leaves the others' shard counts alone: no shrink step can turn
// a sharded sequence or sharded heads into another layout behind a mesh change.
struct AxisDraw {
  bool present = true;  // when no slot is, slot 0 is
  int64_t size = 1;     // 1..8, capped so that the mesh has at most 8 devices
  int role = kUnused;
};

struct Layout {
  std::array<AxisDraw, 3> axes;
  bool reverse_tuples = false;
  bool gqa_exception = false;
  int rows_per = 1, q_per = 1, kv_per = 1, hkv_per = 1, group = 1, head_dim = 1;
  MaskKind mask = MaskKind::padding;
  Window window;
  Dtype dtype = Dtype::fp32;
  bool backward = true;
  std::vector<RowParams> rows;  // row r uses rows[r % size]
  uint64_t seed = 0;
};

rc::Gen<RowParams> row_params() {
  const auto lens = gen::container<std::array<int, 3>>(shrinking_element<int>({1, 2, 3, 4}));
  return gen::build<RowParams>(gen::set(&RowParams::docs, shrinking_element<int>({1, 2, 3})),
                               gen::set(&RowParams::q_len, lens),
                               gen::set(&RowParams::kv_len, lens),
                               gen::set(&RowParams::q_start, shrinking_element<int>({0, 1, 2})),
                               gen::set(&RowParams::kv_start, shrinking_element<int>({0, 1, 2})),
                               gen::set(&RowParams::pad_tail, shrinking_element<bool>({false, true})));
}

rc::Gen<Window> window_gen() {
  const auto side = shrinking_element<int64_t>({-1, 0, 1, 2});
  return shrinking_weighted<Window>(
      {{3, gen::just(Window{})},
       {1, gen::map(gen::pair(side, side), [](const std::pair<int64_t, int64_t>& p) { return Window{p.first, p.second}; })}});
}

// Sizes lean small so that three-axis meshes often shard on more than one axis;
// every size shrinks towards 1 through the smaller ones. Two slots in three are
// present (1, 2 or 3 axes about 7:12:8); a slot shrinks towards absent.
rc::Gen<AxisDraw> axis_draw() {
  return gen::build<AxisDraw>(
      gen::set(&AxisDraw::present, shrinking_element<bool>({false, true, true})),
      gen::set(&AxisDraw::size, shrinking_element<int64_t>({1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 6, 7, 8})),
      gen::set(&AxisDraw::role, shrinking_element<int>({kUnused, kBatch, kSequence, kHeads})));
}

std::array<AxisDraw, 3> to_array(const AxisDraw& a, const AxisDraw& b, const AxisDraw& c) { return {a, b, c}; }

rc::Gen<Layout> layout_gen() {
  return gen::build<Layout>(
        gen::set(&Layout::axes, gen::map(gen::tuple(axis_draw(), axis_draw(), axis_draw()),
                                         [](const auto& t) { return std::apply(to_array, t); })),
        gen::set(&Layout::reverse_tuples, shrinking_element<bool>({false, true})),
        gen::set(&Layout::gqa_exception, shrinking_element<bool>({false, true})),
        gen::set(&Layout::rows_per, shrinking_element<int>({1, 2})), gen::set(&Layout::q_per, shrinking_element<int>({1, 2, 3})),
        gen::set(&Layout::kv_per, shrinking_element<int>({1, 2, 3})), gen::set(&Layout::hkv_per, shrinking_element<int>({1, 2})),
        gen::set(&Layout::group, shrinking_element<int>({1, 2})), gen::set(&Layout::head_dim, shrinking_element<int>({1, 2, 4})),
        gen::set(&Layout::mask, shrinking_element(std::vector<MaskKind>(std::begin(kAllMaskKinds), std::end(kAllMaskKinds)))),
        gen::set(&Layout::window, window_gen()),
        gen::set(&Layout::dtype, shrinking_element<Dtype>({Dtype::fp32, Dtype::fp32, Dtype::fp32, Dtype::bf16})),
        gen::set(&Layout::backward, shrinking_element<bool>({true, true, true, false})),
        gen::set(&Layout::rows, gen::container<std::vector<RowParams>>(4, row_params())),
        gen::set(&Layout::seed, gen::arbitrary<uint64_t>()));
}

constexpr int64_t kMaxDevices = 8;

struct PlacedAxis {
  const char* name;
  int64_t size;
  int role;
};

// The present slots in slot order (slot 0 alone when none is); a size that
// would take the mesh past kMaxDevices is cut to the most that fits.
std::vector<PlacedAxis> placed_axes(const Layout& l) {
  const bool none = std::none_of(l.axes.begin(), l.axes.end(), [](const AxisDraw& a) { return a.present; });
  std::vector<PlacedAxis> out;
  int64_t devices = 1;
  for (size_t slot = 0; slot < l.axes.size(); ++slot) {
    const AxisDraw& a = l.axes[slot];
    if (!a.present && !(none && slot == 0)) continue;
    const int64_t size = std::min(a.size, kMaxDevices / devices);
    devices *= size;
    out.push_back(PlacedAxis{kAxisNames[slot], size, a.role});
  }
  return out;
}

Mesh mesh_of(const Layout& l) {
  Mesh mesh;
  for (const PlacedAxis& a : placed_axes(l)) mesh.axes.push_back(MeshAxis{a.name, a.size});
  return mesh;
}

DimSharding axes_with_role(const Layout& l, int role) {
  DimSharding dim;
  for (const PlacedAxis& a : placed_axes(l))
    if (a.role == role) dim.push_back(a.name);
  if (l.reverse_tuples) std::reverse(dim.begin(), dim.end());
  return dim;
}

int64_t count_of(const Layout& l, int role) {
  int64_t n = 1;
  for (const PlacedAxis& a : placed_axes(l))
    if (a.role == role) n *= a.size;
  return n;
}

struct Built {
  Sharding sharding;
  ShardedShapes shapes;
};

Built specs_and_shapes(const Layout& l) {
  Built b;
  b.sharding.mesh = mesh_of(l);
  const DimSharding batch = axes_with_role(l, kBatch), seq = axes_with_role(l, kSequence), heads = axes_with_role(l, kHeads);
  b.sharding.q = partition_spec({batch, seq, heads, {}});
  b.sharding.k = b.sharding.v = partition_spec({batch, seq, l.gqa_exception ? DimSharding{} : heads, {}});
  b.sharding.segment_ids = partition_spec({batch, seq});
  const int64_t n_seq = count_of(l, kSequence);
  b.shapes.batch = count_of(l, kBatch) * l.rows_per;
  b.shapes.q_len = n_seq * l.q_per;
  b.shapes.kv_len = n_seq * l.kv_per;
  b.shapes.heads_kv = count_of(l, kHeads) * l.hkv_per;
  b.shapes.heads_q = b.shapes.heads_kv * l.group;
  b.shapes.head_dim = l.head_dim;
  return b;
}

// One side of one row: documents 1..docs in order, each up to its length while
// tokens last; the rest is padding (padding kinds) or the last document's.
void fill_side(const RowParams& r, const std::array<int, 3>& lens, int start, bool padding_kind, int64_t T,
               std::vector<int64_t>& ids, std::vector<int64_t>& pos) {
  int64_t t = 0;
  for (int k = 0; k < r.docs && t < T; ++k) {
    const int64_t len = lens[k];
    for (int64_t i = 0; i < len && t < T; ++i, ++t) {
      ids.push_back(k + 1);
      pos.push_back(start + i);
    }
  }
  const bool pad = padding_kind && r.pad_tail;
  for (; t < T; ++t) {
    ids.push_back(pad ? 0 : ids.back());
    pos.push_back(pad ? 0 : pos.back() + 1);
  }
}

// Bottom-right kinds never meet a sharded sequence (sharded_execution.hpp): the top-left twin.
void keep_bottom_right_off_a_sharded_sequence(PackedBatch& batch) {
  if (is_bottom_right(batch.mask)) batch.mask = allows_padding(batch.mask) ? MaskKind::padding_causal : MaskKind::causal;
}

ShardingDraw build(const Layout& l, const Built& b) {
  ShardingDraw d;
  d.sharding = b.sharding;
  d.seed = l.seed;
  const ShardedShapes& z = b.shapes;
  PackedBatch& batch = d.problem.batch;
  batch.mask = l.mask;
  if (count_of(l, kSequence) > 1) keep_bottom_right_off_a_sharded_sequence(batch);
  batch.window = l.window;
  std::vector<int64_t> qi, qp, ki, kp;
  int max_docs = 1;
  for (int64_t r = 0; r < z.batch; ++r) {
    const RowParams& row = l.rows[r % l.rows.size()];
    max_docs = std::max(max_docs, row.docs);
    fill_side(row, row.q_len, row.q_start, allows_padding(batch.mask), z.q_len, qi, qp);
    fill_side(row, row.kv_len, row.kv_start, allows_padding(batch.mask), z.kv_len, ki, kp);
  }
  batch.max_segments = max_docs;
  batch.q = PackedSide{IntArray({z.batch, z.q_len}, qi), IntArray({z.batch, z.q_len}, qp)};
  batch.kv = PackedSide{IntArray({z.batch, z.kv_len}, ki), IntArray({z.batch, z.kv_len}, kp)};
  d.problem.shape = AttentionShape{z.heads_q, z.heads_kv, z.head_dim, std::nullopt, l.dtype, l.backward};
  return d;
}

// ------------------------------------------------------------------- invalid
enum class Mutation {
  v_differs, k_differs, kv_differ, kv_heads, unknown_axis, repeated_axis, not_divisible, segment_ids,
  kv_len_not_divisible, q_len_not_divisible, kv_heads_split_differently
};

// Puts the sequence dim of every spec on a mesh axis of size >= 2 that Q's spec
// leaves free (q_len and kv_len scaled to stay divisible); false when none is.
bool shard_the_sequence(Sharding& s, ShardedShapes& z) {
  for (const MeshAxis& a : s.mesh.axes) {
    bool used = false;
    for (const DimSharding& dim : s.q.dims) used = used || std::find(dim.begin(), dim.end(), a.name) != dim.end();
    if (used || a.size < 2) continue;
    for (PartitionSpec* spec : {&s.q, &s.k, &s.v, &s.segment_ids}) spec->dims[kSequenceDim].push_back(a.name);
    z.q_len *= a.size;
    z.kv_len *= a.size;
    return true;
  }
  return false;
}

// A spec that differs from q without being malformed: a sharded batch or
// sequence dim cleared; else (when `heads_ok`) the heads cleared; else the batch
// put on the mesh's first axis.
PartitionSpec differing(const PartitionSpec& q, bool heads_ok, const std::string& first_axis) {
  PartitionSpec s = q;
  for (int64_t d : {kBatchDim, kSequenceDim})
    if (!s.dims[d].empty()) {
      s.dims[d].clear();
      return s;
    }
  if (heads_ok && !s.dims[kHeadsDim].empty()) {
    s.dims[kHeadsDim].clear();
    return s;
  }
  return partition_spec({{first_axis}, {}, {}, {}});
}

PartitionSpec& target_spec(Sharding& s, int which) {
  PartitionSpec* specs[] = {&s.q, &s.k, &s.v, &s.segment_ids};
  return *specs[which];
}

// Applies `m` to the built layout; returns the code it must give, falling back
// to a v-only mismatch where the layout has no room for `m` (e.g. one device).
ErrorCode mutate(Mutation m, int which, Built& b) {
  Sharding& s = b.sharding;
  ShardedShapes& z = b.shapes;
  const auto count = [&](int64_t dim) { return shard_count(s.mesh, s.q.dims[dim]); };
  // Under the GQA/MQA exception K and V already lack Q's heads: clearing them
  // again would leave the call valid.
  const bool heads_ok = !uses_gqa_head_exception(s);
  const std::string first = s.mesh.axes.front().name;  // every mesh has one
  switch (m) {
    case Mutation::k_differs: s.k = differing(s.q, heads_ok, first); return ErrorCode::sharding_spec_mismatch;
    case Mutation::kv_differ: s.k = s.v = differing(s.q, false, first); return ErrorCode::sharding_spec_mismatch;
    case Mutation::kv_heads:
      if (count(kHeadsDim) < 2) break;
      s.k = s.v = s.q;
      s.k.dims[kHeadsDim].clear();
      s.v.dims[kHeadsDim].clear();
      z.heads_kv = 1;  // MQA: 1 kv head over >= 2 head shards
      return ErrorCode::sharding_kv_heads_not_divisible;
    case Mutation::unknown_axis: target_spec(s, which).dims[kBatchDim] = {"pipeline"}; return ErrorCode::sharding_unknown_axis;
    case Mutation::repeated_axis: {
      PartitionSpec& t = target_spec(s, which);
      t.dims[kBatchDim] = {first};
      t.dims[kSequenceDim] = {first};
      return ErrorCode::sharding_repeated_axis;
    }
    case Mutation::not_divisible:
      if (count(kBatchDim) >= 2) ++z.batch;
      else if (count(kSequenceDim) >= 2) (which % 2 ? ++z.q_len : ++z.kv_len);
      else if (count(kHeadsDim) >= 2) z.heads_q = z.heads_kv = count(kHeadsDim) + 1;
      else break;
      return ErrorCode::sharding_not_divisible;
    case Mutation::segment_ids:
      if (!s.q.dims[kBatchDim].empty()) s.segment_ids.dims[kBatchDim].clear();
      else if (!s.q.dims[kSequenceDim].empty()) s.segment_ids.dims[kSequenceDim].clear();
      else s.segment_ids.dims[kBatchDim] = {first};
      return ErrorCode::sharding_segment_ids_mismatch;
    case Mutation::kv_len_not_divisible:  // K's and V's sequence split, q_len != kv_len
    case Mutation::q_len_not_divisible:
      if (count(kSequenceDim) < 2 && !shard_the_sequence(s, z)) break;
      if (m == Mutation::kv_len_not_divisible) z.kv_len += 1 + which % 2 * count(kSequenceDim);
      else z.q_len += 1;
      return ErrorCode::sharding_not_divisible;
    case Mutation::kv_heads_split_differently:  // K under the GQA/MQA exception, V split like Q
      if (count(kHeadsDim) < 2) break;
      s.k = s.v = s.q;
      (which % 2 ? s.k : s.v).dims[kHeadsDim].clear();
      return ErrorCode::sharding_spec_mismatch;
    case Mutation::v_differs: break;
  }
  s.v = differing(s.q, heads_ok, first);
  return ErrorCode::sharding_spec_mismatch;
}

void show_specs(const Sharding& s, std::ostream& os) {
  os << "mesh:";
  for (const MeshAxis& a : s.mesh.axes) os << " " << a.name << "=" << a.size;
  os << " (" << s.mesh.device_count() << " devices)\nq_spec=" << s.q.to_string() << "\nk_spec=" << s.k.to_string()
     << "\nv_spec=" << s.v.to_string() << "\nsegment_ids_spec=" << s.segment_ids.to_string() << "\n";
}

}  // namespace

rc::Gen<ShardingDraw> sharding_draw() {
  return gen::map(layout_gen(), [](const Layout& l) { return build(l, specs_and_shapes(l)); });
}

rc::Gen<InvalidShardingDraw> invalid_sharding_draw() {
  // kv_heads twice: it needs Q's heads sharded (about a third of layouts) and
  // falls back otherwise, so once in eight would leave it rare within 100 cases.
  // kv_len_not_divisible twice: it is the one edge only the message shows (a
  // check of K's split against q_len fails on V's sequence dim instead).
  const auto mutation = shrinking_element<Mutation>({Mutation::v_differs, Mutation::k_differs, Mutation::kv_differ, Mutation::kv_heads,
                                        Mutation::kv_heads, Mutation::unknown_axis, Mutation::repeated_axis, Mutation::not_divisible,
                                        Mutation::segment_ids, Mutation::kv_len_not_divisible, Mutation::kv_len_not_divisible,
                                        Mutation::q_len_not_divisible, Mutation::kv_heads_split_differently});
  return gen::map(gen::tuple(layout_gen(), mutation, shrinking_element<int>({0, 1, 2, 3})), [](const auto& t) {
    const auto& [layout, m, which] = t;
    Built b = specs_and_shapes(layout);
    const ErrorCode code = mutate(m, which, b);
    InvalidShardingDraw d{build(layout, b), code};
    // A length mutation may have put the sequence on an axis (shard_the_sequence).
    if (m == Mutation::kv_len_not_divisible || m == Mutation::q_len_not_divisible)
      keep_bottom_right_off_a_sharded_sequence(d.draw.problem.batch);
    return d;
  });
}

Case sharding_case(const ShardingDraw& d) {
  return Case{ShardingCase{d.sharding, AttentionCase{d.problem, d.seed, std::nullopt}}, {}, {}, {}};
}

void showValue(const ShardingDraw& d, std::ostream& os) {
  show_specs(d.sharding, os);
  const AttentionShape& s = d.problem.shape;
  os << "heads_q=" << s.heads_q << " heads_kv=" << s.heads_kv << " head_dim=" << s.head_dim << " " << to_string(s.dtype)
     << (s.backward ? " backward" : "") << "\n";
  showValue(d.problem.batch, os);
}

void showValue(const InvalidShardingDraw& d, std::ostream& os) {
  os << "must give " << to_string(d.expected) << "\n";
  showValue(d.draw, os);
}

}  // namespace attn_oracle::properties
