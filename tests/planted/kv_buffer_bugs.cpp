// kv_buffer_bugs.cpp: planted shared K/V buffer bugs, each the float64 reference
// steps (reference_kv_buffer) with one mistake a real micro-sequence pipeline
// made. The stream of every planted backend runs its own (buggy) steps, so a
// bug reaches the streaming outputs the way it would in a training step.
#include <cmath>
#include <functional>
#include <memory>

#include "planted/planted_backends.hpp"

#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "attn_oracle/cases/reference_backend.hpp"

namespace attn_oracle::planted {
namespace {

using PlanFn = std::function<Expected<MicroSequenceMetadata>(const KvBufferProblem&, int64_t)>;
using WriteFn = std::function<std::optional<Error>(const KvBufferProblem&, int64_t, const std::vector<double>&,
                                                   std::vector<double>&)>;
using AttendFn = std::function<Expected<AttentionResult>(const KvBufferProblem&, int64_t, const AttentionInputs&,
                                                         const std::vector<double>&, std::vector<double>*)>;

// The reference steps, any of them replaced; the stream written over the steps.
class PlantedKvBuffer final : public KvBufferCapability {
 public:
  PlanFn plan;
  WriteFn write;
  AttendFn attend_fn;

  Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& p, int64_t i) override {
    return plan ? plan(p, i) : reference_kv_buffer().micro_sequence(p, i);
  }
  std::optional<Error> write_slice(const KvBufferProblem& p, int64_t i, const std::vector<double>& slice,
                                   std::vector<double>& buffer) override {
    return write ? write(p, i, slice, buffer) : reference_kv_buffer().write_slice(p, i, slice, buffer);
  }
  Expected<AttentionResult> attend(const KvBufferProblem& p, int64_t i, const AttentionInputs& micro,
                                   const std::vector<double>& buffer, std::vector<double>* grad) override {
    return attend_fn ? attend_fn(p, i, micro, buffer, grad) : reference_kv_buffer().attend(p, i, micro, buffer, grad);
  }
  Expected<AttentionResult> stream(const KvBufferProblem& p, const AttentionInputs& in) override {
    auto z = validate_kv_buffer(p, &in);
    if (!z) return z.error();
    const int64_t hq = z->heads_q, d = z->head_dim, n = z->tokens;
    AttentionResult out{std::vector<double>(n * hq * d, 0.0), std::vector<double>(hq * n, 0.0), std::nullopt};
    std::vector<double> buffer(z->buffer_elems(), 0.0), grad(z->buffer_elems(), 0.0);
    KvBufferProblem forward = p;
    forward.shape.backward = false;
    for (int64_t i = 0; i < z->micro_sequences; ++i) {
      const TokenRange r = micro_sequence_range(p, i);
      if (auto e = write_slice(forward, i, kv_slice_of(p, i, in), buffer)) return *e;
      auto step = attend(forward, i, AttentionInputs{token_rows(in.q, r.begin, r.end, hq, d), {}, {}, {}}, buffer, nullptr);
      if (!step) return step.error();
      std::copy(step->o.begin(), step->o.end(), out.o.begin() + r.begin * hq * d);
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t t = r.begin; t < r.end; ++t) out.lse[h * n + t] = step->lse[h * (r.end - r.begin) + t - r.begin];
    }
    if (!p.shape.backward) return out;
    AttentionGradients g{std::vector<double>(n * hq * d, 0.0), {}, {}};
    for (int64_t i = z->micro_sequences - 1; i >= 0; --i) {
      const TokenRange r = micro_sequence_range(p, i);
      const AttentionInputs micro{token_rows(in.q, r.begin, r.end, hq, d), {}, {}, token_rows(in.d_o, r.begin, r.end, hq, d)};
      auto step = attend(p, i, micro, buffer, &grad);
      if (!step) return step.error();
      std::copy(step->grads->dq.begin(), step->grads->dq.end(), g.dq.begin() + r.begin * hq * d);
    }
    g.dk = buffer_part(grad, 0, 0, n, z->heads_kv, d);
    g.dv = buffer_part(grad, 1, 0, n, z->heads_kv, d);
    out.grads = std::move(g);
    return out;
  }
};

class PlantedKvBackend final : public Backend {
 public:
  explicit PlantedKvBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  KvBufferCapability* kv_buffer() override { return &kv_; }
  PlantedKvBuffer kv_;

 private:
  std::string name_;
};

