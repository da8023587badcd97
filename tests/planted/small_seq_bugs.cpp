// small_seq_bugs.cpp: planted small-seq bugs (docs/semantics.md#8-small-sequence-problems), each
// ref::small_seq with one mistake a small-sequence kernel really makes applied to it. The
// backends' attention is the float64 dense reference (small_seq_backend), so
// small_seq/matchesGeneralAttention can run on them too.
#include <algorithm>
#include <cmath>

#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {
namespace {

bool gqa_problem(const AttentionShape& s) { return s.heads_kv >= 1 && s.heads_q % s.heads_kv == 0 && s.heads_q > s.heads_kv; }

// The kv head taken as the query head: K and V read at [t * Hkv + h] instead of
// [t * Hkv + h / (Hq / Hkv)], so query heads past Hkv read the next token's
// heads (and past the end of the tensor, zeros). Modelled as ref::small_seq with
// heads_kv = Hq on K, V gathered that way; dk, dv scattered back the same way.
Expected<SmallSeqResult> kv_head_is_query_head(const AttentionProblem& problem, const AttentionInputs& in) {
  if (!gqa_problem(problem.shape) || !validate_attention(problem, &in)) return ref::small_seq(problem, in);
  const int64_t hq = problem.shape.heads_q, hkv = problem.shape.heads_kv, d = problem.shape.head_dim;
  const int64_t tokens = static_cast<int64_t>(in.k.size()) / (hkv * d);
  auto source = [&](int64_t t, int64_t h, int64_t c) { return (t * hkv + h) * d + c; };  // the wrong address
  auto gather = [&](const std::vector<double>& narrow) {
    std::vector<double> wide(tokens * hq * d, 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t c = 0; c < d; ++c)
          if (source(t, h, c) < static_cast<int64_t>(narrow.size())) wide[(t * hq + h) * d + c] = narrow[source(t, h, c)];
    return wide;
  };
  auto scatter = [&](const std::vector<double>& wide) {
    std::vector<double> narrow(tokens * hkv * d, 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t c = 0; c < d; ++c)
          if (source(t, h, c) < static_cast<int64_t>(narrow.size())) narrow[source(t, h, c)] += wide[(t * hq + h) * d + c];
    return narrow;
  };
  AttentionProblem wide = problem;
  wide.shape.heads_kv = hq;
  auto r = ref::small_seq(wide, AttentionInputs{in.q, gather(in.k), gather(in.v), in.d_o});
  if (!r) return r;
  SmallSeqResult out = r.value();
  if (out.grads) out.grads = AttentionGradients{out.grads->dq, scatter(out.grads->dk), scatter(out.grads->dv)};
  return out;
}

// The window never reaches the small-seq kernel's mask.
Expected<SmallSeqResult> window_ignored(const AttentionProblem& problem, const AttentionInputs& in) {
  AttentionProblem p = problem;
  p.batch.window = Window{};
  return ref::small_seq(p, in);
}

// Softmax over all 16 slots of the padded key tile: slots past the document's
// keys enter the max and the denominator with score 0 (they are not set to
// -inf), and are then not stored. Every allowed P and o shrink by the same
// factor c = sum / (sum + (16 - keys) e^-m); forward only (the gradients are
// the reference's).
Expected<SmallSeqResult> softmax_over_padded_slots(const AttentionProblem& problem, const AttentionInputs& in) {
  auto r = ref::small_seq(problem, in);
  if (!r) return r;
  SmallSeqResult out = r.value();
  const auto docs = small_seq_documents(problem, &in).value();
  const BatchLayout l = validate_shapes(problem.batch).value();
  const int64_t hq = problem.shape.heads_q, hkv = problem.shape.heads_kv, d = problem.shape.head_dim;
  const double scale = problem.shape.effective_scale();
  for (size_t k = 0; k < docs.size(); ++k) {
    const SmallSeqDocument& doc = docs[k];
    for (int64_t h = 0; h < hq; ++h) {
      double* p = &out.p[(k * hq + h) * kSmallSeqMaxKeys];
      std::vector<double> s;
      for (int64_t j = 0; j < doc.keys; ++j) {
        if (p[j] == 0.0) continue;  // masked
        double acc = 0.0;
        for (int64_t c = 0; c < d; ++c)
          acc += in.q[((doc.row * l.q_len + doc.query) * hq + h) * d + c] *
                 in.k[((doc.row * l.kv_len + doc.first_key + j) * hkv + h / (hq / hkv)) * d + c];
        s.push_back(scale * acc);
      }
      if (s.empty()) continue;  // attends nothing: P and o stay 0
      const double m = std::max(0.0, *std::max_element(s.begin(), s.end()));
      double sum = 0.0;
      for (double x : s) sum += std::exp(x - m);
      const double c = sum / (sum + static_cast<double>(kSmallSeqMaxKeys - doc.keys) * std::exp(-m));
      for (int64_t j = 0; j < kSmallSeqMaxKeys; ++j) p[j] *= c;
      for (int64_t e = 0; e < d; ++e) out.o[((doc.row * l.q_len + doc.query) * hq + h) * d + e] *= c;
    }
  }
  return out;
}

// P stored with the document's key count as the head stride, [docs, Hq * keys]
// inside each 16 * Hq block, instead of [docs, Hq, 16]: head h lands on head 0's
// slots past the keys (or on an earlier head's).
Expected<SmallSeqResult> p_stride_is_keys(const AttentionProblem& problem, const AttentionInputs& in) {
  auto r = ref::small_seq(problem, in);
  if (!r) return r;
  SmallSeqResult out = r.value();
  const auto docs = small_seq_documents(problem, &in).value();
  const int64_t hq = problem.shape.heads_q;
  std::fill(out.p.begin(), out.p.end(), 0.0);
  for (size_t k = 0; k < docs.size(); ++k)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t j = 0; j < docs[k].keys; ++j)
        out.p[k * hq * kSmallSeqMaxKeys + h * docs[k].keys + j] = r->p[(k * hq + h) * kSmallSeqMaxKeys + j];
  return out;
}

