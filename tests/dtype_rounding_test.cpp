// dtype_rounding_test.cpp: round_to_dtype (the model's double -> fp32/fp16/bf16
// rounding) and gpu::round_to (the kernels' CPU twin) checked bit for bit against
// an independent rounding done on the integer IEEE fields, and against a table of
// every fp16 / bf16 value decoded from its bits, so that no rounding error hides.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/gpu/attention/numeric.hpp"

namespace attn_oracle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A format by its IEEE field widths (sign bit not counted).
struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  Dtype dtype;
  int gpu_code;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};
constexpr Format kFp16{"fp16", 5, 10, Dtype::fp16, gpu::kFp16};
constexpr Format kBf16{"bf16", 8, 7, Dtype::bf16, gpu::kBf16};
constexpr Format kFp32{"fp32", 8, 23, Dtype::fp32, gpu::kFp32};

// ---------------------------------------------------------------------------
// Independent reference: split the double into an integer significand and the
// exponent of its last bit, drop the bits the format cannot hold, and round the
// dropped part against exactly half of the kept unit (ties to an even kept part).
// ---------------------------------------------------------------------------

// `dropped` >= 1 low bits of `significand` go; the rest is rounded half to even.
uint64_t round_half_even_shift(uint64_t significand, int dropped) {
  if (dropped > 53) return 0;  // the half unit exceeds any 53-bit significand
  const uint64_t kept = significand >> dropped;
  const uint64_t remainder = significand & ((uint64_t{1} << dropped) - 1);
  const uint64_t half = uint64_t{1} << (dropped - 1);
  const bool up = remainder > half || (remainder == half && (kept & 1) != 0);
  return kept + (up ? 1 : 0);
}

double round_by_fields(double x, const Format& f) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
  if (biased == 0x7FF) return x;  // inf and NaN pass through
  const uint64_t significand = biased == 0 ? fraction : fraction | (uint64_t{1} << 52);
  if (significand == 0) return x;  // signed zero
  const int lsb_exponent = (biased == 0 ? 1 : biased) - 1023 - 52;
  const int leading_exponent = lsb_exponent + std::bit_width(significand) - 1;
  // Below the smallest normal the last kept bit stays at the subnormal quantum.
  const int target_lsb = std::max(leading_exponent, 1 - f.bias()) - f.mantissa_bits;
  const int dropped = target_lsb - lsb_exponent;
  uint64_t kept = significand;
  int kept_lsb = lsb_exponent;
  if (dropped > 0) {
    kept = round_half_even_shift(significand, dropped);
    kept_lsb = target_lsb;
  }
  if (kept == 0) return std::copysign(0.0, x);
  const int result_leading_exponent = kept_lsb + std::bit_width(kept) - 1;
  if (result_leading_exponent > f.bias()) return std::copysign(kInf, x);
  return std::copysign(std::ldexp(static_cast<double>(kept), kept_lsb), x);
}

// A 16-bit pattern without its sign bit, decoded from the fields, not by rounding.
double decode_16_bit(uint32_t bits, const Format& f) {
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const int biased = static_cast<int>(bits >> f.mantissa_bits);
  const double unit = std::ldexp(1.0, 1 - f.bias() - f.mantissa_bits);  // the subnormal quantum
  if (biased == 0) return mantissa * unit;
  return (mantissa | (1u << f.mantissa_bits)) * std::ldexp(unit, biased - 1);
}

// Every finite non-negative value of a 16-bit format in bit-pattern order, which
// IEEE makes increasing value order.
std::vector<double> non_negative_finite_values(const Format& f) {
  const uint32_t exponent_all_ones = (1u << f.exponent_bits) - 1;
  std::vector<double> values;
  for (uint32_t bits = 0; (bits >> f.mantissa_bits) < exponent_all_ones; ++bits)
    values.push_back(decode_16_bit(bits, f));
  return values;
}

// ---------------------------------------------------------------------------
// Comparison and reporting
// ---------------------------------------------------------------------------

template <class T>
auto bits_of(T x) {
  if constexpr (sizeof(T) == 4) return std::bit_cast<uint32_t>(x);
  else return std::bit_cast<uint64_t>(x);
}

template <class T>
std::string describe(T x) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(2 * sizeof(T)) << std::setfill('0') << bits_of(x)
     << " (" << std::hexfloat << x << ")";
  return os.str();
}

bool holds_as_float(double x) {
  if (std::isnan(x) || std::isinf(x)) return true;
  return std::fabs(x) <= std::numeric_limits<float>::max() && static_cast<float>(x) == x;
}