template <class Setup>
PlantedBug bug(const char* name, const char* what, const char* property, Setup setup) {
  return PlantedBug{name, property, what, [name, setup] {
                      auto b = std::make_unique<PlantedKvBackend>(name);
                      setup(b->kv_);
                      return std::unique_ptr<Backend>(std::move(b));
                    }};
}

// One packed row per side over explicit ids and positions (B = 1).
PackedSide row(const std::vector<int64_t>& ids, const std::vector<int64_t>& pos) {
  const int64_t n = static_cast<int64_t>(ids.size());
  return PackedSide{IntArray({1, n}, ids), IntArray({1, n}, pos)};
}

// Dense masked attention of micro-sequence i's queries against kv [kv_begin, end) of the buffer.
Expected<AttentionResult> attend_rows(const KvBufferProblem& p, int64_t kv_begin, PackedBatch batch,
                                      const AttentionInputs& micro, const std::vector<double>& buffer, int64_t end) {
  const int64_t hkv = p.shape.heads_kv, d = p.shape.head_dim;
  const AttentionInputs in{micro.q, buffer_part(buffer, 0, kv_begin, end, hkv, d),
                           buffer_part(buffer, 1, kv_begin, end, hkv, d), micro.d_o};
  return ref::attention_dense_masked(AttentionProblem{std::move(batch), p.shape}, in);
}

void add_rows(std::vector<double>& grad, int64_t first, const AttentionGradients& g, int64_t row_kv) {
  for (size_t e = 0; e < g.dk.size(); ++e) {
    const int64_t t = static_cast<int64_t>(e) / row_kv, c = static_cast<int64_t>(e) % row_kv;
    grad[((first + t) * 2) * row_kv + c] += g.dk[e];
    grad[((first + t) * 2 + 1) * row_kv + c] += g.dv[e];
  }
}

// cu_seqlens_k[0] = first_document_begin: the offset of the narrowed view into
// the buffer leaks into the view's own metadata (what a real stack emitted).
void cu_seqlens_k_from_first_document_begin(PlantedKvBuffer& kv) {
  kv.plan = [](const KvBufferProblem& p, int64_t i) {
    auto md = ref::micro_sequence_metadata(p, i);
    if (md) md.value().cu_seqlens_k[0] = md->first_document_begin;
    return md;
  };
}

// q_position counted from the micro-sequence's first query instead of from its
// document's start: only a document that began in an earlier micro-sequence
// changes, and a varlen kernel never reads positions, so attention does not show it.
void q_position_from_the_micro_sequence_start(PlantedKvBuffer& kv) {
  kv.plan = [](const KvBufferProblem& p, int64_t i) {
    auto md = ref::micro_sequence_metadata(p, i);
    if (md)
      for (size_t t = 0; t < md.value().q_position.size(); ++t)
        if (md->q_document[t] == md->q_document[0]) md.value().q_position[t] = static_cast<int64_t>(t);
    return md;
  };
}

// The backward runs over the unnarrowed buffer [0, end) with the inactive prefix
// merged into the first active document, and adds the prefix rows' dK/dV too.
void inactive_prefix_grads_accumulated(PlantedKvBuffer& kv) {
  kv.attend_fn = [](const KvBufferProblem& p, int64_t i, const AttentionInputs& micro, const std::vector<double>& buffer,
                    std::vector<double>* grad) -> Expected<AttentionResult> {
    KvBufferProblem forward = p;
    forward.shape.backward = false;
    AttentionInputs micro_forward = micro;
    micro_forward.d_o.clear();
    auto r = reference_kv_buffer().attend(forward, i, micro_forward, buffer, nullptr);  // the forward is right
    if (!r || !p.shape.backward || !grad) return r;
    const MicroSequenceMetadata md = ref::micro_sequence_metadata(p, i).value();
    std::vector<int64_t> q_pos, kv_ids(md.end, 1), kv_pos(md.end);
    for (int64_t t = md.begin; t < md.end; ++t) q_pos.push_back(t);
    for (int64_t t = 0; t < md.end; ++t) {
      kv_pos[t] = t;
      if (t >= md.first_document_begin) kv_ids[t] = md.kv_document[t - md.first_document_begin];
    }
    PackedBatch b;
    b.mask = MaskKind::causal;
    b.max_segments = md.documents();
    b.q = row(md.q_document, q_pos);
    b.kv = row(kv_ids, kv_pos);
    auto wide = attend_rows(p, 0, b, micro, buffer, md.end);
    if (!wide) return wide;
    add_rows(*grad, 0, *wide->grads, p.shape.heads_kv * p.shape.head_dim);
    r.value().grads = wide->grads;
    return r;
  };
}

