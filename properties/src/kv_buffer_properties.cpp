// kv_buffer_properties.cpp: the properties of docs/semantics.md#3-metadata, written once
// against the K/V buffer capability. Floats are judged by the tolerance rule of
// docs/semantics.md#6-tolerance against the whole-sequence float64 oracle; metadata and the
// inactive prefix exactly (bitwise for the prefix). Each property has a planted
// bug in tests/planted/kv_buffer_bugs.cpp that it must catch
// (tests/kv_buffer_planted_test.cpp).
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/kv_buffer_generators.hpp"
#include "attn_oracle/properties/metadata_through_attention.hpp"
#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"

namespace attn_oracle::inline properties {
namespace {

std::string str(int64_t x) { return std::to_string(x); }

std::string vec(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + "]";
}

KvBufferCapability& capability(Backend& backend) { return *backend.kv_buffer(); }

// The draw's inputs; declines problems the backend does not support.
AttentionInputs inputs_of(Backend& backend, const KvBufferDraw& d) {
  require_kv_buffer_takes(backend, d.problem);
  return generate_kv_buffer_inputs(d.problem, d.seed);
}

KvBufferSizes sizes_of(const KvBufferDraw& d) {
  auto z = validate_kv_buffer(d.problem);
  if (!z) decline_case("not a valid problem: " + std::string(to_string(z.error().code)) + ": " + z.error().message);
  return z.value();
}

// The buffer with every slice written (by the reference: only its contents matter here).
std::vector<double> full_buffer(const KvBufferDraw& d, const AttentionInputs& in) {
  std::vector<double> buffer(sizes_of(d).buffer_elems(), 0.0);
  for (int64_t i = 0; i < sizes_of(d).micro_sequences; ++i)
    ref::kv_buffer_write_slice(d.problem, i, kv_slice_of(d.problem, i, in), buffer);
  return buffer;
}

AttentionInputs micro_inputs(const KvBufferDraw& d, const AttentionInputs& in, int64_t i) {
  const TokenRange r = micro_sequence_range(d.problem, i);
  const int64_t hq = d.problem.shape.heads_q, dim = d.problem.shape.head_dim;
  return AttentionInputs{token_rows(in.q, r.begin, r.end, hq, dim), {}, {},
                         d.problem.shape.backward ? token_rows(in.d_o, r.begin, r.end, hq, dim) : std::vector<double>{}};
}

AttentionResult attend_or_fail(Backend& backend, const KvBufferDraw& d, int64_t i, const AttentionInputs& micro,
                               const std::vector<double>& buffer, std::vector<double>* grad) {
  auto r = capability(backend).attend(d.problem, i, micro, buffer, grad);
  if (!r) decline_if_unsupported(r.error()), fail_case("micro-sequence " + str(i) + " rejected: " + std::string(to_string(r.error().code)) + ": " + r.error().message);
  return std::move(r).value();
}

bool bits_equal(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

// "grad_buffer row 3 (K, head 0, dim 5)" for flat index e of [N, 2, Hkv, D].
std::string buffer_element(const KvBufferProblem& p, int64_t e) {
  const int64_t d = p.shape.head_dim, h = p.shape.heads_kv;
  return "row " + str(e / (2 * h * d)) + " (" + ((e / (h * d)) % 2 ? "V" : "K") + ", head " + str((e / d) % h) +
         ", dim " + str(e % d) + ")";
}

// ---------------------------------------------------------------- the checks

void streaming_matches_whole_sequence(Backend& backend, const KvBufferDraw& d, CheckRecord& record) {
  const AttentionInputs in = inputs_of(backend, d);
  auto got = capability(backend).stream(d.problem, in);
  if (!got) decline_if_unsupported(got.error()), fail_case("stream rejected a valid problem: " + std::string(to_string(got.error().code)) + ": " + got.error().message);
  const AttentionResult want = ref::kv_buffer_whole_sequence(d.problem, in).value();
  const std::vector<ToleranceCheck> checks =
      check_attention_tolerance(whole_sequence_problem(d.problem), in, got.value(), want);
  record.note(checks);
  for (const ToleranceCheck& c : checks)
    if (!c.pass) fail_case(c.describe());
}

// A varlen kernel reads micro-sequence i's keys at first_document_begin +
// cu_seqlens_k: the backend's metadata must drive it bit for bit as the
// reference's does, over a buffer that is NaN outside [first_document_begin, end).
void metadata_drives_attention_like_the_reference(Backend& backend, const KvBufferDraw& d, CheckRecord&) {
  require_kv_buffer_takes(backend, d.problem);
  const KvBufferSizes z = sizes_of(d);
  for (int64_t i = 0; i < z.micro_sequences; ++i) {
    auto got = capability(backend).micro_sequence(d.problem, i);
    if (!got) fail_case("micro-sequence " + str(i) + " rejected: " + got.error().message);
    const MicroSequenceMetadata want = ref::micro_sequence_metadata(d.problem, i).value();
    if (auto diff = micro_sequence_attention_difference(z.tokens, got.value(), want))
      fail_case("micro-sequence " + str(i) + " (first_document_begin " + str(want.first_document_begin) + "): " + *diff);
  }
}

void metadata_is_canonical(Backend& backend, const KvBufferDraw& d, CheckRecord&) {
  require_kv_buffer_takes(backend, d.problem);
  for (int64_t i = 0; i < sizes_of(d).micro_sequences; ++i) {
    auto got = capability(backend).micro_sequence(d.problem, i);
    if (!got) fail_case("micro-sequence " + str(i) + " rejected: " + got.error().message);
    const MicroSequenceMetadata want = ref::micro_sequence_metadata(d.problem, i).value();
    const MicroSequenceMetadata& g = got.value();
    const std::string at = "micro-sequence " + str(i) + " (first_document_begin " + str(want.first_document_begin) + "): ";
    if (g.cu_seqlens_k.empty() || g.cu_seqlens_k.front() != 0)
      fail_case(at + "cu_seqlens_k = " + vec(g.cu_seqlens_k) + ", must start at 0");
    if (g.cu_seqlens_k.back() != want.end - want.first_document_begin)
      fail_case(at + "cu_seqlens_k = " + vec(g.cu_seqlens_k) + ", must end at the narrowed length " +
              str(want.end - want.first_document_begin));
    const auto field = [&](const char* name, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
      if (a != b) fail_case(at + name + " = " + vec(a) + ", reference " + vec(b));
    };
    if (g.begin != want.begin || g.end != want.end || g.first_document_begin != want.first_document_begin)
      fail_case(at + "range [" + str(g.begin) + ", " + str(g.end) + ") from " + str(g.first_document_begin) +
              ", reference [" + str(want.begin) + ", " + str(want.end) + ") from " + str(want.first_document_begin));
    field("cu_seqlens_q", g.cu_seqlens_q, want.cu_seqlens_q);
    field("cu_seqlens_k", g.cu_seqlens_k, want.cu_seqlens_k);
    field("q_document", g.q_document, want.q_document);
    field("q_position", g.q_position, want.q_position);
    field("kv_document", g.kv_document, want.kv_document);
    field("kv_position", g.kv_position, want.kv_position);
  }
}

// Every micro-sequence's backward, each into its own zero gradient buffer:
// rows [0, fdb) must still be +0.0, bit for bit.
void inactive_prefix_receives_exactly_zero(Backend& backend, const KvBufferDraw& d, CheckRecord& record) {
  const AttentionInputs in = inputs_of(backend, d);
  const std::vector<double> buffer = full_buffer(d, in);
  const int64_t row = 2 * d.problem.shape.heads_kv * d.problem.shape.head_dim;
  bool any_prefix = false;
  for (int64_t i = 0; i < sizes_of(d).micro_sequences; ++i) {
    const int64_t fdb = ref::micro_sequence_metadata(d.problem, i)->first_document_begin;
    any_prefix = any_prefix || fdb > 0;
    std::vector<double> grad(buffer.size(), 0.0);
    attend_or_fail(backend, d, i, micro_inputs(d, in, i), buffer, &grad);
    for (int64_t e = 0; e < fdb * row; ++e)
      if (!bits_equal(grad[e], 0.0))
        fail_case("micro-sequence " + str(i) + " (first_document_begin " + str(fdb) + ") put " + std::to_string(grad[e]) +
                " into grad_buffer " + buffer_element(d.problem, e) + " of the inactive prefix; must be exactly 0");
  }
  record.classify(any_prefix, "some micro-sequence has an inactive prefix");
}

// Without an attend step the backend's metadata drives the suite's float64
// varlen kernel (metadata_through_attention.hpp) over the clean and the
// poisoned buffer: a wrong first_document_begin or cu_seqlens_k lets the
// earlier documents in, or reads past the buffer.
void earlier_documents_do_not_influence_through_the_kernel(Backend& backend, const KvBufferDraw& d,
                                                           CheckRecord& record) {
  require_kv_buffer_takes(backend, d.problem);
  const KvBufferSizes z = sizes_of(d);
  bool any_prefix = false;
  for (int64_t i = 0; i < z.micro_sequences; ++i) {
    const MicroSequenceMetadata want = ref::micro_sequence_metadata(d.problem, i).value();
    if (want.first_document_begin == 0) continue;
    any_prefix = true;
    auto got = capability(backend).micro_sequence(d.problem, i);
    if (!got) fail_case("micro-sequence " + str(i) + " rejected: " + got.error().message);
    if (auto diff = micro_sequence_prefix_influence(z.tokens, got.value(), want))
      fail_case("micro-sequence " + str(i) + " (first_document_begin " + str(want.first_document_begin) +
                ", attended by the suite's float64 varlen kernel: the backend serves no attend step), with documents "
                "before " + str(want.first_document_begin) + " poisoned by NaN: " + *diff);
  }
  record.classify(any_prefix, "some micro-sequence has an inactive prefix");
}

// Documents entirely before fdb are NaN in a second copy of the buffer: every
// output of the micro-sequence and every gradient row must be bit-identical.
void earlier_documents_do_not_influence(Backend& backend, const KvBufferDraw& d, CheckRecord& record) {
  if (!capability(backend).steps().attend)
    return earlier_documents_do_not_influence_through_the_kernel(backend, d, record);
  const AttentionInputs in = inputs_of(backend, d);
  const std::vector<double> clean = full_buffer(d, in);
  const int64_t row = 2 * d.problem.shape.heads_kv * d.problem.shape.head_dim;
  for (int64_t i = 0; i < sizes_of(d).micro_sequences; ++i) {
    const int64_t fdb = ref::micro_sequence_metadata(d.problem, i)->first_document_begin;
    if (fdb == 0) continue;
    std::vector<double> poisoned = clean;
    for (int64_t e = 0; e < fdb * row; ++e) poisoned[e] = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> grad_clean(clean.size(), 0.0), grad_poisoned(clean.size(), 0.0);
    const AttentionInputs micro = micro_inputs(d, in, i);
    const AttentionResult a = attend_or_fail(backend, d, i, micro, clean, &grad_clean);
    const AttentionResult b = attend_or_fail(backend, d, i, micro, poisoned, &grad_poisoned);
    const auto same = [&](const char* name, const std::vector<double>& x, const std::vector<double>& y) {
      if (x.size() != y.size()) fail_case(std::string(name) + ": sizes differ with the poisoned prefix");
      for (size_t e = 0; e < x.size(); ++e)
        if (!bits_equal(x[e], y[e]))
          fail_case("micro-sequence " + str(i) + " (first_document_begin " + str(fdb) + "): " + name + "[" + str(e) +
                  "] is " + std::to_string(y[e]) + " with documents before " + str(fdb) + " poisoned by NaN, " +
                  std::to_string(x[e]) + " without");
    };
    same("o", a.o, b.o);
    same("lse", a.lse, b.lse);
    if (a.grads && b.grads) same("dq", a.grads->dq, b.grads->dq);
    same("grad_buffer", grad_clean, grad_poisoned);
  }
}

using Check = void (*)(Backend&, const KvBufferDraw&, CheckRecord&);

// The case's problem and seed, validated.
KvBufferDraw draw_of(const Case& c) {
  const KvBufferCase& k = payload_of<KvBufferCase>(c);
  const KvBufferDraw d{k.problem, k.data_seed};
  sizes_of(d);
  return d;
}

Case kv_case(const KvBufferDraw& d) { return Case{KvBufferCase{d.problem, d.seed}, {}, {}, {}}; }

// The drawn problems are fp32, fp16 or bf16 with head dims 8 and 16 (kv_buffer_generators.hpp).
std::optional<std::string> needs_drawn_shapes(const InputDomain& d) {
  if (!d.takes_dtype(Dtype::fp32) && !d.takes_dtype(Dtype::fp16) && !d.takes_dtype(Dtype::bf16))
    return "it draws fp32, fp16 and bf16 problems";
  if (!d.takes_head_dim(8) && !d.takes_head_dim(16)) return "it draws head dims 8 and 16";
  return std::nullopt;
}

// Streaming is judged on lse and the gradient buffer as much as on o: the
// properties that run it need both.
const std::vector<Output> kStreamedOutputs = {Output::lse, Output::gradients};

PropertyDef kv_property(const char* id, const char* summary, Check check, std::vector<KvBufferStep> steps,
                        std::vector<Output> needs = kStreamedOutputs) {
  return PropertyDef{id, Capability::kv_buffer, summary, [](const DrawContext& context) { return kv_case(*kv_buffer_draw(context.declared)); },
                     [check](Backend& backend, const Case& c, CheckRecord& record) { check(backend, draw_of(c), record); },
                     std::nullopt,
                     std::move(needs), needs_drawn_shapes, std::move(steps)};
}

// The state machine: its command sequence is drawn with the problem and recorded.
Case draw_steps(const DrawContext& context) {
  const KvBufferDraw d = *kv_buffer_draw(context.declared);
  return with_drawn(kv_case(d), {{"commands", draw_kv_buffer_steps(d)}});
}

void steps_match_model(Backend& backend, const Case& c, CheckRecord& record) {
  const nlohmann::json* steps = c.property && c.property->drawn.contains("commands") ? &c.property->drawn["commands"] : nullptr;
  check_kv_buffer_steps(backend, draw_of(c), steps, record);
}

}  // namespace

std::vector<PropertyDef> kv_buffer_properties() {
  return {
      kv_property("kv_buffer/streamingMatchesWholeSequence",
                  "streaming o, lse, dq and the final dK/dV buffer equal whole-sequence per-document causal attention "
                  "within tolerance",
                  streaming_matches_whole_sequence, {KvBufferStep::stream}),
      kv_property("kv_buffer/metadataIsCanonical",
                  "every micro-sequence's cu_seqlens start at 0 and end at the narrowed lengths; documents and "
                  "positions equal the reference",
                  metadata_is_canonical, {}, {}),
      kv_property("kv_buffer/metadataDrivesAttentionLikeTheReference",
                  "each micro-sequence's cu_seqlens and first_document_begin drive a float64 varlen kernel over a "
                  "NaN-poisoned buffer exactly as the reference's do",
                  metadata_drives_attention_like_the_reference, {}, {}),
      kv_property("kv_buffer/inactivePrefixReceivesExactlyZero",
                  "a micro-sequence's backward leaves grad_buffer[0, first_document_begin) bitwise 0",
                  inactive_prefix_receives_exactly_zero, {KvBufferStep::attend}),
      kv_property("kv_buffer/earlierDocumentsDoNotInfluence",
                  "NaN in the documents before first_document_begin changes no output or gradient bit of the "
                  "micro-sequence (without an attend step: of the float64 varlen kernel its metadata drives)",
                  earlier_documents_do_not_influence, {}),
      PropertyDef{"kv_buffer/stepsMatchModel", Capability::kv_buffer,
                  "state machine: slices written in any order, attended in order, backward in reverse, match a model "
                  "buffer and the oracle",
                  draw_steps, steps_match_model, std::nullopt, kStreamedOutputs, needs_drawn_shapes,
                  {KvBufferStep::write_slice, KvBufferStep::attend}},
  };
}

}  // namespace attn_oracle::properties
