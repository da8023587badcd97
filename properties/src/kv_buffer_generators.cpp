// kv_buffer_generators.cpp: see kv_buffer_generators.hpp.
// Checked by tests/kv_buffer_reference_test.cpp (every draw validates).
#include "attn_oracle/kv_buffer_generators.hpp"

#include <vector>

namespace attn_oracle {
namespace {

// Uniform in [lo, hi] whatever RapidCheck's size (inRange alone scales with it).
rc::Gen<int64_t> uniform(int64_t lo, int64_t hi) { return rc::gen::resize(100, rc::gen::inRange<int64_t>(lo, hi + 1)); }

rc::Gen<int64_t> doc_length() {
  return rc::gen::weightedOneOf<int64_t>({{3, uniform(1, 40)}, {2, uniform(1, 6)}, {1, rc::gen::just<int64_t>(1)}});
}

rc::Gen<int64_t> micro_seq_tokens() {
  return rc::gen::weightedOneOf<int64_t>({{5, uniform(1, 20)}, {1, rc::gen::element<int64_t>(15, 16, 17)},
                                          {1, rc::gen::just<int64_t>(1000)}});
}

rc::Gen<AttentionShape> kv_shape() {
  return rc::gen::map(rc::gen::tuple(uniform(1, 2), uniform(1, 2), rc::gen::element<int64_t>(8, 16)), [](auto t) {
    AttentionShape s;
    s.heads_kv = std::get<0>(t);
    s.heads_q = s.heads_kv * std::get<1>(t);
    s.head_dim = std::get<2>(t);
    s.dtype = Dtype::fp32;
    s.backward = true;
    return s;
  });
}

}  // namespace

rc::Gen<KvBufferDraw> kv_buffer_draw() {
  auto docs = rc::gen::mapcat(uniform(1, 4), [](int64_t n) {
    return rc::gen::container<std::vector<int64_t>>(static_cast<size_t>(n), doc_length());
  });
  return rc::gen::map(rc::gen::tuple(docs, micro_seq_tokens(), kv_shape(), rc::gen::arbitrary<uint32_t>()),
                      [](auto t) {
                        KvBufferDraw d;
                        d.problem.doc_lengths = std::get<0>(t);
                        d.problem.micro_seq_tokens = std::get<1>(t);
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

Case kv_buffer_case(const KvBufferDraw& d) {
  Case c;
  c.op = CaseOp::kv_buffer;
  c.kv_buffer = d.problem;
  c.data_seed = d.seed;
  return c;
}

}  // namespace attn_oracle
