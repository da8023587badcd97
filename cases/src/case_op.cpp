// case_op.cpp: Evaluation and Judgement (case_op.hpp) and the table of ops.
#include "attn_oracle/cases/case_op.hpp"

#include <algorithm>


namespace attn_oracle::inline cases {

Evaluation Evaluation::of(const Expected<nlohmann::json>& r) {
  if (r) return Evaluation{Kind::result, r.value(), ""};
  return Evaluation{Kind::rejected, error_to_json(r.error()), ""};
}

Evaluation Evaluation::declined_because(const std::string& reason) {
  return Evaluation{Kind::declined, error_to_json(Error{ErrorCode::unsupported, reason}), reason};
}


void Judgement::fail(const std::string& line) {
  status = Status::fail;
  // failures first: insert after the last failure line
  lines.insert(lines.begin() + failures_++, line);
}

void Judgement::note(const std::string& line) { lines.push_back(line); }

void Judgement::skip(const std::string& reason) {
  if (status == Status::pass) status = Status::skip;
  lines.push_back(reason);
}

void Judgement::merge(const Judgement& other) {
  for (size_t i = 0; i < other.lines.size(); ++i) {
    if (i < other.failures_) fail(other.lines[i]);
    else lines.push_back(other.lines[i]);
  }
  if (other.status == Status::skip && status == Status::pass) status = Status::skip;
}

std::string_view to_string(Judgement::Status status) {
  switch (status) {
    case Judgement::Status::pass: return "PASS";
    case Judgement::Status::fail: return "FAIL";
    case Judgement::Status::skip: return "SKIP";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// The table of ops, in CasePayload's order
// ---------------------------------------------------------------------------

const std::vector<const CaseOp*>& case_ops() {
  static const std::vector<const CaseOp*> ops = {&metadata_op(), &attention_op(), &small_seq_op(), &kv_buffer_op(),
                                                 &sharding_op(),   &context_parallel_op()};
  static_assert(std::variant_size_v<CasePayload> == 6, "one CaseOp per CasePayload alternative, in order");
  return ops;
}

const CaseOp* find_case_op(std::string_view name) {
  for (const CaseOp* op : case_ops())
    if (op->name() == name) return op;
  return nullptr;
}

const CaseOp& op_of(const Case& c) { return *case_ops()[c.payload.index()]; }

}  // namespace attn_oracle::cases