// Counts checks and reports the first few mismatches, so that a systematic bug
// prints a handful of exact inputs instead of millions of lines.
class MismatchLog {
 public:
  template <class T>
  void check(const char* function, const Format& f, T input, T expected, T got) {
    ++checked_;
    const bool both_nan = std::isnan(expected) && std::isnan(got);
    if (both_nan || bits_of(expected) == bits_of(got)) return;
    if (++mismatches_ <= kMaxReported)
      ADD_FAILURE() << f.name << " " << function << "(" << describe(input) << "): expected "
                    << describe(expected) << ", got " << describe(got);
  }
  // Model and twin on the same value; the twin only where the input is a float.
  void check_both(const Format& f, double input, double expected) {
    check("round_to_dtype", f, input, expected, round_to_dtype(input, f.dtype));
    if (!holds_as_float(input)) return;
    const float as_float = static_cast<float>(input);
    check("gpu::round_to", f, as_float, static_cast<float>(expected), gpu::round_to(as_float, f.gpu_code));
  }
  ~MismatchLog() {
    EXPECT_EQ(mismatches_, 0) << "mismatches among " << checked_ << " checks";
    std::cout << "[ checked  ] " << checked_ << " roundings\n";
  }

 private:
  static constexpr int64_t kMaxReported = 20;
  int64_t checked_ = 0;
  int64_t mismatches_ = 0;
};

// ---------------------------------------------------------------------------
// The references agree with each other and with the compiler's float conversion
// ---------------------------------------------------------------------------

TEST(DtypeRoundingReference, FieldRoundingFixesEveryTableValueAndSplitsEveryTie) {
  for (const Format* f : {&kFp16, &kBf16}) {
    const std::vector<double> values = non_negative_finite_values(*f);
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      ASSERT_LT(values[i], values[i + 1]) << f->name << " pattern " << i;
      const double tie = (values[i] + values[i + 1]) / 2;  // exact: few significant bits
      const double even = (i % 2 == 0) ? values[i] : values[i + 1];
      ASSERT_EQ(round_by_fields(values[i], *f), values[i]) << f->name << " pattern " << i;
      ASSERT_EQ(round_by_fields(tie, *f), even) << f->name << " tie above pattern " << i;
    }
  }
}

TEST(DtypeRoundingReference, FieldRoundingToFp32MatchesStaticCast) {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::bit_cast<double>(rng());
    const double cast = static_cast<float>(x);
    const double fields = round_by_fields(x, kFp32);
    ASSERT_TRUE(bits_of(cast) == bits_of(fields) || (std::isnan(cast) && std::isnan(fields)))
        << describe(x) << ": static_cast " << describe(cast) << ", fields " << describe(fields);
  }
}

// ---------------------------------------------------------------------------
// Hand-derived classes: zeros, subnormals, the normal boundary, ties, overflow
// ---------------------------------------------------------------------------

struct NamedCase {
  double input;
  double expected;
};

void check_named_cases(const Format& f, const std::vector<NamedCase>& cases) {
  MismatchLog log;
  for (const NamedCase& c : cases) {
    log.check_both(f, c.input, c.expected);
    log.check_both(f, -c.input, -c.expected);
    log.check("reference", f, c.input, c.expected, round_by_fields(c.input, f));
  }
}

TEST(DtypeRounding, Fp16NamedBitPatternClasses) {
  check_named_cases(kFp16, {
      {0.0, 0.0},
      {0x1p-24, 0x1p-24},                 // smallest subnormal
      {0x1p-25, 0.0},                     // half of it: tie to the even zero
      {0x1.000002p-25, 0x1p-24},          // just above that half
      {0x1.0000000001p-25, 0x1p-24},      // above the half by less than a float ulp
      {0x1.fffffep-26, 0.0},              // below the half
      {0x1p-149, 0.0},                    // smallest float subnormal
      {0x1p-1074, 0.0},                   // smallest double subnormal
      {0x3p-25, 0x2p-24},                 // between subnormals 1 and 2: up to even
      {0x5p-25, 0x2p-24},                 // between subnormals 2 and 3: down to even
      {0x3ffp-24, 0x3ffp-24},             // largest subnormal
      {0x7ffp-25, 0x1p-14},               // tie with the smallest normal: up to even
      {0x1p-14, 0x1p-14},                 // smallest normal
      {0x1.fffffep-15, 0x1p-14},          // just below it
      {0x1.002p+0, 1.0},                  // tie, down to even
      {0x1.006p+0, 0x1.008p+0},           // tie, up to even
      {0x1.002002p+0, 0x1.004p+0},        // just above a tie
      {0x1.00200000001p+0, 0x1.004p+0},   // above the tie by less than a float ulp
      {65504.0, 65504.0},                 // largest finite
      {65519.0, 65504.0},
      {65519.99, 65504.0},
      {65519.99609375, 65504.0},          // the float just below the overflow tie
      {0x1.ffdffffffffffp+15, 65504.0},   // the double just below it
      {65520.0, kInf},                    // overflow tie: rounds to 2^16, past the range
      {65536.0, kInf},
      {1e300, kInf},
      {kInf, kInf},
  });
}

