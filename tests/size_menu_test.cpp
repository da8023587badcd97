// size_menu_test.cpp: shape-stable draws (generators.hpp, "size menu";
// input_domain.hpp, SizeMenu).
//  - every draw under a menu is valid and on the menu (T, B, M, heads), for
//    domains with and without padding and for self-attention;
//  - 400 attention draws have at most 72 distinct shapes on the default menu,
//    against hundreds without (printed): what a jitted backend compiles;
//  - a declared menu is part of the domain: an input off it is outside, with
//    the size named; a menu of M = 1 holds every draw (one document a row);
//  - `--shape-stable` (ATTN_ORACLE_SHAPE_STABLE) folds the default menu into a
//    domain that declares none, a property it excludes is skipped saying so,
//    and a failure's rerun line carries the option;
//  - a planted backend that strides kv's ragged offsets by Tq (right only when
//    Tq = Tkv) and declares the default menu fails metadata/matchesReference,
//    shrunk on the menu: one row, the two smallest sides that differ.
// A worker's `sizes` is tested through the Python package (python/tests/test_shape_stable.py).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <tuple>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/cases/case_file.hpp"

namespace attn_oracle {
namespace {

// What `--shape-stable` draws in for a backend that declares no menu.
InputDomain with_menu(InputDomain d) {
  d.sizes = default_size_menu();
  d.extra_dims = false;
  d.head_dims = kMenuHeadDims;
  return d;
}

InputDomain self_attention_menu() {
  InputDomain d;
  d.self_attention_only = d.no_padding = d.positions_from_zero = true;
  d.mask_kinds = {MaskKind::causal, MaskKind::no_mask};
  return with_menu(d);
}

bool on(const std::vector<int64_t>& menu, int64_t size) {
  return std::find(menu.begin(), menu.end(), size) != menu.end();
}

RC_GTEST_PROP(SizeMenu, everyDrawIsValidAndOnItsMenu, ()) {
  const InputDomain d = *rc::gen::element(with_menu({}), self_attention_menu());
  const AttentionDraw draw = *attention_draw(AttentionOptions{.batch = within(d)});
  const PackedBatch& b = draw.problem.batch;
  if (const auto checked = validate(b); !checked) RC_FAIL(checked.error().message);
  if (const auto why = outside_domain(d, draw.problem)) RC_FAIL(to_string(d) + ": " + *why);
  RC_ASSERT(on(d.sizes.tokens, b.q.segment_ids.shape.back()));
  RC_ASSERT(on(d.sizes.tokens, b.kv.segment_ids.shape.back()));
  RC_ASSERT(on(d.sizes.max_segments, b.max_segments));
  RC_CLASSIFY(allows_padding(b.mask), "padding kind");
  RC_CLASSIFY(b.q.segment_ids.shape.back() != b.kv.segment_ids.shape.back(), "Tq != Tkv");
}

// A menu of M = 1 (one document a row: Megatron-core's padded path, transformers' 2D-mask
// unpad path) holds every draw: the documents drawn are capped at the menu's largest M, and
// spare capacity that would leave the menu is dropped.
RC_GTEST_PROP(SizeMenu, aMenuOfOneDocumentHoldsEveryDraw, ()) {
  InputDomain d;
  d.self_attention_only = d.positions_from_zero = true;
  d.sizes.max_segments = {1};
  const PackedBatch b = *packed_batch(within(d));
  if (const auto checked = validate(b); !checked) RC_FAIL(checked.error().message);
  if (const auto why = outside_domain(d, b)) RC_FAIL(*why);
  RC_ASSERT(b.max_segments == 1);
}

RC_GTEST_PROP(SizeMenu, metadataDrawsAreOnTheMenu, ()) {
  const InputDomain d = with_menu({});
  const PackedBatch b = *packed_batch(within(d));
  if (const auto checked = validate(b); !checked) RC_FAIL(checked.error().message);
  if (const auto why = outside_domain(d, b)) RC_FAIL(*why);
}

using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

size_t distinct_shapes(const InputDomain& d, int draws) {
  rc::Random random(uint64_t{20261125});
  std::set<ShapeKey> shapes;
  for (int i = 0; i < draws; ++i) {
    const AttentionDraw a = attention_draw(AttentionOptions{.batch = within(d)})(random.split(), 100).value();
    const Shape& q = a.problem.batch.q.segment_ids.shape;
    shapes.emplace(shape_product(Shape(q.begin(), q.end() - 1)), q.back(), a.problem.batch.kv.segment_ids.shape.back(),
                   a.problem.shape.heads_q, a.problem.shape.heads_kv, a.problem.shape.head_dim);
  }
  return shapes.size();
}

TEST(SizeMenu, AttentionDrawsHaveFewShapes) {
  const size_t free = distinct_shapes({}, 400), menu = distinct_shapes(with_menu({}), 400);
  std::cout << "[ shapes   ] 400 attention draws: " << free << " distinct (rows, Tq, Tkv, Hq, Hkv, D) without a menu, "
            << menu << " on the default menu\n";
  EXPECT_LE(menu, 72u);  // 3 x 3 sides, 2 row counts, 2 head pairs, 2 head dims
  EXPECT_GE(free, 8 * menu);
}

TEST(SizeMenu, ADeclaredMenuIsPartOfTheDomain) {
  const InputDomain d = with_menu({});
  PackedBatch b;
  b.mask = MaskKind::padding;
  b.max_segments = 4;
  b.q = PackedSide{IntArray({1, 15}, std::vector<int64_t>(15, 1)), IntArray({1, 15}, std::vector<int64_t>(15, 0))};
  b.kv = b.q;
  ASSERT_TRUE(outside_domain(d, b).has_value());
  EXPECT_NE(outside_domain(d, b)->find("15 tokens; the backend's size menu has 16, 64 and 144"), std::string::npos)
      << *outside_domain(d, b);
  AttentionProblem p;
  p.batch = on_size_menu(b, d);
  EXPECT_EQ(p.batch.q.segment_ids.shape, (Shape{1, 16}));
  EXPECT_EQ(p.batch.q.segment_ids.data.back(), 0) << "a padding kind is padded with id 0";
  p.shape.heads_q = 4, p.shape.heads_kv = 1;
  ASSERT_TRUE(outside_domain(d, p).has_value());
  EXPECT_NE(outside_domain(d, p)->find("heads 4/1"), std::string::npos) << *outside_domain(d, p);
  b.max_segments = 3;
  b.q = b.kv = on_size_menu(b, {}).q;
  EXPECT_FALSE(outside_domain(InputDomain{}, b).has_value());
}

TEST(SizeMenu, ANonPaddingRowRunsItsLastDocumentOn) {
  PackedBatch b;
  b.mask = MaskKind::causal;
  b.max_segments = 2;
  b.q = PackedSide{IntArray({1, 3}, {1, 2, 2}), IntArray({1, 3}, {0, 0, 2})};  // a stride-2 document
  b.kv = b.q;
  const PackedBatch grown = on_size_menu(b, with_menu({}));
  ASSERT_EQ(grown.q.segment_ids.shape, (Shape{1, 16}));
  EXPECT_EQ(grown.q.segment_ids.data[15], 2);
  EXPECT_EQ(grown.q.segment_pos.data[15], 2 + 2 * 13);
  EXPECT_EQ(grown.max_segments, 4);
  EXPECT_TRUE(static_cast<bool>(validate(grown)));
}

TEST(SizeMenu, TheShapeStableOptionFoldsTheDefaultMenu) {
  EXPECT_TRUE(drawing_domain({}, false).sizes.empty());
  const InputDomain d = drawing_domain({}, true);
  EXPECT_EQ(d.sizes, default_size_menu());
  EXPECT_FALSE(d.extra_dims);
  EXPECT_EQ(d.head_dims, kMenuHeadDims);
  InputDomain declared;
  declared.sizes.tokens = {32};
  EXPECT_EQ(drawing_domain(declared, true).sizes, declared.sizes) << "a declared menu is kept";
  PropertyFailure f;
  RunSettings shape_stable;
  shape_stable.draws.shape_stable = true;
  set_replay_commands(f, shape_stable, "exec:w", "metadata/matchesReference", true);
  EXPECT_NE(f.rerun_command.find(" --shape-stable"), std::string::npos) << "the rerun draws what this run drew: "
                                                                        << f.rerun_command;

  struct Reference final : Backend, MetadataCapability {
    std::string name() const override { return "menu-reference"; }
    MetadataCapability* metadata() override { return this; }
    Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  } backend;
  const auto why = skipped_before_drawing(*find_property("metadata/extraDimsEqualSliceBySlice"),
                                          draw_context(backend, shape_stable.draws));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("shape-stable draws (", 0), 0u) << *why;
}

// kv's ragged offsets strided by Tq: right whenever Tq = Tkv.
class TqStrideTwin final : public Backend, public MetadataCapability {
 public:
  std::string name() const override { return "tq-stride"; }
  MetadataCapability* metadata() override { return this; }
  InputDomain domain() const override { return with_menu({}); }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    Expected<Metadata> md = ref::metadata(batch);
    if (!md) return md;
    Metadata out = md.value();
    const int64_t tq = batch.q.segment_ids.shape.back(), tkv = batch.kv.segment_ids.shape.back();
    for (int64_t& offset : out.ragged_offsets_kv) offset = offset / tkv * tq + offset % tkv;
    return out;
  }
};

TEST(SizeMenu, ShrinkingStaysOnTheMenu) {
  TqStrideTwin twin;
  RunSettings settings = default_run_settings();
  const PropertyOutcome o = run_property(*find_property("metadata/matchesReference"), twin, settings);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  const PackedBatch b = o.failures.front().counterexample.as<MetadataCase>()->batch;
  std::cout << "[ shrunk   ] at draw " << o.failures.front().draw << ": q " << shape_to_string(b.q.segment_ids.shape)
            << ", kv " << shape_to_string(b.kv.segment_ids.shape) << ": " << o.failures.front().message << "\n";
  EXPECT_FALSE(outside_domain(twin.domain(), b).has_value()) << *outside_domain(twin.domain(), b);
  EXPECT_EQ(b.q.segment_ids.shape.size(), 2u);
  EXPECT_EQ(b.q.segment_ids.shape[0], 1);
  const std::set<int64_t> sides{b.q.segment_ids.shape.back(), b.kv.segment_ids.shape.back()};
  EXPECT_EQ(sides, (std::set<int64_t>{16, 64}));
}

}  // namespace
}  // namespace attn_oracle