// The slice goes to i * (its own length): right for full micro-sequences, but
// the shorter last one lands before its frontier.
void slice_written_at_wrong_frontier(PlantedKvBuffer& kv) {
  kv.write = [](const KvBufferProblem& p, int64_t i, const std::vector<double>& slice, std::vector<double>& buffer)
      -> std::optional<Error> {
    auto z = validate_kv_buffer(p);
    if (!z) return z.error();
    if (auto e = check_micro_sequence_index(z.value(), i)) return e;
    const int64_t row = 2 * z->heads_kv * z->head_dim, len = static_cast<int64_t>(slice.size()) / row;
    std::copy(slice.begin(), slice.end(), buffer.begin() + i * len * row);
    return std::nullopt;
  };
}

// Top-left causal on the micro-sequence's runs: a document that began in an
// earlier micro-sequence has more keys than queries, and its queries see only
// its first keys instead of everything up to themselves.
void top_left_for_straddling_document(PlantedKvBuffer& kv) {
  kv.attend_fn = [](const KvBufferProblem& p, int64_t i, const AttentionInputs& micro, const std::vector<double>& buffer,
                    std::vector<double>* grad) -> Expected<AttentionResult> {
    auto md = ref::micro_sequence_metadata(p, i);
    if (!md) return md.error();
    auto run_local = [](const std::vector<int64_t>& docs) {
      std::vector<int64_t> pos(docs.size());
      for (size_t t = 0; t < docs.size(); ++t) pos[t] = t > 0 && docs[t] == docs[t - 1] ? pos[t - 1] + 1 : 0;
      return pos;
    };
    PackedBatch b;
    b.mask = MaskKind::causal;
    b.max_segments = md->documents();
    b.q = row(md->q_document, run_local(md->q_document));
    b.kv = row(md->kv_document, run_local(md->kv_document));
    auto r = attend_rows(p, md->first_document_begin, b, micro, buffer, md->end);
    if (r && p.shape.backward && grad) add_rows(*grad, md->first_document_begin, *r->grads, p.shape.heads_kv * p.shape.head_dim);
    return r;
  };
}

// Earlier documents masked by a zero weight instead of being left out of the
// view: 0 * x is 0 for every finite x, so clean data never shows it.
void prefix_masked_by_zero_weight(PlantedKvBuffer& kv) {
  kv.attend_fn = [](const KvBufferProblem& p, int64_t i, const AttentionInputs& micro, const std::vector<double>& buffer,
                    std::vector<double>* grad) -> Expected<AttentionResult> {
    auto r = reference_kv_buffer().attend(p, i, micro, buffer, grad);
    if (!r) return r;
    const int64_t fdb = ref::micro_sequence_metadata(p, i)->first_document_begin;
    double masked = 0.0;
    for (int64_t e = 0; e < fdb * 2 * p.shape.heads_kv * p.shape.head_dim; ++e) masked += 0.0 * buffer[e];
    for (double& x : r.value().o) x += masked;
    return r;
  };
}

}  // namespace

std::vector<PlantedBug> kv_buffer_bugs() {
  return {
      bug("cu_seqlens_k_from_first_document_begin", "a micro-sequence's cu_seqlens_k starts at first_document_begin instead of 0 (a real pipeline's bug)", "kv_buffer/metadataDrivesAttentionLikeTheReference", cu_seqlens_k_from_first_document_begin),
      bug("q_position_from_the_micro_sequence_start", "q_position of a document that began in an earlier micro-sequence counted from the micro-sequence's start, not the document's", "kv_buffer/metadataIsCanonical", q_position_from_the_micro_sequence_start),
      bug("inactive_prefix_grads_accumulated", "a micro-sequence's backward adds dK/dV into the inactive prefix [0, first_document_begin)", "kv_buffer/inactivePrefixReceivesExactlyZero", inactive_prefix_grads_accumulated),
      bug("slice_written_at_wrong_frontier", "the slice goes to i x (its own length): right for full micro-sequences, but the shorter last one lands before its frontier", "kv_buffer/stepsMatchModel", slice_written_at_wrong_frontier),
      bug("top_left_for_straddling_document", "a document that began in an earlier micro-sequence aligned top-left instead of bottom-right", "kv_buffer/streamingMatchesWholeSequence", top_left_for_straddling_document),
      bug("prefix_masked_by_zero_weight", "documents before first_document_begin masked by a zero weight instead of being left out, so NaN there leaks", "kv_buffer/earlierDocumentsDoNotInfluence", prefix_masked_by_zero_weight),
  };
}

}  // namespace attn_oracle::planted
