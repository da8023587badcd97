// adapters_test.cpp: the convention adapters (adapters/include/attn_oracle/adapters/).
//  - hand-computed cases: a stack's arguments and the batch they mean, written out;
//  - round trips: theirs -> ours -> theirs gives the same arguments; ours ->
//    theirs -> ours attends exactly as the original (the reference's explicit
//    mask, window included, compared pair by pair), on drawn batches too;
//  - refusals: inputs a stack cannot express (with the first differing query
//    named) and malformed arguments, extreme integers included, each with its code.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <climits>

#include "attn_oracle/adapters/cudnn.hpp"
#include "attn_oracle/adapters/flash_attention.hpp"
#include "attn_oracle/adapters/torch.hpp"
#include "attn_oracle/adapters/transformer_engine.hpp"
#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle {
namespace {

namespace fa = adapters::flash_attention;
namespace cudnn = adapters::cudnn;
namespace torch = adapters::torch;
namespace te = adapters::transformer_engine;

PackedBatch one_row(std::vector<int64_t> q_ids, std::vector<int64_t> q_pos, std::vector<int64_t> kv_ids,
                    std::vector<int64_t> kv_pos, MaskKind mask, Window window = {}, int64_t m = 4) {
  PackedBatch b;
  const int64_t tq = static_cast<int64_t>(q_ids.size()), tkv = static_cast<int64_t>(kv_ids.size());
  b.q = {IntArray({1, tq}, std::move(q_ids)), IntArray({1, tq}, std::move(q_pos))};
  b.kv = {IntArray({1, tkv}, std::move(kv_ids)), IntArray({1, tkv}, std::move(kv_pos))};
  b.mask = mask, b.window = window, b.max_segments = m;
  return b;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t t = 0; t < n; ++t) v[t] = t;
  return v;
}

// `call` (one row over the tokens a stack's call reads: q token a is our flat
// token q_tokens[a]) attends exactly as `original`, window included.
testing::AssertionResult attends_the_same(const PackedBatch& original, const PackedBatch& call,
                                          const std::vector<int64_t>& q_tokens, const std::vector<int64_t>& kv_tokens) {
  const auto l = validate(original);
  const auto cl = validate(call);
  if (!l || !cl) return testing::AssertionFailure() << "invalid: " << (l ? cl.error().message : l.error().message);
  const ref::RowMask theirs = ref::explicit_mask(call, cl.value(), 0, true);
  std::vector<int64_t> q_at(l->rows() * l->q_len, -1), kv_at(l->rows() * l->kv_len, -1);
  for (size_t a = 0; a < q_tokens.size(); ++a) q_at.at(q_tokens[a]) = static_cast<int64_t>(a);
  for (size_t b = 0; b < kv_tokens.size(); ++b) kv_at.at(kv_tokens[b]) = static_cast<int64_t>(b);
  int64_t ours_true = 0, theirs_true = 0;
  for (char c : theirs.dense()) theirs_true += c != 0;
  for (int64_t row = 0; row < l->rows(); ++row) {
    const ref::RowMask ours = ref::explicit_mask(original, l.value(), row, true);
    for (int64_t i = 0; i < l->q_len; ++i)
      for (int64_t j = 0; j < l->kv_len; ++j) {
        const int64_t a = q_at[row * l->q_len + i], b = kv_at[row * l->kv_len + j];
        const bool want = ours(i, j), got = a >= 0 && b >= 0 && theirs(a, b);
        ours_true += want;
        if (want != got)
          return testing::AssertionFailure() << "row " << row << ", q " << i << ", kv " << j << ": ours "
                                             << want << ", the call " << got;
      }
  }
  if (ours_true != theirs_true)
    return testing::AssertionFailure() << "the call attends " << theirs_true << " pairs, ours " << ours_true;
  return testing::AssertionSuccess();
}

// ------------------------------------------------------------------ FlashAttention
fa::VarlenParams fa_params(std::vector<int64_t> cu_q, std::vector<int64_t> cu_k, int64_t max_q, int64_t max_k,
                           bool causal, int64_t left = -1, int64_t right = -1, fa::Version v = fa::Version::fa3) {
  return fa::VarlenParams{std::move(cu_q), std::move(cu_k), max_q, max_k, causal, left, right, v};
}

