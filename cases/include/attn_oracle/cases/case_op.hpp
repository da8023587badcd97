// case_op.hpp: one case op (metadata, attention, small_seq, kv_buffer, sharding,
// context_parallel)
// in one place. A CaseOp owns its case-file fields (read, write), how a backend
// evaluates it (what `attn-oracle eval` prints), how a backend's result is
// judged against the float64 oracle, and what its coverage tally records. The
// ops are found through one table (case_ops()); nothing else branches on the op.
// Adding an op: a payload struct in the CasePayload variant (case_file.hpp) and
// one CaseOp implementation registered in case_op.cpp's table.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/cases/case.hpp"

namespace attn_oracle::inline cases {

// What `attn-oracle eval` prints for a case on one backend.
struct Evaluation {
  enum class Kind { result, rejected, declined, missing_capability };
  Kind kind = Kind::result;
  nlohmann::json output;  // the result JSON, or {"error": {...}} (rejected, declined)
  std::string reason;     // declined / missing_capability: why
  static Evaluation of(const Expected<nlohmann::json>& r);  // result or rejected
  static Evaluation declined_because(const std::string& reason);  // output: code unsupported
  static Evaluation missing(const Backend& backend, Capability capability);
};

// A verdict on one case: a backend against the oracle, a property's check, or
// the reference against the case's `expected`. Lines are one line each; failures first.
struct Judgement {
  enum class Status { pass, fail, skip };
  Status status = Status::pass;
  std::vector<std::string> lines;
  void fail(const std::string& line);
  void note(const std::string& line);  // something that was checked and held
  void skip(const std::string& reason);
  void merge(const Judgement& other);  // fail > skip > pass
  bool passed() const { return status == Status::pass; }

 private:
  size_t failures_ = 0;  // lines[0, failures_) are the failures
};
std::string_view to_string(Judgement::Status status);  // PASS, FAIL, SKIP

// What the coverage table records of a passing case: the row it counts in (a mask
// kind, or "-" for an op without one) and the layout and dtype words it had.
struct CoverageCell {
  std::string row;
  std::set<std::string> layouts, dtypes;
};

// How big a case is, for shrinking bounds and reports: rows (broadcast rows of
// a packed batch, 1 for a K/V-buffer sequence), tokens (the longer side), and
// the devices of a sharding mesh (1 elsewhere).
struct CaseSize {
  int64_t rows = 0, tokens = 0, devices = 1;
};

class CaseOp {
 public:
  virtual ~CaseOp() = default;
  virtual std::string_view name() const = 0;
  virtual Capability capability() const = 0;
  // The op's fields of a case file. read() throws (case_json.hpp); only
  // case_from_json calls it, and turns that into its Error.
  virtual CasePayload read(const nlohmann::json& j) const = 0;
  virtual nlohmann::json write(const CasePayload& payload) const = 0;
  virtual Evaluation evaluate(Backend& backend, const CasePayload& payload) const = 0;
  virtual Judgement judge(Backend& backend, const CasePayload& payload) const = 0;
  // Relative tolerance of the reference's numbers against a fixture's `expected`
  // (0: exact); whether an expected error's message is compared too.
  virtual double expected_tolerance() const { return 0.0; }
  virtual bool pins_error_messages() const { return false; }
  virtual CoverageCell coverage(const CasePayload& payload) const = 0;
  virtual CaseSize size(const CasePayload& payload) const = 0;
};

// The table, in CasePayload's order, and a lookup by `op` name.
const std::vector<const CaseOp*>& case_ops();
const CaseOp* find_case_op(std::string_view name);
const CaseOp& op_of(const Case& c);  // the op of its payload

// The ops' implementations (cases/src/*_op.cpp).
const CaseOp& metadata_op();
const CaseOp& attention_op();
const CaseOp& small_seq_op();
const CaseOp& kv_buffer_op();
const CaseOp& sharding_op();
const CaseOp& context_parallel_op();

// A CaseOp over one payload type: the casts in one place.
template <class Payload>
class TypedCaseOp : public CaseOp {
 public:
  nlohmann::json write(const CasePayload& p) const final { return write_fields(std::get<Payload>(p)); }
  Evaluation evaluate(Backend& b, const CasePayload& p) const final { return evaluate_on(b, std::get<Payload>(p)); }
  Judgement judge(Backend& b, const CasePayload& p) const final { return judge_on(b, std::get<Payload>(p)); }
  CoverageCell coverage(const CasePayload& p) const final { return coverage_of(std::get<Payload>(p)); }
  CaseSize size(const CasePayload& p) const final { return size_of(std::get<Payload>(p)); }

 protected:
  virtual nlohmann::json write_fields(const Payload& p) const = 0;
  virtual Evaluation evaluate_on(Backend& b, const Payload& p) const = 0;
  virtual Judgement judge_on(Backend& b, const Payload& p) const = 0;
  virtual CoverageCell coverage_of(const Payload& p) const = 0;
  virtual CaseSize size_of(const Payload& p) const = 0;
};

}  // namespace attn_oracle::cases
