// kv_buffer_generators.cpp: see kv_buffer_generators.hpp.
// Checked by tests/kv_buffer_generators_test.cpp (every draw validates; the mix).
#include "attn_oracle/properties/kv_buffer_generators.hpp"
#include "attn_oracle/properties/shrinking_choice.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace attn_oracle::inline properties {
namespace {

// Uniform in [lo, hi] whatever RapidCheck's size (inRange alone scales with it).
rc::Gen<int64_t> uniform(int64_t lo, int64_t hi) { return rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1)); }

// Uniform in [lo, hi], shrinking to every smaller value, smallest first: m and
// k are small, and halving alone skips the one value that keeps a document
// straddling a micro-sequence boundary (m = 6 -> 3 with documents [1, 3]).
rc::Gen<int64_t> uniform_every_smaller(int64_t lo, int64_t hi) {
  return rc::Gen<int64_t>([lo, hi](const rc::Random& random, int) {
    rc::Random r = random;
    const int64_t v = lo + static_cast<int64_t>(r.next() % static_cast<uint64_t>(hi - lo + 1));
    return rc::shrinkable::shrinkRecur(v, [lo](int64_t x) { return rc::seq::range<int64_t>(lo, x); });
  });
}

rc::Gen<int64_t> doc_length() {
  return shrinking_weighted<int64_t>({{3, uniform(1, 40)}, {2, uniform(1, 6)}, {1, rc::gen::just<int64_t>(1)}});
}

// The token count is built from the micro-sequences, not summed from the
// documents: k micro-sequences of m tokens, the last one filled to
// ceil(m * fill / 20), so N = (k - 1) * m + that. An m drawn beside independent
// document lengths stalls the shrink at pairs like N = 18, m = 17 (or N = 15,
// m = 2), where shortening a document alone leaves one micro-sequence or an m
// that divides N. Here every part shrinks on its own and keeps its meaning:
// fewer micro-sequences, shorter ones, a shorter last one.
struct MicroSequencing {
  int64_t count = 1, tokens = 1, fill = 20;  // k, m, last one's fill in twentieths
  int64_t total() const { return (count - 1) * tokens + (tokens * fill + 19) / 20; }
};

// Mostly up to 8 micro-sequences of up to 20 tokens (m in 15..17 straddles a
// tile of 16); sometimes many short ones. The last one is full a third of the
// time, otherwise 1..m tokens; with k = 1, m runs past N.
rc::Gen<MicroSequencing> micro_sequencing() {
  auto counts = shrinking_weighted<std::pair<int64_t, int64_t>>(
      {{4, rc::gen::pair(uniform_every_smaller(1, 8), uniform_every_smaller(1, 20))},
       {1, rc::gen::pair(uniform_every_smaller(1, 40), uniform_every_smaller(1, 4))}});
  auto fill = shrinking_weighted<int64_t>({{2, uniform_every_smaller(1, 20)}, {1, rc::gen::just<int64_t>(20)}});
  return rc::gen::map(rc::gen::pair(counts, fill), [](const auto& t) {
    return MicroSequencing{t.first.first, t.first.second, t.second};
  });
}

// The drawn lengths tile [0, n), repeated when they run short, the last cut at n.
std::vector<int64_t> tile_documents(const std::vector<int64_t>& lengths, int64_t n) {
  std::vector<int64_t> docs;
  for (size_t i = 0; n > 0; i = (i + 1) % lengths.size()) {
    docs.push_back(std::min(lengths[i], n));
    n -= docs.back();
  }
  return docs;
}

// The domain's dtypes, fp32 first (what a failure shrinks towards); all three
// when it takes none of them.
std::vector<Dtype> drawable_dtypes(const InputDomain& domain) {
  std::vector<Dtype> out;
  for (Dtype dtype : {Dtype::fp32, Dtype::fp16, Dtype::bf16})
    if (domain.takes_dtype(dtype)) out.push_back(dtype);
  if (out.empty()) out = {Dtype::fp32, Dtype::fp16, Dtype::bf16};
  return out;
}

// The domain's head dims, else 8 and 16 (small, so that ctest stays fast) and 64,
// the smallest the CUDA kernels instantiate: without it the `cuda` backend
// declined every kv_buffer draw on a device.
std::vector<int64_t> drawable_head_dims(const InputDomain& domain) {
  return domain.head_dims.empty() ? std::vector<int64_t>{8, 16, 64} : domain.head_dims;
}

rc::Gen<AttentionShape> kv_shape(const InputDomain& domain) {
  return rc::gen::map(rc::gen::tuple(uniform(1, 2), uniform(1, 2), shrinking_element<int64_t>(drawable_head_dims(domain)),
                                     shrinking_element<Dtype>(drawable_dtypes(domain))),
                      [](auto t) {
    AttentionShape s;
    s.heads_kv = std::get<0>(t);
    s.heads_q = s.heads_kv * std::get<1>(t);
    s.head_dim = std::get<2>(t);
    s.dtype = std::get<3>(t);
    s.backward = true;
    return s;
  });
}

}  // namespace

rc::Gen<KvBufferDraw> kv_buffer_draw(const InputDomain& domain) {
  // 1..4 lengths: 0..3 in a container (any of them can be dropped while
  // shrinking, the first ones too) and one more at the end.
  auto lengths = rc::gen::map(
      rc::gen::pair(rc::gen::resize(3, rc::gen::container<std::vector<int64_t>>(doc_length())), doc_length()),
      [](std::pair<std::vector<int64_t>, int64_t> t) {
        t.first.push_back(t.second);
        return t.first;
      });
  return rc::gen::map(rc::gen::tuple(lengths, micro_sequencing(), kv_shape(domain), rc::gen::arbitrary<uint32_t>()),
                      [](auto t) {
                        const MicroSequencing& ms = std::get<1>(t);
                        KvBufferDraw d;
                        d.problem.doc_lengths = tile_documents(std::get<0>(t), ms.total());
                        d.problem.micro_seq_tokens = ms.tokens;
                        d.problem.shape = std::get<2>(t);
                        d.seed = std::get<3>(t);
                        return d;
                      })
      .as("kv_buffer problem");
}

void showValue(const KvBufferDraw& d, std::ostream& os) {
  const KvBufferProblem& p = d.problem;
  os << "doc_lengths [";
  for (size_t i = 0; i < p.doc_lengths.size(); ++i) os << (i ? ", " : "") << p.doc_lengths[i];
  os << "], micro_seq_tokens " << p.micro_seq_tokens << ", heads " << p.shape.heads_q << "/" << p.shape.heads_kv
     << ", head_dim " << p.shape.head_dim << ", " << to_string(p.shape.dtype) << ", seed " << d.seed;
}

}  // namespace attn_oracle::properties