TEST(FlashAttentionAdapter, CausalIsBottomRightPerDocument) {
  const auto b = fa::to_packed_batch(fa_params({0, 2, 5}, {0, 4, 7}, 3, 4, true));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value(), one_row({1, 1, 2, 2, 2}, {0, 1, 0, 1, 2}, {1, 1, 1, 1, 2, 2, 2}, {0, 1, 2, 3, 0, 1, 2},
                               MaskKind::causal_bottom_right, {}, 2));
  // Back: the same arguments; every token valid, so FlashAttention's token t is ours.
  const auto call = fa::to_flash_attention(b.value(), fa::Version::fa3);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(call->params, fa_params({0, 2, 5}, {0, 4, 7}, 3, 4, true));
  EXPECT_EQ(call->q_tokens, identity(5));
  EXPECT_EQ(call->kv_tokens, identity(7));
}

TEST(FlashAttentionAdapter, AWindowAnchorsAtTheBottomRightThroughPositions) {
  // Non-causal window (1, 1) on 2 queries and 4 keys: query i sees keys [i + 1, i + 3].
  const auto b = fa::to_packed_batch(fa_params({0, 2}, {0, 4}, 2, 4, false, 1, 1));
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value(), one_row({1, 1}, {2, 3}, {1, 1, 1, 1}, {0, 1, 2, 3}, MaskKind::no_mask, {1, 1}, 1));
  const auto call = fa::to_flash_attention(b.value(), fa::Version::fa3);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(call->params, fa_params({0, 2}, {0, 4}, 2, 4, false, 1, 1));
  // A right side of 0 is FlashAttention's causal: bottom-right, our left kept.
  const auto local = fa::to_packed_batch(fa_params({0, 2}, {0, 4}, 2, 4, false, 1, 0));
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->mask, MaskKind::causal_bottom_right);
  EXPECT_EQ(local->window, (Window{1, -1}));
}

TEST(FlashAttentionAdapter, Fa2ReadsMinusOneAsMaxSeqlenK) {
  // 5 queries, 2 keys, max_seqlen_k 3, window (0, -1). FA3: query i sees keys
  // from i - 3 on, so query 0 sees both. FA2: the right side is max_seqlen_k = 3,
  // so query 0 sees keys up to 0 - 3 + 3 = 0 only.
  const auto fa3 = fa::to_packed_batch(fa_params({0, 5}, {0, 2}, 5, 3, false, 0, -1, fa::Version::fa3));
  const auto fa2 = fa::to_packed_batch(fa_params({0, 5}, {0, 2}, 5, 3, false, 0, -1, fa::Version::fa2));
  ASSERT_TRUE(fa3.ok() && fa2.ok());
  EXPECT_EQ(fa3->window, (Window{0, -1}));
  EXPECT_EQ(fa2->window, (Window{0, 3}));
  const auto l = validate(fa2.value()).value();
  EXPECT_FALSE(ref::explicit_mask(fa2.value(), l, 0, true)(0, 1));
  EXPECT_TRUE(ref::explicit_mask(fa3.value(), l, 0, true)(0, 1));
  // Going out to FA2, max_seqlen_k is chosen so that its rule says what we mean:
  // >= lq - 1 for an unbounded right side, right + 1 for a bounded one.
  const auto unbounded = fa::to_flash_attention(fa3.value(), fa::Version::fa2);
  ASSERT_TRUE(unbounded.ok()) << unbounded.error().message;
  EXPECT_EQ(unbounded->params, fa_params({0, 5}, {0, 2}, 5, 5, false, 0, -1, fa::Version::fa2));
  const auto bounded = fa::to_flash_attention(fa2.value(), fa::Version::fa2);
  ASSERT_TRUE(bounded.ok()) << bounded.error().message;
  EXPECT_EQ(bounded->params, fa_params({0, 5}, {0, 2}, 5, 4, false, 0, 3, fa::Version::fa2));
  // A left side >= max_seqlen_k is -1 in FA2 first, then max_seqlen_k: unbounded.
  const auto left = fa::to_packed_batch(fa_params({0, 5}, {0, 2}, 5, 2, false, 2, 1, fa::Version::fa2));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->window, (Window{2, 1}));  // 2 >= max_seqlen_k: read as 2, the same keys
  const auto causal = fa::to_packed_batch(fa_params({0, 5}, {0, 2}, 5, 2, true, -1, -1, fa::Version::fa2));
  ASSERT_TRUE(causal.ok());
  EXPECT_EQ(causal->window, (Window{-1, -1}));
}

