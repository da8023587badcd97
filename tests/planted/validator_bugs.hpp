// validator_bugs.hpp: planted bugs in the model's validators (model/), the code
// every backend and the oracle share, installed through the oracle seam
// (ScopedReferenceCalls: ReferenceCalls::validate_batch / validate_sharding). Each is the
// model's validator with one mistake of the kinds a mutation campaign plants
// and only an independent statement of the rules catches
// (properties/include/attn_oracle/properties/independent_rules.hpp):
//  - model_k_sequence_split_against_q_len: K's sequence dim is checked for
//    divisibility against q_len instead of kv_len (a rule checked against the
//    wrong length). Only the message changes: V's sequence dim fails instead.
//  - model_accepts_equal_positions: positions inside a document need only not
//    decrease (a non-strict comparison where the rule is strict).
//  - model_gqa_exception_without_k_v_comparison: the GQA/MQA exception compares K
//    with Q but never K with V (a missing spec comparison).
// tests/independent_rules_test.cpp runs the properties with each installed, on
// several seeds, and requires every seed to fail.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "attn_oracle/properties/reference_calls.hpp"

namespace attn_oracle::planted {

struct ValidatorBug {
  std::string name;
  std::string property;  // the property that must catch it, on every seed
  ReferenceCalls oracle;         // the correct oracle with the planted validator
};

inline void PrintTo(const ValidatorBug& b, std::ostream* os) { *os << b.name << " (" << b.property << ")"; }

std::vector<ValidatorBug> validator_bugs();

}  // namespace attn_oracle::planted
