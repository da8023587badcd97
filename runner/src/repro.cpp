// repro.cpp: the disagreeing call of a counterexample, and a failure as printed (repro.hpp).
#include "attn_oracle/runner/repro.hpp"

#include <set>
#include <sstream>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/runner/failure_store.hpp"
#include "attn_oracle/cases/kv_buffer_case.hpp"
#include "attn_oracle/cases/metadata_case.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/runner/replay.hpp"
#include "attn_oracle/cases/sharding_case.hpp"

namespace attn_oracle::inline runner {
namespace {

// The backend as a property sees it, with every metadata, attention and
// small-seq call kept as a case: each capability forwards to the real one.
class Recorder final : public Backend {
 public:
  explicit Recorder(Backend& inner) : inner_(inner), metadata_(*this), attention_(*this), small_seq_(*this) {}
  std::string name() const override { return inner_.name(); }
  std::string version() const override { return inner_.version(); }
  ProducedOutputs outputs() const override { return inner_.outputs(); }
  BackendIdentity identity() const override { return inner_.identity(); }
  InputDomain domain() const override { return inner_.domain(); }
  MetadataCapability* metadata() override { return inner_.metadata() ? &metadata_ : nullptr; }
  AttentionCapability* attention() override { return inner_.attention() ? &attention_ : nullptr; }
  SmallSeqCapability* small_seq() override { return inner_.small_seq() ? &small_seq_ : nullptr; }
  ShardingCapability* sharding() override { return inner_.sharding(); }
  KvBufferCapability* kv_buffer() override { return inner_.kv_buffer(); }
  std::vector<Case> calls;

 private:
  void keep(CasePayload payload) { calls.push_back(Case{std::move(payload), "", std::nullopt, std::nullopt}); }
  static AttentionCase attention_case(const AttentionProblem& p, const AttentionInputs& in) {
    return AttentionCase{p, std::nullopt, in};
  }

  struct Metadata_ final : MetadataCapability {
    explicit Metadata_(Recorder& r) : r(r) {}
    std::optional<std::string> unsupported(const PackedBatch& b) override { return r.inner_.metadata()->unsupported(b); }
    Expected<Metadata> metadata(const PackedBatch& b) override {
      r.keep(MetadataCase{b});
      return r.inner_.metadata()->metadata(b);
    }
    Recorder& r;
  };
  struct Attention_ final : AttentionCapability {
    explicit Attention_(Recorder& r) : r(r) {}
    AttentionCapability& in() { return *r.inner_.attention(); }
    std::optional<std::string> unsupported(const AttentionProblem& p) override { return in().unsupported(p); }
    Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& x) override {
      r.keep(attention_case(p, x));
      return in().attention(p, x);
    }
    bool token_level_mask() const override { return r.inner_.attention()->token_level_mask(); }
    bool supports_attention_into() const override { return r.inner_.attention()->supports_attention_into(); }
    std::optional<Error> attention_into(const AttentionProblem& p, const AttentionInputs& x, const Buffers& b) override {
      r.keep(attention_case(p, x));
      return in().attention_into(p, x, b);
    }
    Recorder& r;
  };
  struct SmallSeq_ final : SmallSeqCapability {
    explicit SmallSeq_(Recorder& r) : r(r) {}
    std::optional<std::string> unsupported(const AttentionProblem& p) override {
      return r.inner_.small_seq()->unsupported(p);
    }
    Expected<SmallSeqResult> small_seq(const AttentionProblem& p, const AttentionInputs& x) override {
      r.keep(SmallSeqCase{attention_case(p, x)});
      return r.inner_.small_seq()->small_seq(p, x);
    }
    Recorder& r;
  };