TEST(FlashAttentionAdapter, TopLeftCausalGoesOutTrimmedOrIsRefused) {
  // Top-left causal, 2 queries at 0..1, 4 keys at 0..3: keys 2, 3 are attended
  // by nobody; trimmed to 2 x 2 runs, FlashAttention's causal says the same.
  const PackedBatch fits = one_row({1, 1}, {0, 1}, {1, 1, 1, 1}, {0, 1, 2, 3}, MaskKind::causal);
  const auto call = fa::to_flash_attention(fits, fa::Version::fa3);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(call->params.cu_seqlens_k, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(call->kv_tokens, (std::vector<int64_t>{0, 1}));
  // 4 queries, 2 keys: top-left lets query 0 see key 0, bottom-right nothing.
  const PackedBatch longer_q = one_row({1, 1, 1, 1}, {0, 1, 2, 3}, {1, 1}, {0, 1}, MaskKind::causal);
  const auto refused = fa::to_flash_attention(longer_q, fa::Version::fa3);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::unsupported);
  EXPECT_NE(refused.error().message.find("row 0, document 1 (4 q tokens, 2 kv tokens): query 0 attends keys [0, 0] here but no key"),
            std::string::npos) << refused.error().message;
}

TEST(FlashAttentionAdapter, RefusesWhatItCannotReadAndMalformedArguments) {
  // Striped positions under a causal term: no index rule.
  const PackedBatch striped = one_row({1, 1}, {0, 2}, {1, 1}, {0, 1}, MaskKind::causal_bottom_right);
  const auto s = fa::to_flash_attention(striped, fa::Version::fa3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::unsupported);
  EXPECT_NE(s.error().message.find("q positions are not contiguous"), std::string::npos);
  // An invalid batch gives the model's code.
  EXPECT_EQ(fa::to_flash_attention(one_row({1, 0}, {0, 0}, {1}, {0}, MaskKind::causal), fa::Version::fa3).error().code,
            ErrorCode::padding_with_non_padding_mask);

  auto code = [](const fa::VarlenParams& p) { return fa::to_packed_batch(p).error().code; };
  EXPECT_EQ(code(fa_params({0, 2}, {0, 2, 4}, 2, 2, true)), ErrorCode::bad_metadata);       // sizes differ
  EXPECT_EQ(code(fa_params({0}, {0}, 0, 0, true)), ErrorCode::bad_metadata);                // no document
  EXPECT_EQ(code(fa_params({1, 2}, {0, 2}, 2, 2, true)), ErrorCode::bad_metadata);          // not from 0
  EXPECT_EQ(code(fa_params({0, 3, 2}, {0, 1, 2}, 3, 2, true)), ErrorCode::bad_metadata);    // decreasing
  EXPECT_EQ(code(fa_params({0, int64_t{1} << 31}, {0, 1}, int64_t{1} << 31, 1, true)), ErrorCode::bad_metadata);
  EXPECT_EQ(code(fa_params({0, 3}, {0, 2}, 2, 2, true)), ErrorCode::bad_metadata);          // max_seqlen_q < 3
  EXPECT_EQ(code(fa_params({0, 2}, {0, 2}, 2, 2, false, -2, -1)), ErrorCode::bad_window);
  EXPECT_EQ(code(fa_params({0, 2}, {0, 2}, 2, 2, false, 0, int64_t{1} << 31)), ErrorCode::bad_window);
  EXPECT_EQ(code(fa_params({0, 2}, {0, 2}, 2, 2, false, LLONG_MAX, 0)), ErrorCode::bad_window);
  EXPECT_NE(fa::to_packed_batch(fa_params({0, 3, 2}, {0, 1, 2}, 3, 2, true)).error().message.find(
                "cu_seqlens_q decreases at entry 2: 3 then 2"),
            std::string::npos);
}

