// attention_problem.cpp: the attention problem's bookkeeping
// (docs/semantics.md#5-attention-outputs-and-gradients): dtype names and exact rounding into fp16 /
// bf16 / fp32, the effective scale, tensor sizes over broadcast rows, validation (bad_heads,
// bad_tensor_shape), and the documented deterministic data generator of `data: {"seed": N}` case
// files.
//
// Easy to get wrong:
//  - Rounding goes straight from double to the target type. Going through float
//    first rounds twice and breaks ties-to-even (1 + 2^-8 + 2^-30 is above the
//    bf16 tie, but float drops the 2^-30 and then the tie goes down to 1).
//  - Subnormals: the quantum stops shrinking at the minimum normal exponent;
//    values past the largest finite value by half an ulp or more overflow to inf.
//  - generate_inputs is part of the case-file format: changing the stream
//    changes every seeded fixture.
//
// Tested by tests/reference_attention_test.cpp (known rounding values, error
// codes, generator determinism).
#include "attn_oracle/model/attention.hpp"

#include <algorithm>
#include <bit>
#include <array>
#include <cmath>
#include <limits>
#include <sstream>

#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline model {

// ---------------------------------------------------------------------------
// Dtype names and rounding
// ---------------------------------------------------------------------------

namespace {

constexpr std::array<std::string_view, 3> kDtypeNames = {"fp32", "fp16", "bf16"};

// A binary floating-point format: `precision` significand bits (implicit bit
// included), exponents of normal numbers in [min_exponent, max_exponent].
struct BinaryFormat {
  int precision;
  int min_exponent;
  int max_exponent;
  // (2 - 2^(1 - precision)) x 2^max_exponent, from its IEEE double fields.
  constexpr double max_finite() const {
    const uint64_t mantissa = ((uint64_t{1} << (precision - 1)) - 1) << (53 - precision);
    return std::bit_cast<double>((uint64_t(max_exponent + 1023) << 52) | mantissa);
  }
};
constexpr BinaryFormat kHalf{11, -14, 15};
constexpr BinaryFormat kBfloat16{8, -126, 127};

// 2^e as a double, from its exponent field (e a normal double's exponent).
double power_of_two(int e) { return std::bit_cast<double>(uint64_t(e + 1023) << 52); }

// Round-to-nearest-even of x at the format's ulp, on the double's own
// fields: adding and taking away c = 1.5 x 2^(quantum + 52) leaves |x| rounded
// to a multiple of 2^quantum by the FPU's default rounding (the sum lies in
// [2^(quantum+52), 2^(quantum+53)), whose ulp is 2^quantum), with no libm call
// on the path every element of every tensor takes. tests/dtype_rounding_test.cpp
// checks it bit for bit against integer rounding of the IEEE fields.
double round_to_format(double x, BinaryFormat f) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  const int biased = static_cast<int>((std::bit_cast<uint64_t>(x) >> 52) & 0x7FF);
  const int exponent = std::max(biased - 1023, f.min_exponent);  // of the leading bit; subnormal doubles: the minimum
  if (exponent > f.max_exponent) return std::copysign(std::numeric_limits<double>::infinity(), x);
  const int quantum = exponent - (f.precision - 1);  // ulp of x in the format
  const double c = 1.5 * power_of_two(quantum + 52);
  const double rounded = std::copysign((std::fabs(x) + c) - c, x);
  if (std::fabs(rounded) > f.max_finite()) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

}  // namespace

std::string_view to_string(Dtype dtype) { return kDtypeNames[static_cast<size_t>(dtype)]; }

std::string_view to_string(Output output) {
  switch (output) {
    case Output::lse: return "lse";
    case Output::gradients: return "gradients";
    case Output::small_seq_p: return "small-seq P";
  }
  return "?";
}

bool ProducedOutputs::has(Output output) const {
  switch (output) {
    case Output::lse: return lse;
    case Output::gradients: return gradients;
    case Output::small_seq_p: return small_seq_p;
  }
  return false;
}

std::optional<Dtype> dtype_from_string(std::string_view name) {
  for (size_t i = 0; i < kDtypeNames.size(); ++i)
    if (kDtypeNames[i] == name) return static_cast<Dtype>(i);
  return std::nullopt;
}

double round_to_dtype(double x, Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return static_cast<double>(static_cast<float>(x));
    case Dtype::fp16: return round_to_format(x, kHalf);
    case Dtype::bf16: return round_to_format(x, kBfloat16);
  }
  return x;
}