// The key count checked only from above (keys > 16): a query whose document has
// no kv tokens is accepted and computed as padding (o = 0, no P row) instead of
// small_seq_key_count. Modelled on 2-D padding-kind batches, where that query can
// be turned into padding; elsewhere the reference's answer.
Expected<SmallSeqResult> zero_keys_accepted(const AttentionProblem& problem, const AttentionInputs& in) {
  auto r = ref::small_seq(problem, in);
  if (r || r.error().code != ErrorCode::small_seq_key_count || !allows_padding(problem.batch.mask) ||
      problem.batch.q.segment_ids.shape.size() != 2 || problem.batch.kv.segment_ids.shape.size() != 2)
    return r;
  AttentionProblem p = problem;
  IntArray& ids = p.batch.q.segment_ids;
  const int64_t rows = ids.shape[0], tq = ids.shape[1], tkv = problem.batch.kv.segment_ids.shape[1];
  const std::vector<int64_t>& kv = problem.batch.kv.segment_ids.data;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < tq; ++t) {
      const int64_t id = ids.data[b * tq + t];
      if (id > 0 && std::find(kv.begin() + b * tkv, kv.begin() + (b + 1) * tkv, id) == kv.begin() + (b + 1) * tkv)
        ids.data[b * tq + t] = 0;
    }
  return ref::small_seq(p, in);
}

PlantedBug bug(const char* name, const char* what, const char* property,
               Expected<SmallSeqResult> (*f)(const AttentionProblem&, const AttentionInputs&)) {
  return PlantedBug{name, property, what, [name, f] { return small_seq_backend(name, f); }};
}

}  // namespace

std::vector<PlantedBug> small_seq_bugs() {
  return {
      bug("small_seq_kv_head_is_query_head", "the kv head taken as the query head: K/V read at [t * Hkv + h] instead of [t * Hkv + h / (Hq / Hkv)]", "small_seq/matchesReference", kv_head_is_query_head),
      bug("small_seq_p_stride_is_keys", "P stored with the document's key count as the head stride instead of 16", "small_seq/matchesReference", p_stride_is_keys),
      bug("small_seq_window_ignored", "the window never reaches the small-seq kernel's mask", "small_seq/matchesGeneralAttention", window_ignored),
      bug("small_seq_softmax_over_padded_slots", "softmax taken over all 16 slots of the padded key tile: slots past the keys enter with score 0", "small_seq/probabilityRowsSumToOneAndZeroPastKeys", softmax_over_padded_slots),
      bug("small_seq_zero_keys_accepted", "the key count checked only from above (keys > 16): a document with 0 keys is accepted", "small_seq/rejectsInvalidInputsWithTheirCode", zero_keys_accepted),
  };
}

}  // namespace attn_oracle::planted