TEST(FlashAttentionAdapter, ExtremeIntegersThatMeanUnboundedGoOutAsMinusOne) {
  // A left side of INT64_MAX and positions near INT64_MAX: the same as (-1, -1), contiguous.
  const int64_t top = LLONG_MAX;
  const PackedBatch b = one_row({1, 1}, {top - 2, top - 1}, {1, 1, 1}, {top - 2, top - 1, top},
                                MaskKind::causal_bottom_right, {top, LLONG_MIN});
  const auto call = fa::to_flash_attention(b, fa::Version::fa3);
  ASSERT_TRUE(call.ok()) << call.error().message;
  EXPECT_EQ(call->params, fa_params({0, 2}, {0, 3}, 2, 3, true));
  EXPECT_TRUE(attends_the_same(b, fa::to_packed_batch(call->params).value(), call->q_tokens, call->kv_tokens));
}

TEST(FlashAttentionAdapter, OutputsComeBackWithLseMinusInfinity) {
  const PackedBatch b = one_row({0, 1, 1}, {0, 0, 1}, {1, 1}, {0, 1}, MaskKind::padding_causal_bottom_right);
  const auto call = fa::to_flash_attention(b, fa::Version::fa3).value();
  ASSERT_EQ(call.q_tokens, (std::vector<int64_t>{1, 2}));
  AttentionSizes sizes;
  sizes.rows = 1, sizes.q_len = 3, sizes.kv_len = 2, sizes.heads_q = 1, sizes.heads_kv = 1, sizes.head_dim = 1;
  const AttentionResult r = fa::outputs_to_ours(call, {0.5, 0.25}, {INFINITY, 1.5}, sizes);
  EXPECT_EQ(r.o, (std::vector<double>{0.0, 0.5, 0.25}));
  EXPECT_EQ(r.lse, (std::vector<double>{-INFINITY, -INFINITY, 1.5}));
}

// Drawn FlashAttention arguments go in and come back out, attending the same.
RC_GTEST_PROP(FlashAttentionAdapter, TheirsToOursToTheirsAttendsTheSame, ()) {
  const int docs = *rc::gen::inRange(1, 4);
  fa::VarlenParams p;
  p.cu_seqlens_q = p.cu_seqlens_k = {0};
  for (int k = 0; k < docs; ++k) {
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + *rc::gen::inRange(0, 6));
    p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + *rc::gen::inRange(0, 6));
    p.max_seqlen_q = std::max(p.max_seqlen_q, p.cu_seqlens_q[k + 1] - p.cu_seqlens_q[k]);
    p.max_seqlen_k = std::max(p.max_seqlen_k, p.cu_seqlens_k[k + 1] - p.cu_seqlens_k[k]);
  }
  p.causal = *rc::gen::arbitrary<bool>();
  p.window_left = *rc::gen::inRange(-1, 5);
  p.window_right = *rc::gen::inRange(-1, 5);
  p.version = *rc::gen::element(fa::Version::fa2, fa::Version::fa3);
  const auto ours = fa::to_packed_batch(p);
  RC_ASSERT(ours.ok());
  const auto call = fa::to_flash_attention(ours.value(), p.version);
  RC_ASSERT(call.ok());
  if (call->params.cu_seqlens_q.size() < 2) return;  // no document with valid tokens: nothing to call
  RC_ASSERT(attends_the_same(ours.value(), fa::to_packed_batch(call->params).value(), call->q_tokens, call->kv_tokens));
}

// ------------------------------------------------------------------ cuDNN
TEST(CudnnAdapter, LeftBoundIsExclusiveAndOffsetsMayLeaveGaps) {
  // Two sequences in tensors of 6 q and 5 kv tokens, offsets in elements (H * D = 4).
  cudnn::SdpaRaggedParams p;
  p.seq_len_q = {2, 2};
  p.seq_len_kv = {2, 3};
  p.ragged_offset_q = {0, 12, 24};  // tokens 0, 3; end 6
  p.ragged_offset_kv = {0, 8, 20};  // tokens 0, 2; end 5
  p.q_elements_per_token = p.kv_elements_per_token = 4;
  p.alignment = cudnn::DiagonalAlignment::bottom_right;
  p.left_bound = 1;  // the diagonal alone: our left 0
  p.right_bound = 0;
  const auto b = cudnn::to_packed_batch(p);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value(), one_row({1, 1, 0, 2, 2, 0}, {0, 1, 0, 0, 1, 0}, {1, 1, 2, 2, 2}, {0, 1, 0, 1, 2},
                               MaskKind::padding_causal_bottom_right, {0, -1}, 2));
  const auto back = cudnn::to_cudnn(b.value(), 4, 4);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back.value(), p);
}