TEST(DtypeRounding, Bf16NamedBitPatternClasses) {
  check_named_cases(kBf16, {
      {0.0, 0.0},
      {0x1p-133, 0x1p-133},                 // smallest subnormal
      {0x1p-134, 0.0},                      // half of it: tie to the even zero
      {0x1.000002p-134, 0x1p-133},          // just above that half
      {0x1.fffffep-135, 0.0},               // below the half
      {0x1p-149, 0.0},                      // smallest float subnormal
      {1e-300, 0.0},
      {0x3p-134, 0x2p-133},                 // between subnormals 1 and 2: up to even
      {0x5p-134, 0x2p-133},                 // between subnormals 2 and 3: down to even
      {0x7fp-133, 0x7fp-133},               // largest subnormal
      {0xffp-134, 0x1p-126},                // tie with the smallest normal: up to even
      {0x1p-126, 0x1p-126},                 // smallest normal
      {0x1.01p+0, 1.0},                     // tie, down to even
      {0x1.03p+0, 0x1.04p+0},               // tie, up to even
      {0x1.010002p+0, 0x1.02p+0},           // just above a tie
      {0x1.01000001p+0, 0x1.02p+0},         // above the tie by less than a float ulp
      {0x1.fep+127, 0x1.fep+127},           // largest finite
      {0x1.fefffep+127, 0x1.fep+127},       // the float just below the overflow tie
      {0x1.fefffffffffffp+127, 0x1.fep+127},  // the double just below it
      {0x1.ffp+127, kInf},                  // overflow tie: rounds to 2^128
      {0x1.fffffep+127, kInf},              // FLT_MAX
      {0x1p+128, kInf},
      {kInf, kInf},
  });
}

TEST(DtypeRounding, NaNStaysNaN) {
  const uint32_t float_nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F80FFFFu,
                                 0x7FFF0000u, 0xFF800001u, 0x7FFFFFFFu};
  MismatchLog log;
  for (const Format* f : {&kFp16, &kBf16, &kFp32}) {
    for (uint32_t bits : float_nans) log.check_both(*f, std::bit_cast<float>(bits), kNaN);
    log.check_both(*f, std::bit_cast<double>(uint64_t{0x7FF0000000000001}), kNaN);
    log.check_both(*f, kNaN, kNaN);
  }
}

// ---------------------------------------------------------------------------
// Every tie between adjacent fp16 / bf16 values, from the decoded table alone
// ---------------------------------------------------------------------------

// `inner` and `outer` are adjacent in magnitude; `outer_result` is what values just
// past their tie round to (outer, or inf where outer lies past the range). Doubles
// within a float ulp of the tie would land on it if rounded through float first.
void check_tie_neighbourhood(MismatchLog& log, const Format& f, double inner, double outer,
                             double at_tie, double outer_result) {
  const double tie = (inner + outer) / 2;
  const float tie_f = static_cast<float>(tie);  // exact: few significant bits
  const float away_from_zero = std::copysign(std::numeric_limits<float>::infinity(), tie_f);
  log.check_both(f, inner, inner);
  log.check_both(f, tie, at_tie);
  log.check_both(f, std::nextafter(tie, inner), inner);
  log.check_both(f, std::nextafter(tie, outer), outer_result);
  log.check_both(f, tie * (1 - 0x1p-30), inner);
  log.check_both(f, tie * (1 + 0x1p-30), outer_result);
  log.check_both(f, std::nextafterf(tie_f, 0.0f), inner);
  log.check_both(f, std::nextafterf(tie_f, away_from_zero), outer_result);
}

void check_every_tie(const Format& f) {
  const std::vector<double> values = non_negative_finite_values(f);
  MismatchLog log;
  for (double sign : {1.0, -1.0}) {
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const double inner = sign * values[i], outer = sign * values[i + 1];
      const double even = (i % 2 == 0) ? inner : outer;
      check_tie_neighbourhood(log, f, inner, outer, even, outer);
    }
    // Past the largest finite value the next step would be the power of two that
    // ends the range; the tie with it rounds up (the largest mantissa is odd).
    const double largest = values.back();
    const double beyond = largest + (largest - values[values.size() - 2]);
    check_tie_neighbourhood(log, f, sign * largest, sign * beyond, sign * kInf, sign * kInf);
  }
}