// ---------------------------------------------------------------------------
// Shape and sizes
// ---------------------------------------------------------------------------

double AttentionShape::effective_scale() const {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

int64_t AttentionSizes::q_elems() const { return rows * q_len * heads_q * head_dim; }
int64_t AttentionSizes::kv_elems() const { return rows * kv_len * heads_kv * head_dim; }
int64_t AttentionSizes::lse_elems() const { return rows * heads_q * q_len; }

namespace {

std::optional<Error> check_heads(const AttentionShape& s) {
  const bool positive = s.heads_q >= 1 && s.heads_kv >= 1 && s.head_dim >= 1;
  if (positive && s.heads_q % s.heads_kv == 0) return std::nullopt;
  std::ostringstream os;
  os << "heads_q = " << s.heads_q << ", heads_kv = " << s.heads_kv
     << ", head_dim = " << s.head_dim << ": "
     << (positive ? "heads_q must be a multiple of heads_kv"
                  : "head counts and head_dim must be >= 1");
  return Error{ErrorCode::bad_heads, os.str()};
}

AttentionSizes sizes_of(const BatchLayout& layout, const AttentionShape& s) {
  AttentionSizes z;
  z.rows = layout.rows();
  z.q_len = layout.q_len;
  z.kv_len = layout.kv_len;
  z.heads_q = s.heads_q;
  z.heads_kv = s.heads_kv;
  z.head_dim = s.head_dim;
  return z;
}

std::optional<Error> check_tensor(const char* name, const std::vector<double>& t,
                                  int64_t expected, const std::string& layout) {
  const auto actual = static_cast<int64_t>(t.size());
  if (actual == expected) return std::nullopt;
  std::ostringstream os;
  os << "tensor " << name << " has " << actual << " elements, expected " << expected << " ("
     << layout << ")";
  return Error{ErrorCode::bad_tensor_shape, os.str()};
}

// How many workers a call of the references may start at most (their
// tiles::workers_for: reference_threads(), at most one a unit).
int64_t reference_workers(int64_t units) { return std::clamp<int64_t>(reference_threads(), 1, std::max<int64_t>(units, 1)); }

int64_t times(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? INT64_MAX : out;
}

// One row's explicit mask, stored as a run of keys per query (reference/metadata.hpp):
// the runs and their index, 24 bytes a query, and a side's flags, 8 bytes a key.
void add_row_mask_memory(MemoryNeed& need, const BatchLayout& l) {
  need.add("the explicit mask of one row (a run of keys a query)", {l.q_len, 3 * 8});
  need.add("the keys' coverage of one row", {l.kv_len + 1, 8});
}

// The float64 references' scratch (ScoreMemory::query_tiles in attention.hpp).
// `rows` are the factors of the broadcast row count (extra dims, then B). Their
// units: per document, (document, kv head), at most min(Tq, M) documents a row;
// dense, (group of query tiles, kv head) of one row.
void add_query_tile_memory(MemoryNeed& need, const BatchLayout& l, const AttentionShape& s,
                           const std::vector<int64_t>& rows, bool with_mask) {
  const int64_t bytes = sizeof(double);
  int64_t units = times(s.heads_kv, with_mask ? (l.q_len + kReferenceTileRows - 1) / kReferenceTileRows
                                              : std::min(l.q_len, l.max_segments));
  for (int64_t f : rows)
    if (!with_mask) units = times(units, f);
  const int64_t workers = reference_workers(units);
  const int64_t tile = std::min(kReferenceTileRows, l.q_len);
  need.add("per worker: P, dS and allowed flags of a [tile, Tkv] block", {workers, tile, l.kv_len, 2 * bytes + 1});
  need.add("per worker: q, o, do, dq of a query tile", {workers, tile, s.head_dim, 4 * bytes});
  need.add("per worker: K, V, dK, dV of a row's kv head and a tile's gathered keys",
           {workers, l.kv_len, s.head_dim, 6 * bytes});
  std::vector<int64_t> runs = rows;
  runs.insert(runs.end(), {l.q_len, 3 * bytes});
  need.add("the key runs each query attends and their index", runs);
  if (!with_mask) return;
  add_row_mask_memory(need, l);
  need.add("the attended [tile, tile] blocks of one row",
           {l.q_len / kReferenceTileRows + 1, l.kv_len / kReferenceTileRows + 1, bytes});
}

// Tensors in, out and their gradients (q, o, do, dq and k, v, dk, dv), lse, and
// what `scores` holds besides; checked before any size is multiplied out, so
// that the products cannot overflow.
std::optional<Error> check_attention_memory(const BatchLayout& l, const AttentionShape& s, ScoreMemory scores) {
  const int64_t bytes = sizeof(double);
  std::vector<int64_t> rows = l.extra;
  rows.push_back(l.batch);
  auto with = [&](std::vector<int64_t> more) {
    std::vector<int64_t> f = rows;
    f.insert(f.end(), more.begin(), more.end());
    return f;
  };
  MemoryNeed need;
  need.add("q, o, do, dq [rows, Tq, Hq, D] x 4", with({l.q_len, s.heads_q, s.head_dim, 4, bytes}));
  need.add("k, v, dk, dv [rows, Tkv, Hkv, D] x 4", with({l.kv_len, s.heads_kv, s.head_dim, 4, bytes}));
  need.add("lse [rows, Hq, Tq]", with({s.heads_q, l.q_len, bytes}));
  if (scores == ScoreMemory::streaming) return need.check("attention");
  if (scores != ScoreMemory::dense_row) {
    add_query_tile_memory(need, l, s, rows, scores == ScoreMemory::query_tiles_with_mask);
    return need.check("attention");
  }
  // The naive run (float copies of the tensors, one row's mask, per worker a
  // row of P), or the dense reference's tiles where they need more.
  MemoryNeed naive = need, tiles = need;
  naive.add("the naive run's fp32 q, do, dq", with({l.q_len, s.heads_q, s.head_dim, 3, 4}));
  naive.add("the naive run's fp32 k, v, dk, dv", with({l.kv_len, s.heads_kv, s.head_dim, 4, 4}));
  add_row_mask_memory(naive, l);
  naive.add("per worker: the naive run's P over one row's keys", {reference_workers(times(s.heads_kv, l.q_len)), l.kv_len, 4});
  add_query_tile_memory(tiles, l, s, rows, /*with_mask=*/true);
  const bool tiles_more = !tiles.total() || (naive.total() && *tiles.total() > *naive.total());
  return (tiles_more ? tiles : naive).check("attention");
}

std::string layout_name(const AttentionSizes& z, int64_t len, int64_t heads) {
  return shape_to_string({z.rows, len, heads, z.head_dim});
}

}  // namespace

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

Expected<AttentionSizes> validate_attention(const AttentionProblem& problem, const AttentionInputs* inputs,
                                            ScoreMemory scores) {
  auto layout = validate(problem.batch);
  if (!layout) return layout.error();
  if (auto e = check_heads(problem.shape)) return *e;
  if (auto e = check_attention_memory(layout.value(), problem.shape, scores)) return *e;
  const AttentionSizes z = sizes_of(layout.value(), problem.shape);
  if (inputs == nullptr) return z;
  const std::string q_layout = layout_name(z, z.q_len, z.heads_q);
  const std::string kv_layout = layout_name(z, z.kv_len, z.heads_kv);
  if (auto e = check_tensor("q", inputs->q, z.q_elems(), q_layout)) return *e;
  if (auto e = check_tensor("k", inputs->k, z.kv_elems(), kv_layout)) return *e;
  if (auto e = check_tensor("v", inputs->v, z.kv_elems(), kv_layout)) return *e;
  const int64_t d_o_elems = problem.shape.backward ? z.q_elems() : 0;
  if (auto e = check_tensor("do", inputs->d_o, d_o_elems,
                            problem.shape.backward ? q_layout : "none without backward"))
    return *e;
  if (auto e = check_attention_values(problem.shape, *inputs, z.q_len, z.kv_len)) return *e;
  return z;
}

namespace {

std::string number(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

// "tensor k, element 5 (row 0, token 2, head 1, dim 1)".
// Sizes may not be validated yet (a case file's tensors are checked as written): never divide by 0.
std::string element_name(const char* tensor, size_t i, int64_t len, int64_t heads, int64_t dim) {
  len = std::max<int64_t>(len, 1), heads = std::max<int64_t>(heads, 1), dim = std::max<int64_t>(dim, 1);
  if (heads > INT64_MAX / dim) return std::string("tensor ") + tensor + ", element " + std::to_string(i);
  const int64_t token = static_cast<int64_t>(i) / (heads * dim);
  return std::string("tensor ") + tensor + ", element " + std::to_string(i) + " (row " + std::to_string(token / len) +
         ", token " + std::to_string(token % len) + ", head " + std::to_string(i / dim % heads) + ", dim " +
         std::to_string(i % dim) + ")";
}

}  // namespace

std::optional<Error> check_attention_values(const AttentionShape& s, const AttentionInputs& in, int64_t q_len,
                                            int64_t kv_len) {
  if (s.scale && !std::isfinite(*s.scale)) return Error{ErrorCode::non_finite_input, "scale = " + number(*s.scale)};
  struct Tensor {
    const char* name;
    const std::vector<double>* values;
    int64_t len, heads;
    double peak = 0;  // the largest magnitude once rounded
  };
  Tensor t[] = {{"q", &in.q, q_len, s.heads_q}, {"k", &in.k, kv_len, s.heads_kv},
                {"v", &in.v, kv_len, s.heads_kv}, {"do", &in.d_o, q_len, s.heads_q}};
  for (Tensor& x : t)
    for (size_t i = 0; i < x.values->size(); ++i) {
      const double rounded = round_to_dtype((*x.values)[i], s.dtype);
      if (!std::isfinite(rounded))
        return Error{ErrorCode::non_finite_input, element_name(x.name, i, x.len, x.heads, s.head_dim) + ": " +
                                                      number((*x.values)[i]) + " is " + number(rounded) + " in " +
                                                      std::string(to_string(s.dtype))};
      x.peak = std::max(x.peak, std::fabs(rounded));
    }
  if (s.head_dim < 1) return std::nullopt;  // bad_heads, from validate_attention
  const double scale = std::fabs(s.effective_scale()), d = static_cast<double>(s.head_dim);
  const double q = t[0].peak, k = t[1].peak, v = t[2].peak, g = t[3].peak, lq = static_cast<double>(q_len);
  // dP = do . v; a row of dS = P * (dP - delta) sums to at most 2 max|dP| in magnitude.
  const std::pair<const char*, double> bounds[] = {
      {"the scores: |scale| x head_dim x max|q| x max|k|", scale * d * q * k},
      {"dP: head_dim x max|do| x max|v|", d * g * v},
      {"dq: |scale| x 2 x head_dim x max|do| x max|v| x max|k|", scale * 2 * d * g * v * k},
      {"dk: |scale| x 2 x head_dim x max|do| x max|v| x max|q| x Tq", scale * 2 * d * g * v * q * lq},
      {"dv: Tq x max|do|", lq * g}};
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  for (const auto& [what, bound] : bounds)
    if (!(bound <= kFloatMax))
      return Error{ErrorCode::value_overflow, std::string(what) + " = " + number(bound) +
                                                  " exceeds float32's largest value " + number(kFloatMax)};
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Deterministic data generator
// ---------------------------------------------------------------------------

namespace {

// splitmix64 (Steele, Lea, Flood 2014): advance by the golden gamma, then mix.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1): the top 53 bits as a fraction in [0, 1), doubled, shifted.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0; }

 private:
  uint64_t state_;
};

std::vector<double> fill(SplitMix64& rng, int64_t n, Dtype dtype) {
  std::vector<double> t(static_cast<size_t>(n));
  for (double& x : t) x = round_to_dtype(rng.uniform(), dtype);
  return t;
}

}  // namespace

// Sizes come from the batch's shapes only (not its row contents), so a batch
// that fails a per-row check still gets tensors of the right size and the
// backend under test reports that row error itself. Shapes that cannot be
// sized (bad shapes, bad heads) give empty tensors.
AttentionInputs generate_inputs(const AttentionProblem& problem, uint64_t seed) {
  auto layout = validate_shapes(problem.batch);
  if (!layout || check_heads(problem.shape) || check_attention_memory(layout.value(), problem.shape, ScoreMemory::streaming))
    return {};  // validate_attention names the problem
  const AttentionSizes z = sizes_of(layout.value(), problem.shape);
  const Dtype dtype = problem.shape.dtype;
  SplitMix64 rng(seed);
  AttentionInputs in;
  in.q = fill(rng, z.q_elems(), dtype);
  in.k = fill(rng, z.kv_elems(), dtype);
  in.v = fill(rng, z.kv_elems(), dtype);
  if (problem.shape.backward) in.d_o = fill(rng, z.q_elems(), dtype);
  return in;
}

}  // namespace attn_oracle::model