TEST(CudnnAdapter, OurLeftWindowIsTheBoundMinusOne) {
  const PackedBatch b = one_row({1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}, MaskKind::no_mask, {1, 2});
  const auto p = cudnn::to_cudnn(b);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->alignment, cudnn::DiagonalAlignment::top_left);
  EXPECT_EQ(p->left_bound, 2);
  EXPECT_EQ(p->right_bound, 2);
  EXPECT_EQ(p->ragged_offset_q, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(attends_the_same(b, cudnn::to_packed_batch(p.value()).value(), identity(3), identity(3)));
}

TEST(CudnnAdapter, TriesTheOtherAlignmentBeforeRefusing) {
  // Top-left causal with q positions 2..3 against kv 0..3: the bottom-right diagonal.
  const PackedBatch b = one_row({1, 1}, {2, 3}, {1, 1, 1, 1}, {0, 1, 2, 3}, MaskKind::causal);
  const auto p = cudnn::to_cudnn(b);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->alignment, cudnn::DiagonalAlignment::bottom_right);
  EXPECT_TRUE(attends_the_same(b, cudnn::to_packed_batch(p.value()).value(), identity(2), identity(4)));
  // The diagonal alone, q positions one past kv's on runs of equal length: neither alignment.
  const auto refused = cudnn::to_cudnn(one_row({1, 1}, {1, 2}, {1, 1}, {0, 1}, MaskKind::no_mask, {0, 0}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::unsupported);
  EXPECT_NE(refused.error().message.find("query 0 attends keys [1, 1] here but keys [0, 0] under cuDNN's TOP_LEFT band"),
            std::string::npos) << refused.error().message;
}

TEST(CudnnAdapter, RefusesMalformedArguments) {
  cudnn::SdpaRaggedParams ok;
  ok.seq_len_q = ok.seq_len_kv = {2};
  ok.ragged_offset_q = ok.ragged_offset_kv = {0, 2};
  ASSERT_TRUE(cudnn::to_packed_batch(ok).ok());
  auto with = [&](auto change) {
    cudnn::SdpaRaggedParams p = ok;
    change(p);
    return cudnn::to_packed_batch(p).error().code;
  };
  using P = cudnn::SdpaRaggedParams;
  EXPECT_EQ(with([](P& p) { p.ragged_offset_q = {0}; }), ErrorCode::bad_metadata);
  EXPECT_EQ(with([](P& p) { p.seq_len_q = {3}; }), ErrorCode::bad_metadata);  // past the end
  EXPECT_EQ(with([](P& p) { p.seq_len_q = {-1}; }), ErrorCode::bad_metadata);
  EXPECT_EQ(with([](P& p) { p.seq_len_q = {int64_t{1} << 31}, p.ragged_offset_q = {0, int64_t{1} << 32}; }),
            ErrorCode::bad_metadata);
  EXPECT_EQ(with([](P& p) { p.q_elements_per_token = 4; p.ragged_offset_q = {0, 6}; }), ErrorCode::bad_metadata);
  EXPECT_EQ(with([](P& p) { p.ragged_offset_q = {2, 1}; }), ErrorCode::bad_metadata);
  EXPECT_EQ(with([](P& p) { p.left_bound = 0; }), ErrorCode::bad_window);
  EXPECT_EQ(with([](P& p) { p.right_bound = -1; }), ErrorCode::bad_window);
  EXPECT_EQ(with([](P& p) { p.left_bound = LLONG_MAX; }), ErrorCode::bad_window);
}