TEST(DtypeRounding, Fp16EveryTieBetweenAdjacentValues) { check_every_tie(kFp16); }
TEST(DtypeRounding, Bf16EveryTieBetweenAdjacentValues) { check_every_tie(kBf16); }

// ---------------------------------------------------------------------------
// float32 inputs: all upper halves with tie-class lower halves, and random bits
// ---------------------------------------------------------------------------

void check_float_input(MismatchLog& log, uint32_t bits) {
  const float x = std::bit_cast<float>(bits);
  for (const Format* f : {&kFp16, &kBf16, &kFp32}) {
    const double expected = round_by_fields(x, *f);
    log.check("round_to_dtype", *f, static_cast<double>(x), expected, round_to_dtype(x, f->dtype));
    log.check("gpu::round_to", *f, x, static_cast<float>(expected), gpu::round_to(x, f->gpu_code));
  }
}

TEST(DtypeRounding, EveryFloat32UpperHalfWithTieClassLowerHalves) {
  // 0x7FFF / 0x8000 / 0x8001 straddle the bf16 tie; 0x0FFF / 0x1000 / 0x1001 /
  // 0x3000 the fp16 tie of normals with an even and with an odd kept bit.
  const uint32_t lower_halves[] = {0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
                                   0x0FFF, 0x1000, 0x1001, 0x3000};
  std::mt19937_64 rng(7);
  MismatchLog log;
  for (uint32_t upper = 0; upper <= 0xFFFF; ++upper) {
    for (uint32_t lower : lower_halves) check_float_input(log, upper << 16 | lower);
    check_float_input(log, upper << 16 | static_cast<uint32_t>(rng() & 0xFFFF));
  }
}

TEST(DtypeRounding, RandomFloat32BitPatterns) {
  std::mt19937_64 rng(12345);
  MismatchLog log;
  for (int i = 0; i < 2000000; ++i) check_float_input(log, static_cast<uint32_t>(rng() >> 32));
}

// ---------------------------------------------------------------------------
// double inputs to round_to_dtype that float32 cannot hold
// ---------------------------------------------------------------------------

// A double spanning the format's range (below half the smallest subnormal to past
// overflow) whose bits below the format's last normal bit take one tie class:
// zero, one, half - 1, half, half + 1, half plus less than a float ulp (for fp16
// and bf16 the double-rounding hazard), all ones, random.
double random_double_near_ties(std::mt19937_64& rng, const Format& f) {
  const int dropped = 52 - f.mantissa_bits;
  const uint64_t half = uint64_t{1} << (dropped - 1);
  const uint64_t dropped_mask = (uint64_t{1} << dropped) - 1;
  const uint64_t under_float_ulp = std::min(half - 1, (uint64_t{1} << 29) - 1);
  const uint64_t low_classes[] = {0, 1, half - 1, half, half + 1,
                                  half | (rng() & under_float_ulp), dropped_mask, rng() & dropped_mask};
  const uint64_t low = low_classes[rng() % std::size(low_classes)];
  const int lowest = -f.bias() - f.mantissa_bits - 2;
  const int leading_exponent = lowest + static_cast<int>(rng() % (f.bias() + 3 - lowest));
  const uint64_t kept = (rng() & ((uint64_t{1} << f.mantissa_bits) - 1)) << dropped;
  const uint64_t sign = rng() & (uint64_t{1} << 63);
  const uint64_t biased = static_cast<uint64_t>(leading_exponent + 1023) << 52;
  return std::bit_cast<double>(sign | biased | kept | low);
}

TEST(DtypeRounding, RoundToDtypeOnDoublesRoundsOnce) {
  std::mt19937_64 rng(99);
  MismatchLog log;
  for (const Format* f : {&kFp16, &kBf16, &kFp32}) {
    for (int i = 0; i < 600000; ++i) {
      const double x = random_double_near_ties(rng, *f);
      log.check("round_to_dtype", *f, x, round_by_fields(x, *f), round_to_dtype(x, f->dtype));
    }
    for (int i = 0; i < 200000; ++i) {  // any bits: NaN payloads, huge, tiny, subnormal
      const double x = std::bit_cast<double>(rng());
      log.check("round_to_dtype", *f, x, round_by_fields(x, *f), round_to_dtype(x, f->dtype));
    }
  }
}

}  // namespace
}  // namespace attn_oracle
