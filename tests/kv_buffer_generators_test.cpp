// kv_buffer_generators_test.cpp: meta tests of kv_buffer_draw
// (kv_buffer_generators.cpp). Every draw validates with documents of 1..40
// tokens; a fixed sample keeps the mix the properties rely on: several
// micro-sequences, documents straddling a micro-sequence boundary, an inactive
// prefix, a last micro-sequence shorter than m, m past N, m near a tile of 16.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <numeric>

#include "attn_oracle/properties/kv_buffer_generators.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"

namespace attn_oracle {
namespace {

struct Mix {
  bool several = false, straddling = false, prefix = false, short_last = false, past_n = false, near_16 = false;
};

Mix mix_of(const KvBufferProblem& p) {
  const int64_t n = std::accumulate(p.doc_lengths.begin(), p.doc_lengths.end(), int64_t{0});
  const int64_t m = p.micro_seq_tokens, k = (n + m - 1) / m;
  Mix x;
  x.several = k >= 3;
  x.short_last = k >= 2 && n % m != 0;
  x.past_n = m > n;
  x.near_16 = m >= 15 && m <= 17;
  for (int64_t i = 1; i < k; ++i) {
    const int64_t fdb = ref::micro_sequence_metadata(p, i)->first_document_begin;
    x.straddling = x.straddling || fdb < i * m;
    x.prefix = x.prefix || fdb > 0;
  }
  return x;
}

RC_GTEST_PROP(KvBufferGenerators, drawsValidateWithShortDocuments, ()) {
  const KvBufferDraw d = *kv_buffer_draw();
  auto z = validate_kv_buffer(d.problem);
  if (!z) RC_FAIL(std::string(to_string(z.error().code)) + ": " + z.error().message);
  for (int64_t len : d.problem.doc_lengths) RC_ASSERT(len >= 1 && len <= 40);
  RC_ASSERT(z->tokens <= 160);
  const Mix x = mix_of(d.problem);
  RC_CLASSIFY(x.several, "3+ micro-sequences");
  RC_CLASSIFY(x.straddling, "straddling document");
  RC_CLASSIFY(x.prefix, "inactive prefix");
  RC_CLASSIFY(x.short_last, "short last micro-sequence");
  RC_CLASSIFY(x.past_n, "m past N");
}

TEST(KvBufferGenerators, FixedSampleKeepsTheMix) {
  const int count = 2000;
  rc::Random random(uint64_t{20261122});
  int several = 0, straddling = 0, prefix = 0, short_last = 0, past_n = 0, near_16 = 0;
  for (int c = 0; c < count; ++c) {
    const KvBufferDraw d = kv_buffer_draw()(random.split(), 100).value();
    const Mix x = mix_of(d.problem);
    several += x.several, straddling += x.straddling, prefix += x.prefix;
    short_last += x.short_last, past_n += x.past_n, near_16 += x.near_16;
  }
  std::cout << "[ mix      ] of " << count << ": 3+ micro-sequences " << several << ", straddling " << straddling
            << ", inactive prefix " << prefix << ", short last " << short_last << ", m past N " << past_n
            << ", m in 15..17 " << near_16 << "\n";
  EXPECT_GT(several, count / 2);
  EXPECT_GT(straddling, count / 2);
  EXPECT_GT(prefix, count / 3);
  EXPECT_GT(short_last, count / 3);
  EXPECT_GT(past_n, count / 50);
  EXPECT_GT(near_16, count / 50);
}

}  // namespace
}  // namespace attn_oracle