// ------------------------------------------------------------------ drawn batches, every adapter
// Going out either refuses with `unsupported` or gives a call that attends as ours.
RC_GTEST_PROP(Adapters, OursToTheirsToOursAttendsTheSameOrRefuses, ()) {
  const PackedBatch b = *packed_batch(BatchOptions{.max_rows = 2, .max_docs = 4, .max_len = 12, .extra_dims = true});
  const BatchLayout l = validate(b).value();
  const auto q_all = identity(l.rows() * l.q_len), kv_all = identity(l.rows() * l.kv_len);
  int said = 0;
  for (fa::Version v : {fa::Version::fa2, fa::Version::fa3}) {
    const auto call = fa::to_flash_attention(b, v);
    if (!call) {
      RC_ASSERT(call.error().code == ErrorCode::unsupported);
      continue;
    }
    ++said;
    const auto in = fa::to_packed_batch(call->params);
    if (call->params.cu_seqlens_q.size() < 2) continue;  // nothing valid: nothing to call
    if (!in) RC_FAIL(in.error().message);
    RC_ASSERT(attends_the_same(b, in.value(), call->q_tokens, call->kv_tokens));
  }
  if (const auto p = cudnn::to_cudnn(b)) {
    ++said;
    if (!p->seq_len_q.empty()) RC_ASSERT(attends_the_same(b, cudnn::to_packed_batch(p.value()).value(), q_all, kv_all));
  } else {
    RC_ASSERT(p.error().code == ErrorCode::unsupported);
  }
  if (const auto p = te::to_thd(b)) {
    ++said;
    if (p->cu_seqlens_q.size() > 1) {
      const auto in = te::to_packed_batch(p.value());
      if (!in) RC_FAIL(in.error().message);
      RC_ASSERT(attends_the_same(b, in.value(), q_all, kv_all));
    }
  } else {
    RC_ASSERT(p.error().code == ErrorCode::unsupported);
  }
  if (const auto f = torch::to_flex_document_mask(b)) {  // [B, T] both ways: compared row by row
    ++said;
    const PackedBatch in = torch::to_packed_batch(f.value()).value();
    const BatchLayout il = validate(in).value();
    RC_ASSERT(il.rows() == l.rows());
    for (int64_t row = 0; row < l.rows(); ++row)
      RC_ASSERT(ref::explicit_mask(in, il, row, true).dense() == ref::explicit_mask(b, l, row, true).dense());
  } else {
    RC_ASSERT(f.error().code == ErrorCode::unsupported);
  }
  const auto seg = te::to_segments(b);
  RC_ASSERT(seg.ok());
  RC_ASSERT(te::to_packed_batch(seg.value()).value() == b);
  RC_CLASSIFY(said == 0, "refused by every kernel adapter");
  RC_TAG(to_string(b.mask));
}

// ------------------------------------------------------------------ PyTorch
TEST(TorchAdapter, IsCausalIsTopLeftAndLowerRightIsBottomRight) {
  const auto tl = torch::to_packed_batch(torch::SdpaParams{2, 3, 5, torch::SdpaCausal::is_causal});
  const auto br = torch::to_packed_batch(torch::SdpaParams{2, 3, 5, torch::SdpaCausal::causal_lower_right});
  ASSERT_TRUE(tl.ok() && br.ok());
  EXPECT_EQ(tl->mask, MaskKind::causal);
  EXPECT_EQ(br->mask, MaskKind::causal_bottom_right);
  EXPECT_EQ(tl->q.segment_ids.shape, (Shape{2, 3}));
  const auto l = validate(tl.value()).value();
  EXPECT_FALSE(ref::explicit_mask(tl.value(), l, 1, true)(0, 1));  // j <= i
  EXPECT_TRUE(ref::explicit_mask(br.value(), l, 1, true)(0, 2));   // j <= i + 5 - 3
  EXPECT_FALSE(ref::explicit_mask(br.value(), l, 1, true)(0, 3));
  EXPECT_EQ(torch::to_sdpa(tl.value()).value(), (torch::SdpaParams{2, 3, 5, torch::SdpaCausal::is_causal}));
  EXPECT_EQ(torch::to_sdpa(br.value()).value(), (torch::SdpaParams{2, 3, 5, torch::SdpaCausal::causal_lower_right}));
  EXPECT_EQ(torch::to_packed_batch(torch::SdpaParams{1, 0, 1}).error().code, ErrorCode::bad_metadata);
}

TEST(TorchAdapter, SdpaRefusesPackingAndWindows) {
  const auto packed = torch::to_sdpa(one_row({1, 2}, {0, 0}, {1, 2}, {0, 0}, MaskKind::causal));
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.error().code, ErrorCode::unsupported);
  const auto windowed = torch::to_sdpa(one_row({1, 1, 1}, {0, 1, 2}, {1, 1, 1}, {0, 1, 2}, MaskKind::causal, {1, -1}));
  ASSERT_FALSE(windowed.ok());
  EXPECT_NE(windowed.error().message.find("query 2 attends keys [1, 2] here but keys [0, 2]"), std::string::npos)
      << windowed.error().message;
  // A window wider than the row changes nothing: accepted.
  EXPECT_TRUE(torch::to_sdpa(one_row({1, 1}, {0, 1}, {1, 1}, {0, 1}, MaskKind::causal, {5, -1})).ok());
}

