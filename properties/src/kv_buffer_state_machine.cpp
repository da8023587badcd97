// kv_buffer_state_machine.cpp: the shared K/V buffer as a RapidCheck state
// machine (docs/semantics.md#3-metadata). The model is what a training step knows: which
// slices are written (and so the exact buffer contents), how many micro-sequences
// have run forward, and how far the backward has come. Commands:
//  - WriteSlice(i): any micro-sequence, in any order, rewrites allowed; the
//    backend's buffer must equal the model's bit for bit afterwards;
//  - WriteOutside: a micro-sequence index past the end must give
//    kv_buffer_slice_out_of_bounds and leave the buffer untouched;
//  - Attend: the next micro-sequence in order, once its slices up to it are
//    written (a no-op before); o and lse of its tokens against the oracle rows;
//  - Backward: after every forward (a no-op before), the next micro-sequence in reverse; dq of its
//    tokens against the oracle, grad_buffer[0, fdb) unchanged bit for bit, and
//    after the last one the whole gradient buffer against the oracle's dK, dV.
// Floats use the tolerance rule of docs/semantics.md#6-tolerance with the whole-sequence
// naive budget, restricted to the rows compared.
//
// The property's draw records the command sequence ("WriteSlice(2)", "Attend",
// ...) with the case, so that a counterexample replays the same steps; a case
// without one (a fixture) runs the canonical schedule: every slice written, one
// write past the end, forward in order, backward in reverse.
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <memory>
#include <string>

#include <rapidcheck/state.h>

#include "attn_oracle/properties/backend_calls.hpp"
#include "attn_oracle/properties/kv_buffer_generators.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"

