// rule_agreement.cpp: the independent rules against the model's validators, on
// every draw of the properties that call them (independent_rules.hpp). A
// disagreement fails the case with both answers; the draw's rule edges are
// classified for the coverage table.
#include "attn_oracle/properties/independent_rules.hpp"
#include "attn_oracle/properties/reference_calls.hpp"
#include "attn_oracle/properties/property_check.hpp"

namespace attn_oracle::inline properties {
namespace {

std::string model_answer(const std::optional<Error>& e) {
  return e ? std::string(to_string(e->code)) + " (" + e->message + ")" : std::string("valid");
}

std::string rules_answer(const std::optional<RuleVerdict>& v) { return v ? v->describe() : std::string("valid"); }

// Fails unless the model's answer is the rules' (code, and what the message names).
void require_agreement(const char* validator, const std::optional<Error>& model, const std::optional<RuleVerdict>& rules) {
  const bool agree = model ? rules && rules->code == model->code && rules->named_by(model->message) : !rules;
  if (!agree)
    fail_case(std::string("validity rules disagree: the model's ") + validator + " gives " + model_answer(model) +
              "; the independent rules give " + rules_answer(rules));
}

}  // namespace

bool RuleVerdict::named_by(const std::string& message) const {
  return message.starts_with(starts_with) && message.find(contains) != std::string::npos;
}

std::string RuleVerdict::describe() const {
  std::string out = std::string(to_string(code)) + " (" + rule;
  if (!starts_with.empty()) out += "; the message starts \"" + starts_with + "\"";
  if (!contains.empty()) out += "; the message names \"" + contains + "\"";
  return out + ")";
}

std::optional<RuleVerdict> agreed_sharding_verdict(const Sharding& sharding, const ShardedShapes& shapes,
                                                   CheckRecord& record) {
  for (const std::string& edge : sharding_rule_edges(sharding, shapes)) record.classify(true, edge);
  const std::optional<RuleVerdict> rules = sharding_rules_verdict(sharding, shapes);
  if (rules) record.classify(true, "rule " + std::string(to_string(rules->code)));
  require_agreement("validate_sharding", reference_calls().validate_sharding(sharding, shapes), rules);
  return rules;
}

std::optional<RuleVerdict> agreed_batch_verdict(const PackedBatch& batch, CheckRecord& record) {
  for (const std::string& edge : batch_rule_edges(batch)) record.classify(true, edge);
  const std::optional<RuleVerdict> rules = batch_rules_verdict(batch);
  if (rules) record.classify(true, "rule " + std::string(to_string(rules->code)));
  const Expected<BatchLayout> model = reference_calls().validate_batch(batch);
  require_agreement("validate", model ? std::nullopt : std::optional<Error>(model.error()), rules);
  return rules;
}

}  // namespace attn_oracle::properties