TEST(TorchAdapter, FlexDocumentMaskIsSelfAttentionOverDocumentRuns) {
  torch::FlexDocumentMask m{IntArray({1, 6}, {0, 0, 0, 1, 1, -1}), true, 1};
  const auto b = torch::to_packed_batch(m);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value(), one_row({1, 1, 1, 2, 2, 0}, {0, 1, 2, 0, 1, 0}, {1, 1, 1, 2, 2, 0}, {0, 1, 2, 0, 1, 0},
                               MaskKind::padding_causal, {1, -1}, 2));
  EXPECT_EQ(torch::to_flex_document_mask(b.value()).value(), m);
  // A document id that comes back after another: the model's code.
  EXPECT_EQ(torch::to_packed_batch(torch::FlexDocumentMask{IntArray({1, 3}, {0, 1, 0})}).error().code,
            ErrorCode::noncontiguous_segment);
  EXPECT_EQ(torch::to_packed_batch(torch::FlexDocumentMask{IntArray({1, 2}, {0, -2})}).error().code,
            ErrorCode::bad_metadata);
  EXPECT_EQ(torch::to_packed_batch(torch::FlexDocumentMask{IntArray({2}, {0, 0})}).error().code,
            ErrorCode::rank_mismatch);
  // Cross-attention has no flex document mask.
  EXPECT_EQ(torch::to_flex_document_mask(one_row({1}, {0}, {1, 1}, {0, 1}, MaskKind::no_mask)).error().code,
            ErrorCode::unsupported);
  EXPECT_EQ(torch::to_packed_batch(torch::FlexDocumentMask{IntArray({1, 2}, {0, 0}), false, -1, -2}).error().code,
            ErrorCode::bad_window);
}

TEST(TorchAdapter, FlexWindowsHaveBothSidesOnEveryKind) {
  const std::vector<int64_t> ids = {1, 1, 1, 2, 2}, pos = {0, 1, 2, 0, 1};
  // (1, 0) on a non-causal kind: kv_idx - q_idx <= 0 with q_idx - kv_idx <= 1.
  const auto local = torch::to_flex_document_mask(one_row(ids, pos, ids, pos, MaskKind::no_mask, {1, 0}));
  ASSERT_TRUE(local.ok()) << local.error().message;
  EXPECT_EQ(local.value(), (torch::FlexDocumentMask{IntArray({1, 5}, {0, 0, 0, 1, 1}), false, 1, 0}));
  // A right side alone, and a right side on a causal kind (it changes nothing there).
  EXPECT_EQ(torch::to_flex_document_mask(one_row(ids, pos, ids, pos, MaskKind::no_mask, {-1, 1}))->window_right, 1);
  EXPECT_EQ(torch::to_flex_document_mask(one_row(ids, pos, ids, pos, MaskKind::causal, {2, 1})).value(),
            (torch::FlexDocumentMask{IntArray({1, 5}, {0, 0, 0, 1, 1}), true, 2, 1}));
  // Bottom-right on self-attention is top-left; its right side is ignored, so it goes out unbounded.
  EXPECT_EQ(torch::to_flex_document_mask(one_row(ids, pos, ids, pos, MaskKind::causal_bottom_right, {1, 3})).value(),
            (torch::FlexDocumentMask{IntArray({1, 5}, {0, 0, 0, 1, 1}), true, 1, -1}));
  const auto in = torch::to_packed_batch(torch::FlexDocumentMask{IntArray({1, 5}, {0, 0, 0, 1, 1}), false, 0, 2});
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->window, (Window{0, 2}));
  // Positions that do not restart at 0 keep the band when both sides share them;
  // a gap inside a document is refused, naming the reason.
  EXPECT_TRUE(torch::to_flex_document_mask(one_row({1, 1}, {3, 4}, {1, 1}, {3, 4}, MaskKind::no_mask, {0, 0})).ok());
  EXPECT_EQ(torch::to_flex_document_mask(one_row({1, 1}, {0, 2}, {1, 1}, {0, 2}, MaskKind::causal, {1, -1})).error().code,
            ErrorCode::unsupported);
}

