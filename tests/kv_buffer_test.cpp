// kv_buffer_test.cpp: the shared K/V buffer (docs/semantics.md#3-metadata) outside RapidCheck:
// hand-computed canonical metadata, the twin's preprocessing against the
// reference's on every micro-sequence of a grid, the error codes (reference and
// twin alike), streaming == whole sequence, and the first_document_begin = 7
// fixture: its micro-sequence equals attention over its active documents alone
// and leaves the first 7 rows of the gradient buffer exactly 0.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "attn_oracle/gpu/kv_buffer.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

using V = std::vector<int64_t>;

KvBufferProblem problem(V docs, int64_t m, int64_t hq = 2, int64_t hkv = 1, int64_t d = 8) {
  KvBufferProblem p;
  p.doc_lengths = std::move(docs);
  p.micro_seq_tokens = m;
  p.shape.heads_q = hq, p.shape.heads_kv = hkv, p.shape.head_dim = d;
  p.shape.backward = true;
  return p;
}

TEST(KvBufferReference, CanonicalMetadataByHand) {
  const KvBufferProblem p = problem({3, 4, 4, 1, 10}, 10);  // starts 0, 3, 7, 11, 12; N = 22
  const MicroSequenceMetadata m1 = ref::micro_sequence_metadata(p, 1).value();
  EXPECT_EQ(m1.begin, 10);
  EXPECT_EQ(m1.end, 20);
  EXPECT_EQ(m1.first_document_begin, 7);
  EXPECT_EQ(m1.cu_seqlens_q, (V{0, 1, 2, 10}));
  EXPECT_EQ(m1.cu_seqlens_k, (V{0, 4, 5, 13}));
  EXPECT_EQ(m1.q_document, (V{1, 2, 3, 3, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(m1.q_position, (V{3, 0, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m1.kv_document, (V{1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(m1.kv_position, (V{0, 1, 2, 3, 0, 0, 1, 2, 3, 4, 5, 6, 7}));
  const MicroSequenceMetadata m2 = ref::micro_sequence_metadata(p, 2).value();  // the shorter last one
  EXPECT_EQ(m2.begin, 20);
  EXPECT_EQ(m2.end, 22);
  EXPECT_EQ(m2.first_document_begin, 12);
  EXPECT_EQ(m2.cu_seqlens_q, (V{0, 2}));
  EXPECT_EQ(m2.cu_seqlens_k, (V{0, 10}));
}

TEST(KvBufferTwin, PlanEqualsReferenceOnAGrid) {
  for (const V& docs : {V{1}, V{5}, V{1, 1, 1}, V{3, 4, 4, 1, 10}, V{16, 1, 17}, V{2, 9, 1, 1, 6}})
    for (int64_t m = 1; m <= 18; ++m) {
      const KvBufferProblem p = problem(docs, m);
      const int64_t count = validate_kv_buffer(p)->micro_sequences;
      for (int64_t i = 0; i < count; ++i)
        EXPECT_EQ(gpu::kv_buffer_plan(p, i, gpu::KvDevice::twin).value(), ref::micro_sequence_metadata(p, i).value())
            << "m " << m << ", micro-sequence " << i;
    }
}

TEST(KvBuffer, ErrorCodesOnReferenceAndTwin) {
  struct Bad {
    KvBufferProblem p;
    ErrorCode code;
  };
  const Bad cases[] = {{problem({}, 4), ErrorCode::kv_buffer_document_length},
                       {problem({3, 0, 2}, 4), ErrorCode::kv_buffer_document_length},
                       {problem({3, -1}, 0), ErrorCode::kv_buffer_document_length},
                       {problem({3, 2}, 0), ErrorCode::kv_buffer_micro_seq_tokens},
                       {problem({3, 2}, 2, 3, 2), ErrorCode::bad_heads}};
  for (const Bad& b : cases) {
    EXPECT_EQ(ref::micro_sequence_metadata(b.p, 0).error().code, b.code);
    EXPECT_EQ(gpu::kv_buffer_plan(b.p, 0, gpu::KvDevice::twin).error().code, b.code);
    EXPECT_EQ(gpu::kv_buffer_stream(b.p, {}, gpu::KvDevice::twin).error().code, b.code);
    EXPECT_EQ(ref::kv_buffer_streaming(b.p, {}).error().code, b.code);
  }
  const KvBufferProblem p = problem({3, 2}, 2);  // micro-sequences [0, 2), [2, 4), [4, 5)
  EXPECT_EQ(gpu::kv_buffer_plan(p, 3, gpu::KvDevice::twin).error().code, ErrorCode::kv_buffer_slice_out_of_bounds);
  EXPECT_EQ(ref::micro_sequence_metadata(p, -1).error().code, ErrorCode::kv_buffer_slice_out_of_bounds);
  std::vector<double> buffer(5 * 2 * 8, 0.0);
  const std::vector<double> two_rows(2 * 2 * 8, 1.0), one_row(2 * 8, 1.0);
  // The last micro-sequence has one token: two rows at token 4 overrun the buffer, and nothing is written.
  auto e = gpu::kv_buffer_write_slice(p, 2, two_rows, buffer, gpu::KvDevice::twin);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, ErrorCode::kv_buffer_slice_out_of_bounds) << e->message;
  EXPECT_EQ(buffer, std::vector<double>(5 * 2 * 8, 0.0));
  EXPECT_EQ(gpu::kv_buffer_write_slice(p, 0, one_row, buffer, gpu::KvDevice::twin)->code, ErrorCode::bad_tensor_shape);
  EXPECT_FALSE(gpu::kv_buffer_write_slice(p, 2, one_row, buffer, gpu::KvDevice::twin).has_value());
  EXPECT_EQ(buffer[4 * 16], 1.0);
}

TEST(KvBuffer, StreamingEqualsWholeSequence) {
  for (int64_t m : {1, 3, 7, 16, 40}) {
    const KvBufferProblem p = problem({3, 4, 4, 1, 10}, m, 4, 2, 16);
    const AttentionInputs in = generate_kv_buffer_inputs(p, 11);
    const AttentionResult want = ref::kv_buffer_whole_sequence(p, in).value();
    const AttentionResult streamed = ref::kv_buffer_streaming(p, in).value();
    for (size_t e = 0; e < want.o.size(); ++e) ASSERT_NEAR(streamed.o[e], want.o[e], 1e-12);
    for (size_t e = 0; e < want.grads->dk.size(); ++e) ASSERT_NEAR(streamed.grads->dk[e], want.grads->dk[e], 1e-12);
    const AttentionResult twin = gpu::kv_buffer_stream(p, in, gpu::KvDevice::twin).value();
    for (const ToleranceCheck& c : check_attention_tolerance(whole_sequence_problem(p), in, twin, want))
      EXPECT_TRUE(c.pass) << "m " << m << ": " << c.describe();
  }
}

// fixtures/design/kv_buffer_first_document_begin_7.case.json: micro-sequence 1
// has 7 tokens of past before its first document. Against attention over the
// active documents [4, 1, 10] alone (tokens [7, 22), d_o kept on the
// micro-sequence's queries [10, 20) only): same o, lse, dq, and the same dK/dV
// added into rows [7, 20); rows [0, 7) exactly 0.
TEST(KvBufferFixture, FirstDocumentBegin7EqualsActiveDocumentsAlone) {
  auto c = read_case_file(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/design/kv_buffer_first_document_begin_7.case.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const KvBufferProblem& p = c->as<KvBufferCase>()->problem;
  const AttentionInputs in = kv_buffer_inputs(*c->as<KvBufferCase>());
  const int64_t hq = p.shape.heads_q, hkv = p.shape.heads_kv, d = p.shape.head_dim, n = 22, fdb = 7;
  ASSERT_EQ(ref::micro_sequence_metadata(p, 1)->first_document_begin, fdb);
  KvBufferProblem alone = p;
  alone.doc_lengths = {4, 1, 10};
  AttentionInputs alone_in{token_rows(in.q, fdb, n, hq, d), token_rows(in.k, fdb, n, hkv, d),
                           token_rows(in.v, fdb, n, hkv, d), token_rows(in.d_o, fdb, n, hq, d)};
  for (int64_t e = 0; e < n - fdb; ++e)
    if (e < 10 - fdb || e >= 20 - fdb)
      for (int64_t x = 0; x < hq * d; ++x) alone_in.d_o[e * hq * d + x] = 0.0;
  const AttentionResult want = ref::kv_buffer_whole_sequence(alone, alone_in).value();

  std::vector<double> buffer(n * 2 * hkv * d, 0.0);
  for (int64_t i = 0; i < 3; ++i) ref::kv_buffer_write_slice(p, i, kv_slice_of(p, i, in), buffer);
  const AttentionInputs micro{token_rows(in.q, 10, 20, hq, d), {}, {}, token_rows(in.d_o, 10, 20, hq, d)};
  register_builtin_backends();
  for (const char* name : {"reference", "cpu"}) {
    const double tol = std::string(name) == "reference" ? 1e-12 : 1e-5;  // the twin computes in fp32
    auto backend = BackendRegistry::instance().make(name);
    std::vector<double> grad(buffer.size(), 0.0);
    const AttentionResult got = backend->kv_buffer()->attend(p, 1, micro, buffer, &grad).value();
    for (int64_t e = 0; e < 10 * hq * d; ++e) {
      EXPECT_NEAR(got.o[e], want.o[(10 - fdb) * hq * d + e], tol) << name << " o[" << e << "]";
      EXPECT_NEAR(got.grads->dq[e], want.grads->dq[(10 - fdb) * hq * d + e], tol) << name << " dq[" << e << "]";
    }
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t t = 0; t < 10; ++t)
        EXPECT_NEAR(got.lse[h * 10 + t], want.lse[h * (n - fdb) + 10 - fdb + t], tol) << name;
    const int64_t row = hkv * d;
    for (int64_t e = 0; e < fdb * 2 * row; ++e) ASSERT_EQ(std::bit_cast<uint64_t>(grad[e]), 0u) << name << " row " << e / (2 * row);
    for (int64_t t = fdb; t < n; ++t)
      for (int64_t x = 0; x < row; ++x) {
        const double dk = t < 20 ? want.grads->dk[(t - fdb) * row + x] : 0.0, dv = t < 20 ? want.grads->dv[(t - fdb) * row + x] : 0.0;
        EXPECT_NEAR(grad[(t * 2) * row + x], dk, tol) << name << " dk row " << t;
        EXPECT_NEAR(grad[(t * 2 + 1) * row + x], dv, tol) << name << " dv row " << t;
      }
  }
}

}  // namespace
}  // namespace attn_oracle