  Backend& inner_;
  Metadata_ metadata_;
  Attention_ attention_;
  SmallSeq_ small_seq_;
};

// A K/V-buffer problem judged on its metadata alone, micro-sequence by
// micro-sequence (a backend may serve no step after it).
Judgement judge_micro_sequences(Backend& backend, const KvBufferProblem& p) {
  Judgement j;
  KvBufferCapability* cap = backend.kv_buffer();
  if (!cap) return j.skip("backend " + backend.name() + " lacks the kv_buffer capability"), j;
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  const int64_t count = p.micro_seq_tokens > 0 ? (n + p.micro_seq_tokens - 1) / p.micro_seq_tokens : 0;
  for (int64_t i = 0; i < count; ++i) {
    const Expected<MicroSequenceMetadata> want = reference_kv_buffer().micro_sequence(p, i);
    const Expected<MicroSequenceMetadata> got = cap->micro_sequence(p, i);
    if (!want) return j;
    if (!got) return j.fail("micro_sequences[" + std::to_string(i) + "]: backend error " +
                            std::string(to_string(got.error().code)) + " (" + got.error().message + ")"), j;
    const nlohmann::json g = micro_sequence_to_json(got.value()), w = micro_sequence_to_json(want.value());
    for (auto it = w.begin(); it != w.end(); ++it)
      if (g.value(it.key(), nlohmann::json()) != it.value())
        j.fail("micro_sequences[" + std::to_string(i) + "]." + it.key() + ": backend " +
               g.value(it.key(), nlohmann::json()).dump() + ", reference " + it.value().dump());
  }
  return j;
}

// An exception or a failed worker is the backend's answer too: the call disagrees.
Judgement judge_directly(Backend& backend, const Case& c) {
  Judgement j;
  try {
    if (const auto* kv = c.as<KvBufferCase>()) return judge_micro_sequences(backend, kv->problem);
    return judge_case(backend, c);
  } catch (const BackendFailure& e) {
    j.fail(e.what());
  } catch (const std::exception& e) {
    j.fail(std::string("exception: ") + e.what());
  }
  return j;
}

// The same problem, whether the tensors are written out or generated from a seed.
bool same_call(const Case& a, const Case& b) {
  const AttentionCase *x = attention_fields(a.payload), *y = attention_fields(b.payload);
  if (x && y) return a.payload.index() == b.payload.index() && x->problem == y->problem;
  return a.payload == b.payload;
}

Case bare(Case c) {
  c.property.reset();
  c.expected.reset();
  c.note.clear();
  return c;
}

}  // namespace

std::variant<Disagreement, NoDisagreement> find_disagreement(Backend& backend, const Case& c) {
  const std::string property = c.property ? c.property->id : "";
  // A K/V-buffer case is its own call (the properties run the problem as drawn).
  if (!c.property || c.as<KvBufferCase>() || c.as<ShardingCase>() || c.as<ContextParallelCase>()) {
    const Judgement j = judge_directly(backend, c);
    if (j.status == Judgement::Status::fail) return Disagreement{bare(c), j.lines, false};
    if (j.status == Judgement::Status::skip) return NoDisagreement{true, j.lines.empty() ? "" : j.lines.front()};
    return NoDisagreement{false, "the backend agrees with the reference on this case (" + std::string(to_string(j.status)) +
                                     (j.lines.empty() ? "" : ": " + j.lines.front()) + ")"};
  }
  const PropertyDef* p = find_property(property);
  if (!p) return NoDisagreement{false, "unknown property " + property + " in the case's record"};
  Recorder recorder(backend);
  const Judgement verdict = check_property(*p, recorder, c);
  std::set<std::string> tried;
  for (const Case& call : recorder.calls) {
    if (!tried.insert(case_hash(call)).second) continue;
    const Judgement j = judge_directly(backend, call);
    if (j.status == Judgement::Status::fail) return Disagreement{call, j.lines, !same_call(c, call)};
  }
  if (verdict.status == Judgement::Status::skip)
    return NoDisagreement{true, verdict.lines.empty() ? "" : verdict.lines.front()};
  return NoDisagreement{false,
               "no call of " + property + " disagrees with the reference on its own (" + std::to_string(tried.size()) +
                   " calls tried; the property says: " + (verdict.lines.empty() ? "nothing" : verdict.lines.front()) +
                   "): replay the case instead"};
}

std::vector<std::string> failure_lines(const PropertyFailure& f) {
  std::vector<std::string> out = {f.message, "counterexample (" + counterexample_origin(f) + "): " + f.case_path};
  for (const std::string& line : case_summary_lines(f.case_path)) out.push_back("  " + line);
  out.push_back("replay: " + f.replay_command);
  if (!f.repro_command.empty()) out.push_back("repro: " + f.repro_command + "   (a standalone reproduction)");
  out.push_back("rerun: " + f.rerun_command);
  return out;
}

}  // namespace attn_oracle::runner
