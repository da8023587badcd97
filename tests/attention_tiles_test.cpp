// attention_tiles_test.cpp: the kernels' per-document index rule and tile ranges
// (gpu/attention/index_mask.hpp, tile_range.hpp) against brute force.
//
//  - key_interval: for every mask code 0..5, every window of {-1, 0, 1, 3}^2
//    (unbounded, tight, one-sided, asymmetric), lq, lkv in 0..40 and every query,
//    the keys allowed by a scan of index_allowed and by the reference's
//    independently written kernel_rule_allows are the same set, and that set is
//    exactly [lo, hi]; lo and hi never decrease with the query (the tile ranges
//    rely on it).
//  - kv_tile_range / q_tile_range: over the same grid and tile shapes 1 x 1,
//    3 x 3, 16 x 16, 3 x 16, 16 x 3, a tile is visited iff at least one element in it is allowed
//    (the allowed matrix as 64-bit row and column sets), for every q tile (kv
//    tile).
//  - a RapidCheck property repeats the tile check on longer documents (to 600)
//    with wide windows and the kernels' tile sizes, one random tile at a time.
// The exhaustive grid is 6.5e7 (query, key) pairs and 1.2e7 tile ranges: about
// a second in a release build, five at -O0.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle {
namespace {

constexpr int64_t kMaxLen = 40;
constexpr int64_t kWindowSides[] = {-1, 0, 1, 3};
// (q tile, kv tile) sizes: 1, 3 and 16 on each side, square and mixed. Mixed
// with 1 adds nothing: a size-1 tile on one side is the per-row rule itself.
constexpr std::pair<int64_t, int64_t> kTileShapes[] = {{1, 1}, {3, 3}, {16, 16}, {3, 16}, {16, 3}};

struct Rule {
  int mask;
  int64_t left, right;
  std::string describe(int64_t lq, int64_t lkv) const {
    std::ostringstream os;
    os << "mask " << mask << " window (" << left << ", " << right << ") lq " << lq << " lkv " << lkv;
    return os.str();
  }
};

// Every mask code with every window of kWindowSides x kWindowSides.
std::vector<Rule> all_rules() {
  std::vector<Rule> rules;
  for (int mask = 0; mask <= 5; ++mask)
    for (int64_t left : kWindowSides)
      for (int64_t right : kWindowSides) rules.push_back(Rule{mask, left, right});
  return rules;
}

// The allowed elements of one document as bit sets (lq, lkv <= 63): rows[a] has
// bit b set iff query a may attend key b, cols[b] bit a likewise. Row a is read
// off key_interval(a); the KeyInterval tests prove that equals index_allowed and
// the reference's rule element by element.
struct AllowedBits {
  std::vector<uint64_t> rows, cols;
};

AllowedBits allowed_bits(const Rule& r, int64_t lq, int64_t lkv) {
  AllowedBits m{std::vector<uint64_t>(lq, 0), std::vector<uint64_t>(lkv, 0)};
  for (int64_t a = 0; a < lq; ++a) {
    const gpu::KeyInterval k = gpu::key_interval(r.mask, r.left, r.right, a, lq, lkv);
    for (int64_t b = std::max<int64_t>(k.lo, 0); b <= std::min(k.hi, lkv - 1); ++b) {
      m.rows[a] |= uint64_t{1} << b;
      m.cols[b] |= uint64_t{1} << a;
    }
  }
  return m;
}

uint64_t low_bits(int64_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

int64_t tiles_of(int64_t len, int64_t tile) { return (len + tile - 1) / tile; }

// Bit t set iff tile t (elements [t * tile, (t + 1) * tile)) of `set` has a member.
uint64_t tiles_hit(uint64_t set, int64_t len, int64_t tile) {
  uint64_t hit = 0;
  for (int64_t t = 0; t < tiles_of(len, tile); ++t)
    if ((set >> (t * tile)) & low_bits(tile)) hit |= uint64_t{1} << t;
  return hit;
}

// The tiles of a range as bits; a non-empty range must lie inside [0, tiles).
bool within(const gpu::TileRange& r, int64_t tiles) { return r.begin >= r.end || (r.begin >= 0 && r.end <= tiles); }
uint64_t range_bits(const gpu::TileRange& r) { return r.begin >= r.end ? 0 : low_bits(r.end) & ~low_bits(r.begin); }
bool in_range(const gpu::TileRange& r, int64_t tile) { return r.begin <= tile && tile < r.end; }

// ------------------------------------------------------------------ key_interval

// "" when the interval of query a matches both scans, else what differs.
std::string key_interval_mismatch(const Rule& r, int64_t a, int64_t lq, int64_t lkv) {
  const gpu::KeyInterval k = gpu::key_interval(r.mask, r.left, r.right, a, lq, lkv);
  const Window w{r.left, r.right};
  for (int64_t b = 0; b < lkv; ++b) {
    const bool by_index = gpu::index_allowed(r.mask, r.left, r.right, a, b, lq, lkv);
    const bool by_reference = ref::kernel_rule_allows(static_cast<MaskKind>(r.mask), w, a, b, lq, lkv);
    const bool in_interval = b >= k.lo && b <= k.hi;
    if (by_index == by_reference && by_reference == in_interval) continue;
    std::ostringstream os;
    os << r.describe(lq, lkv) << ": query " << a << " key " << b << ": index_allowed " << by_index
       << ", kernel_rule_allows " << by_reference << ", key_interval [" << k.lo << ", " << k.hi << "]";
    return os.str();
  }
  if (k.lo <= k.hi && (k.lo < 0 || k.hi > lkv - 1))
    return r.describe(lq, lkv) + ": query " + std::to_string(a) + " interval not clipped to the keys";
  return "";
}

TEST(KeyInterval, MatchesIndexScanAndTheReferenceRuleForAllSmallCases) {
  for (const Rule& r : all_rules())
    for (int64_t lq = 0; lq <= kMaxLen; ++lq)
      for (int64_t lkv = 0; lkv <= kMaxLen; ++lkv)
        for (int64_t a = 0; a < lq; ++a) ASSERT_EQ(key_interval_mismatch(r, a, lq, lkv), "");
}

TEST(KeyInterval, EndsNeverDecreaseWithTheQuery) {
  for (const Rule& r : all_rules())
    for (int64_t lq = 0; lq <= kMaxLen; ++lq)
      for (int64_t lkv = 0; lkv <= kMaxLen; ++lkv)
        for (int64_t a = 0; a + 1 < lq; ++a) {
          const gpu::KeyInterval k0 = gpu::key_interval(r.mask, r.left, r.right, a, lq, lkv);
          const gpu::KeyInterval k1 = gpu::key_interval(r.mask, r.left, r.right, a + 1, lq, lkv);
          ASSERT_TRUE(k0.lo <= k1.lo && k0.hi <= k1.hi) << r.describe(lq, lkv) << " query " << a;
        }
}

// ------------------------------------------------------------------ tile ranges

// "" when kv_tile_range visits exactly the kv tiles with an allowed element, for
// every q tile of size tq and kv tiles of size tkv.
std::string kv_tile_range_mismatch(const Rule& r, const AllowedBits& m, int64_t lq, int64_t lkv, int64_t tq,
                                   int64_t tkv) {
  for (int64_t a0 = 0; a0 < lq; a0 += tq) {
    const int64_t a1 = std::min(a0 + tq, lq);
    uint64_t keys = 0;
    for (int64_t a = a0; a < a1; ++a) keys |= m.rows[a];
    const gpu::TileRange got = gpu::kv_tile_range(r.mask, r.left, r.right, a0, a1, lq, lkv, tkv);
    if (within(got, tiles_of(lkv, tkv)) && range_bits(got) == tiles_hit(keys, lkv, tkv)) continue;
    std::ostringstream os;
    os << r.describe(lq, lkv) << " tiles " << tq << " x " << tkv << ": queries [" << a0 << ", " << a1
       << ") got kv tiles [" << got.begin << ", " << got.end << ")";
    return os.str();
  }
  return "";
}

// The same for q_tile_range: every kv tile of size tkv against q tiles of size tq.
std::string q_tile_range_mismatch(const Rule& r, const AllowedBits& m, int64_t lq, int64_t lkv, int64_t tq,
                                  int64_t tkv) {
  for (int64_t b0 = 0; b0 < lkv; b0 += tkv) {
    const int64_t b1 = std::min(b0 + tkv, lkv);
    uint64_t queries = 0;
    for (int64_t b = b0; b < b1; ++b) queries |= m.cols[b];
    const gpu::TileRange got = gpu::q_tile_range(r.mask, r.left, r.right, b0, b1, lq, lkv, tq);
    if (within(got, tiles_of(lq, tq)) && range_bits(got) == tiles_hit(queries, lq, tq)) continue;
    std::ostringstream os;
    os << r.describe(lq, lkv) << " tiles " << tq << " x " << tkv << ": keys [" << b0 << ", " << b1
       << ") got q tiles [" << got.begin << ", " << got.end << ")";
    return os.str();
  }
  return "";
}

TEST(TileRange, VisitsExactlyTheTilesWithAnAllowedElement) {
  int64_t checked = 0;
  for (const Rule& r : all_rules())
    for (int64_t lq = 0; lq <= kMaxLen; ++lq)
      for (int64_t lkv = 0; lkv <= kMaxLen; ++lkv) {
        const AllowedBits m = allowed_bits(r, lq, lkv);
        for (const auto& [tq, tkv] : kTileShapes) {
          ASSERT_EQ(kv_tile_range_mismatch(r, m, lq, lkv, tq, tkv), "");
          ASSERT_EQ(q_tile_range_mismatch(r, m, lq, lkv, tq, tkv), "");
          ++checked;
        }
      }
  EXPECT_EQ(checked, 6 * 16 * 41 * 41 * 5);
}

// tile_fully_allowed lets the tensor-core kernels skip the per-element mask: it
// must hold exactly when every element of the tile, all inside the document, is
// allowed (true where some is not would attend a masked key).
TEST(TileRange, FullyAllowedExactlyWhenEveryElementIs) {
  int64_t full = 0;
  for (const Rule& r : all_rules())
    for (int64_t lq = 0; lq <= kMaxLen; ++lq)
      for (int64_t lkv = 0; lkv <= kMaxLen; ++lkv) {
        const AllowedBits m = allowed_bits(r, lq, lkv);
        for (const auto& [tq, tkv] : kTileShapes)
          for (int64_t a0 = 0; a0 < lq + tq; a0 += tq)
            for (int64_t b0 = 0; b0 < lkv + tkv; b0 += tkv) {
              const int64_t a1 = a0 + tq, b1 = b0 + tkv;
              bool every = a1 <= lq && b1 <= lkv;
              for (int64_t a = a0; every && a < a1; ++a) every = ((m.rows[a] >> b0) & low_bits(tkv)) == low_bits(tkv);
              ASSERT_EQ(gpu::tile_fully_allowed(r.mask, r.left, r.right, a0, a1, b0, b1, lq, lkv), every)
                  << r.describe(lq, lkv) << ", tile [" << a0 << ", " << a1 << ") x [" << b0 << ", " << b1 << ")";
              full += every;
            }
      }
  EXPECT_GT(full, 0);
}

TEST(TileRange, HandPickedEdges) {
  // Bottom-right with q longer than kv: the first lq - lkv queries see nothing.
  EXPECT_EQ(gpu::kv_tile_range(4, -1, -1, 0, 2, 4, 2, 16).end, 0);
  const gpu::TileRange last = gpu::kv_tile_range(4, -1, -1, 2, 4, 4, 2, 16);
  EXPECT_EQ(last.begin, 0);
  EXPECT_EQ(last.end, 1);
  // Causal window of 1 on 48 tokens: q tile 2 (rows 32..47) reaches back to key 31, tile 1.
  const gpu::TileRange w = gpu::kv_tile_range(2, 1, -1, 32, 48, 48, 48, 16);
  EXPECT_EQ(w.begin, 1);
  EXPECT_EQ(w.end, 3);
  // No keys: nothing to visit, and no query is seen by an empty document.
  const gpu::TileRange none = gpu::kv_tile_range(0, -1, -1, 0, 5, 5, 0, 16);
  EXPECT_GE(none.begin, none.end);
}

// Longer documents, wide windows, the kernels' tile sizes: one random tile per draw.
RC_GTEST_PROP(TileRange, longDocumentsOneTileAgainstBruteForce, ()) {
  const int mask = *rc::gen::inRange(0, 6);
  const int64_t left = *rc::gen::inRange<int64_t>(-1, 300), right = *rc::gen::inRange<int64_t>(-1, 300);
  const int64_t lq = *rc::gen::inRange<int64_t>(1, 600), lkv = *rc::gen::inRange<int64_t>(1, 600);
  const int64_t tq = *rc::gen::element<int64_t>(16, 64, 128), tkv = *rc::gen::element<int64_t>(16, 64, 128);
  const int64_t a0 = *rc::gen::inRange<int64_t>(0, tiles_of(lq, tq)) * tq, a1 = std::min(a0 + tq, lq);
  const int64_t b0 = *rc::gen::inRange<int64_t>(0, tiles_of(lkv, tkv)) * tkv, b1 = std::min(b0 + tkv, lkv);
  auto allowed = [&](int64_t a, int64_t b) {
    return ref::kernel_rule_allows(static_cast<MaskKind>(mask), Window{left, right}, a, b, lq, lkv);
  };
  const gpu::TileRange kv = gpu::kv_tile_range(mask, left, right, a0, a1, lq, lkv, tkv);
  RC_ASSERT(within(kv, tiles_of(lkv, tkv)));
  for (int64_t t = 0; t < tiles_of(lkv, tkv); ++t) {
    bool any = false;
    for (int64_t a = a0; a < a1 && !any; ++a)
      for (int64_t b = t * tkv; b < std::min((t + 1) * tkv, lkv) && !any; ++b) any = allowed(a, b);
    RC_ASSERT(any == in_range(kv, t));
  }
  const gpu::TileRange q = gpu::q_tile_range(mask, left, right, b0, b1, lq, lkv, tq);
  RC_ASSERT(within(q, tiles_of(lq, tq)));
  for (int64_t t = 0; t < tiles_of(lq, tq); ++t) {
    bool any = false;
    for (int64_t a = t * tq; a < std::min((t + 1) * tq, lq) && !any; ++a)
      for (int64_t b = b0; b < b1 && !any; ++b) any = allowed(a, b);
    RC_ASSERT(any == in_range(q, t));
  }
}

}  // namespace
}  // namespace attn_oracle