namespace attn_oracle::inline properties {
namespace {

struct KvModel {
  std::shared_ptr<const KvBufferProblem> problem;  // what the steps are fed
  std::shared_ptr<const AttentionInputs> inputs;
  int64_t micro_sequences = 0;
  std::vector<bool> written;
  int64_t attended = 0;      // micro-sequences [0, attended) have run forward
  int64_t backward_next = -1;  // next micro-sequence of the backward; -1: none yet
  std::vector<double> buffer;  // [N, 2, Hkv, D], the slices written so far
};

// The system under test with everything the checks need.
struct KvSut {
  Backend* backend = nullptr;
  KvBufferDraw draw;
  AttentionInputs inputs;
  AttentionResult oracle, naive;
  std::vector<double> buffer, grad;
  CheckRecord* record = nullptr;  // the check's: the tolerance checks are noted there
  KvBufferCapability& cap() const { return *backend->kv_buffer(); }
  const KvBufferProblem& problem() const { return draw.problem; }
};

using Command = rc::state::Command<KvModel, KvSut>;

std::string str(int64_t x) { return std::to_string(x); }

// Rows [begin, end) of a [tokens, heads, D] tensor, or of lse [heads, tokens].
std::vector<double> lse_rows(const std::vector<double>& lse, int64_t heads, int64_t tokens, int64_t begin, int64_t end) {
  std::vector<double> out;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = begin; t < end; ++t) out.push_back(lse[h * tokens + t]);
  return out;
}

void within_tolerance(CheckRecord& record, const std::string& what, const std::vector<double>& got,
                      const std::vector<double>& want, const std::vector<double>& naive, double k, Dtype dtype) {
  const ToleranceCheck c = check_tolerance(what, got, want, naive, k, dtype);
  record.note(c);
  if (!c.pass) fail_case(c.describe());
}

struct WriteSlice : Command {
  int64_t i;
  // Slice floor(k * q / 1000) for a q uniform in [0, 1000) whatever RapidCheck's
  // size (the last slice, the short one when m does not divide N, must come up
  // in the short command sequences of the first cases too). When the problem
  // shrinks the commands are drawn again from the same q: a command on the last
  // slice stays on the last slice for every smaller k, so the failure survives.
  explicit WriteSlice(const KvModel& m)
      : i(m.micro_sequences * *rc::gen::resize(100, rc::gen::inRange<int64_t>(0, 1000)) / 1000) {}
  explicit WriteSlice(int64_t index) : i(index) {}
  void apply(KvModel& m) const override {
    m.written[i] = true;
    ref::kv_buffer_write_slice(*m.problem, i, kv_slice_of(*m.problem, i, *m.inputs), m.buffer);
  }
  void run(const KvModel& m, KvSut& s) const override {
    const std::vector<double> slice = kv_slice_of(s.problem(), i, s.inputs);
    if (auto e = s.cap().write_slice(s.problem(), i, slice, s.buffer))
      decline_if_unsupported(*e), fail_case("write_slice(" + str(i) + ") rejected: " + e->message);
    std::vector<double> want = m.buffer;
    ref::kv_buffer_write_slice(s.problem(), i, slice, want);
    for (size_t e = 0; e < want.size(); ++e)
      if (std::bit_cast<uint64_t>(want[e]) != std::bit_cast<uint64_t>(s.buffer[e]))
        fail_case("after write_slice(" + str(i) + ") buffer element " + str(static_cast<int64_t>(e)) + " is " +
                std::to_string(s.buffer[e]) + ", the model holds " + std::to_string(want[e]));
  }
  void show(std::ostream& os) const override { os << "WriteSlice(" << i << ")"; }
};

struct WriteOutside : Command {
  void run(const KvModel& m, KvSut& s) const override {
    const std::vector<double> before = s.buffer;
    const std::vector<double> slice = kv_slice_of(s.problem(), m.micro_sequences - 1, s.inputs);
    auto e = s.cap().write_slice(s.problem(), m.micro_sequences, slice, s.buffer);
    if (e) decline_if_unsupported(*e);  // a backend that declines write_slice declines this one too
    if (!e || e->code != ErrorCode::kv_buffer_slice_out_of_bounds)
      fail_case("write_slice(" + str(m.micro_sequences) + ") past the last micro-sequence gave " +
              (e ? std::string(to_string(e->code)) : std::string("no error")) + ", expected kv_buffer_slice_out_of_bounds");
    if (before != s.buffer) fail_case("a rejected write_slice changed the buffer");
  }
  void show(std::ostream& os) const override { os << "WriteOutside"; }
};

// Attend and Backward do nothing until their turn instead of refusing by
// precondition: a refused command is drawn again as another kind, so a problem
// shrunk to fewer micro-sequences would get another command sequence and lose
// the failure; a skipped one leaves the rest of the sequence as it was.
bool attend_ready(const KvModel& m) {
  if (m.attended >= m.micro_sequences) return false;
  for (int64_t j = 0; j <= m.attended; ++j)
    if (!m.written[j]) return false;
  return true;
}

struct Attend : Command {
  void apply(KvModel& m) const override {
    if (!attend_ready(m)) return;
    if (++m.attended == m.micro_sequences) m.backward_next = m.micro_sequences - 1;
  }
  void run(const KvModel& m, KvSut& s) const override {
    if (!attend_ready(m)) return;
    const int64_t i = m.attended;
    const TokenRange r = micro_sequence_range(s.problem(), i);
    const AttentionShape& sh = s.problem().shape;
    KvBufferProblem forward = s.problem();
    forward.shape.backward = false;
    const AttentionInputs micro{token_rows(s.inputs.q, r.begin, r.end, sh.heads_q, sh.head_dim), {}, {}, {}};
    auto got = s.cap().attend(forward, i, micro, s.buffer, nullptr);
    if (!got) decline_if_unsupported(got.error()), fail_case("attend(" + str(i) + ") rejected: " + got.error().message);
    const int64_t n = static_cast<int64_t>(s.inputs.q.size()) / (sh.heads_q * sh.head_dim);
    auto rows = [&](const std::vector<double>& t) { return token_rows(t, r.begin, r.end, sh.heads_q, sh.head_dim); };
    within_tolerance(*s.record, "o of micro-sequence " + str(i), got->o, rows(s.oracle.o), rows(s.naive.o), kOutputToleranceFactor,
                     sh.dtype);
    within_tolerance(*s.record, "lse of micro-sequence " + str(i), got->lse, lse_rows(s.oracle.lse, sh.heads_q, n, r.begin, r.end),
                     lse_rows(s.naive.lse, sh.heads_q, n, r.begin, r.end), kOutputToleranceFactor, Dtype::fp32);
  }
  void show(std::ostream& os) const override { os << "Attend"; }
};

struct Backward : Command {
  void apply(KvModel& m) const override {
    if (m.backward_next >= 0) --m.backward_next;
  }
  void run(const KvModel& m, KvSut& s) const override {
    if (m.backward_next < 0) return;  // not its turn (see attend_ready)
    const int64_t i = m.backward_next;
    const TokenRange r = micro_sequence_range(s.problem(), i);
    const AttentionShape& sh = s.problem().shape;
    const int64_t fdb = ref::micro_sequence_metadata(s.problem(), i)->first_document_begin;
    const int64_t row = 2 * sh.heads_kv * sh.head_dim;
    auto rows = [&](const std::vector<double>& t) { return token_rows(t, r.begin, r.end, sh.heads_q, sh.head_dim); };
    const AttentionInputs micro{rows(s.inputs.q), {}, {}, rows(s.inputs.d_o)};
    const std::vector<double> prefix(s.grad.begin(), s.grad.begin() + fdb * row);
    auto got = s.cap().attend(s.problem(), i, micro, s.buffer, &s.grad);
    if (!got) decline_if_unsupported(got.error());
    if (!got || !got->grads) fail_case("backward of micro-sequence " + str(i) + " failed" + (got ? "" : ": " + got.error().message));
    within_tolerance(*s.record, "dq of micro-sequence " + str(i), got->grads->dq, rows(s.oracle.grads->dq), rows(s.naive.grads->dq),
                     kGradientToleranceFactor, sh.dtype);
    for (int64_t e = 0; e < fdb * row; ++e)
      if (std::bit_cast<uint64_t>(prefix[e]) != std::bit_cast<uint64_t>(s.grad[e]))
        fail_case("backward of micro-sequence " + str(i) + " changed grad_buffer element " + str(e) +
                " before first_document_begin " + str(fdb));
    if (i != 0) return;
    const int64_t n = static_cast<int64_t>(s.grad.size()) / row;
    std::vector<double> grad = s.grad;
    for (double& x : grad) x = round_to_dtype(x, sh.dtype);
    for (int part = 0; part < 2; ++part)
      within_tolerance(*s.record, part ? "final dv" : "final dk", buffer_part(grad, part, 0, n, sh.heads_kv, sh.head_dim),
                       part ? s.oracle.grads->dv : s.oracle.grads->dk, part ? s.naive.grads->dv : s.naive.grads->dk,
                       kGradientToleranceFactor, sh.dtype);
  }
  void show(std::ostream& os) const override { os << "Backward"; }
};

std::unique_ptr<KvSut> make_sut(Backend& backend, const KvBufferDraw& d) {
  require_kv_buffer_takes(backend, d.problem);
  auto s = std::make_unique<KvSut>();
  s->backend = &backend;
  s->draw = d;
  s->inputs = generate_kv_buffer_inputs(d.problem, d.seed);
  s->oracle = ref::kv_buffer_whole_sequence(d.problem, s->inputs).value();
  s->naive = naive_same_precision(whole_sequence_problem(d.problem), s->inputs);
  const KvBufferSizes z = validate_kv_buffer(d.problem).value();
  s->buffer.assign(z.buffer_elems(), 0.0);
  s->grad.assign(z.buffer_elems(), 0.0);
  return s;
}

KvModel initial_model(const KvBufferDraw& d, const AttentionInputs& inputs) {
  const KvBufferSizes z = validate_kv_buffer(d.problem).value();
  KvModel m;
  m.problem = std::make_shared<const KvBufferProblem>(d.problem);
  m.inputs = std::make_shared<const AttentionInputs>(inputs);
  m.micro_sequences = z.micro_sequences;
  m.written.assign(z.micro_sequences, false);
  m.buffer.assign(z.buffer_elems(), 0.0);
  return m;
}

std::string shown(const Command& c) {
  std::ostringstream os;
  c.show(os);
  return os.str();
}

// A recorded step back into a command; fails naming a step it cannot read.
std::shared_ptr<const Command> parse_step(const nlohmann::json& step) {
  const std::string text = step.is_string() ? step.get<std::string>() : step.dump();
  if (text == "WriteOutside") return std::make_shared<WriteOutside>();
  if (text == "Attend") return std::make_shared<Attend>();
  if (text == "Backward") return std::make_shared<Backward>();
  int64_t i = -1;
  if (std::sscanf(text.c_str(), "WriteSlice(%" SCNd64 ")", &i) == 1 && i >= 0) return std::make_shared<WriteSlice>(i);
  fail_case("property.drawn.commands: cannot read the step " + text);
}

std::vector<std::shared_ptr<const Command>> canonical_schedule(int64_t micro_sequences) {
  std::vector<std::shared_ptr<const Command>> steps;
  for (int64_t i = 0; i < micro_sequences; ++i) steps.push_back(std::make_shared<WriteSlice>(i));
  steps.push_back(std::make_shared<WriteOutside>());
  for (int64_t i = 0; i < micro_sequences; ++i) steps.push_back(std::make_shared<Attend>());
  for (int64_t i = 0; i < micro_sequences; ++i) steps.push_back(std::make_shared<Backward>());
  return steps;
}

}  // namespace

nlohmann::json draw_kv_buffer_steps(const KvBufferDraw& d) {
  const KvModel model = initial_model(d, generate_kv_buffer_inputs(d.problem, d.seed));
  const auto commands =
      *rc::state::gen::commands(model, rc::state::gen::execOneOfWithArgs<WriteSlice, WriteOutside, Attend, Backward>());
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& c : commands) steps.push_back(shown(*c));
  return steps;
}

void check_kv_buffer_steps(Backend& backend, const KvBufferDraw& d, const nlohmann::json* steps, CheckRecord& record) {
  auto sut = make_sut(backend, d);
  sut->record = &record;
  KvModel m = initial_model(d, sut->inputs);
  std::vector<std::shared_ptr<const Command>> commands;
  if (steps && steps->is_array())
    for (const nlohmann::json& step : *steps) commands.push_back(parse_step(step));
  else
    commands = canonical_schedule(m.micro_sequences);
  for (const auto& c : commands) {
    c->run(m, *sut);
    c->apply(m);
  }
}

}  // namespace attn_oracle::properties