// The flex mask_mod computed on indices, for every small document layout, kind
// and window: the batch the adapter gives attends as it, and going back out
// gives a mask_mod that attends the same.
TEST(TorchAdapter, FlexDocumentMaskAttendsAsItsMaskModOnEveryWindow) {
  const std::vector<std::vector<int64_t>> rows = {{0, 0, 0, 0}, {0, 0, 1, 1, 1}, {0, 1, 1, -1}, {-1, 0, 0, 0, 1}};
  int checked = 0;
  for (const auto& doc : rows)
    for (bool causal : {false, true})
      for (int64_t left : {-1, 0, 1, 2})
        for (int64_t right : {-1, 0, 1, 3}) {
          const int64_t t = static_cast<int64_t>(doc.size());
          const torch::FlexDocumentMask m{IntArray({1, t}, doc), causal, left, right};
          const auto b = torch::to_packed_batch(m);
          ASSERT_TRUE(b.ok()) << b.error().message;
          const auto l = validate(b.value()).value();
          const ref::RowMask ours = ref::explicit_mask(b.value(), l, 0, true);
          for (int64_t q = 0; q < t; ++q)
            for (int64_t k = 0; k < t; ++k) {
              const bool mod = doc[q] == doc[k] && doc[q] >= 0 && (!causal || q >= k) && (left < 0 || q - k <= left) &&
                               (right < 0 || k - q <= right);
              ASSERT_EQ(ours(q, k), mod) << "q " << q << ", kv " << k << ", causal " << causal << ", window (" << left
                                         << ", " << right << ")";
            }
          const auto back = torch::to_flex_document_mask(b.value());
          ASSERT_TRUE(back.ok()) << back.error().message;
          ASSERT_TRUE(attends_the_same(b.value(), torch::to_packed_batch(back.value()).value(), identity(t), identity(t)));
          ++checked;
        }
  EXPECT_EQ(checked, 4 * 2 * 4 * 4);
}

// ------------------------------------------------------------------ TransformerEngine
TEST(TransformerEngineAdapter, MaskTypeNamesAreOurs) {
  for (MaskKind kind : kAllMaskKinds) {
    EXPECT_EQ(te::attn_mask_type(kind), to_string(kind));
    EXPECT_EQ(te::mask_kind_from_attn_mask_type(te::attn_mask_type(kind)).value(), kind);
  }
  EXPECT_EQ(te::mask_kind_from_attn_mask_type("arbitrary").error().code, ErrorCode::bad_mask);
}

TEST(TransformerEngineAdapter, ThdPaddedOffsetsLeaveGapsBetweenDocuments) {
  te::ThdParams p;
  p.attn_mask_type = "padding_causal_bottom_right";
  p.window_size = {1, 0};
  p.cu_seqlens_q = {0, 1, 3};
  p.cu_seqlens_kv = {0, 2, 4};
  p.cu_seqlens_q_padded = {0, 2, 4};
  p.cu_seqlens_kv_padded = {0, 2, 4};
  const auto b = te::to_packed_batch(p);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b.value(), one_row({1, 0, 2, 2}, {0, 0, 0, 1}, {1, 1, 2, 2}, {0, 1, 0, 1},
                               MaskKind::padding_causal_bottom_right, {1, 0}, 2));
  EXPECT_EQ(te::to_thd(b.value()).value(), p);
  // Gaps under a non-padding kind: the model's code.
  p.attn_mask_type = "causal_bottom_right";
  EXPECT_EQ(te::to_packed_batch(p).error().code, ErrorCode::padding_with_non_padding_mask);
  p.window_size = {-2, 0};
  EXPECT_EQ(te::to_packed_batch(p).error().code, ErrorCode::bad_window);
}

TEST(TransformerEngineAdapter, AWindowOnUnequalTopLeftDocumentsIsRefused) {
  te::ThdParams p;
  p.attn_mask_type = "padding";
  p.window_size = {1, 1};
  p.cu_seqlens_q = {0, 2};
  p.cu_seqlens_kv = {0, 3};
  const auto refused = te::to_packed_batch(p);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::unsupported);
  p.cu_seqlens_kv = {0, 2};
  EXPECT_TRUE(te::to_packed_batch(p).ok());
}

}  // namespace
}  // namespace attn_oracle
