// property.cpp: the check of one case (property.hpp, property_check.hpp) and
// the registry of the suite's properties.
#include "attn_oracle/properties/property.hpp"

#include <rapidcheck.h>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle::inline properties {
namespace {

// "backend B serves kv_buffer without the steps write_slice and attend, which this property calls".
std::optional<std::string> kv_steps_not_served(const PropertyDef& property, Backend& backend) {
  if (property.needs_kv_steps.empty() || !backend.kv_buffer()) return std::nullopt;
  const KvBufferSteps served = backend.kv_buffer()->steps();
  std::string missing;
  int count = 0;
  for (KvBufferStep step : property.needs_kv_steps)
    if (!served.has(step)) missing += std::string(count++ ? " and " : "") + std::string(to_string(step));
  if (count == 0) return std::nullopt;
  return "backend " + backend.name() + " serves kv_buffer without the step" + (count > 1 ? "s " : " ") + missing +
         ", which this property calls";
}

// "backend B serves context_parallel without cp_attention, which this property calls".
std::optional<std::string> cp_ops_not_served(const PropertyDef& property, Backend& backend) {
  if (!backend.context_parallel()) return std::nullopt;
  for (CpOp op : property.needs_cp_ops)
    if (!backend.context_parallel()->serves(op))
      return "backend " + backend.name() + " serves context_parallel without " + std::string(to_string(op)) +
             ", which this property calls";
  return std::nullopt;
}

// "over the memory budget (...)": how a draw past the budget is declined.
std::string over_budget_reason(const Error& e) { return "over the memory budget (" + e.message + ")"; }

}  // namespace

// Draws the shrinkable's case and checks it. A draw that throws anything but a
// decline is a failure of the property too (a generator or backend bug shows).
Trial run_trial(const PropertyDef& p, Backend& backend, const rc::Shrinkable<Case>& shrinkable,
                const std::function<void(const Case&)>& before_check) {
  Trial t;
  CheckRecord record;
  try {
    t.c = shrinkable.value();
    if (before_check) before_check(*t.c);
    p.check(backend, *t.c, record);
  } catch (const CaseFailure& f) {
    t.kind = Trial::Kind::failed, t.message = f.message;
  } catch (const CaseDeclined& d) {
    t.kind = Trial::Kind::declined, t.message = d.reason;
  } catch (const BackendFailure& b) {
    t.kind = Trial::Kind::failed, t.message = b.what(), t.backend_log = b.log, t.hung = b.hung;
  } catch (const rc::GenerationFailure& g) {
    t.kind = Trial::Kind::declined, t.message = std::string("generation failed: ") + g.what();
  } catch (const BadExpectedAccess& e) {
    // A value the check was sure of (the oracle's, mostly) was an error instead.
    const bool budget = e.error.code == ErrorCode::over_memory_budget;
    t.kind = budget ? Trial::Kind::declined : Trial::Kind::failed;
    t.message = budget ? over_budget_reason(e.error) : std::string("exception: ") + e.what();
  } catch (const std::exception& e) {
    t.kind = Trial::Kind::failed, t.message = std::string("exception: ") + e.what();
  } catch (...) {
    t.kind = Trial::Kind::failed, t.message = "an exception that is not a std::exception";
  }
  t.labels = std::move(record.labels);
  t.worst_ratio = record.worst_ratio;
  t.backend_seconds = record.backend_seconds;
  return t;
}

DrawContext draw_context(Backend& backend, const DrawSettings& settings) {
  InputDomain declared = backend.domain();
  InputDomain drawn = drawing_domain(declared, settings.shape_stable);
  return DrawContext{backend, std::move(declared), std::move(drawn), settings.profile};
}

std::optional<std::string> skipped_before_drawing(const PropertyDef& property, const DrawContext& context) {
  Backend& backend = context.backend;
  for (std::optional<Capability> needed : {std::optional<Capability>(property.needs), property.also_needs})
    if (needed && !backend.has(*needed))
      return "backend " + backend.name() + " lacks the " + std::string(to_string(*needed)) + " capability";
  for (Output needed : property.needs_outputs)
    if (!backend.outputs().has(needed)) return "backend " + backend.name() + " does not produce " + std::string(to_string(needed));
  if (auto missing = kv_steps_not_served(property, backend)) return missing;
  if (auto missing = cp_ops_not_served(property, backend)) return missing;
  if (property.excluded_by) {
    if (auto why = property.excluded_by(context.domain)) {
      const InputDomain &declared = context.declared, &drawn = context.domain;
      return (declared.sizes.empty() && !drawn.sizes.empty()
                  ? "shape-stable draws (" + to_string(drawn) + ") exclude"
                  : "backend " + backend.name() + "'s domain (" + to_string(declared) + ") excludes") +
             " what it needs: " + *why;
    }
  }
  return std::nullopt;
}

std::vector<std::string> outputs_not_compared(const PropertyDef& property, const ProducedOutputs& produced) {
  std::vector<Output> judged;
  switch (property.needs) {
    case Capability::metadata: case Capability::kv_buffer: break;  // kv_buffer needs them all (needs_outputs)
    case Capability::small_seq: judged = {Output::small_seq_p, Output::gradients}; break;
    default: judged = {Output::lse, Output::gradients};
  }
  std::vector<std::string> out;
  for (Output o : judged)
    if (!produced.has(o)) out.emplace_back(to_string(o));
  return out;
}

void fail_case(const std::string& message) { throw CaseFailure{message}; }
void decline_case(const std::string& reason) { throw CaseDeclined{reason}; }

void fail_with(const std::string& before, const Error& error, const std::string& after) {
  decline_if_unsupported(error);
  if (error.code == ErrorCode::over_memory_budget) decline_case(over_budget_reason(error));
  fail_case(before + std::string(to_string(error.code)) + " (" + error.message + ")" + after);
}

void CheckRecord::note(const ToleranceCheck& check) {
  if (!worst_ratio || !(check.ratio <= *worst_ratio)) worst_ratio = check.ratio;  // a NaN ratio is the worst there is
}

void CheckRecord::note(const std::vector<ToleranceCheck>& checks) {
  for (const ToleranceCheck& c : checks) note(c);
}

std::string_view op_name(const Case& c) { return op_of(c).name(); }

Case with_drawn(Case c, nlohmann::json drawn) {
  if (!c.property) c.property = PropertyRecord{};
  c.property->drawn = std::move(drawn);
  return c;
}

Judgement check_property(const PropertyDef& property, Backend& backend, const Case& c) {
  Judgement j;
  for (std::optional<Capability> needed : {std::optional<Capability>(property.needs), property.also_needs})
    if (needed && !backend.has(*needed))
      return j.skip("backend " + backend.name() + " lacks the " + std::string(to_string(*needed)) + " capability"), j;
  if (auto missing = kv_steps_not_served(property, backend)) return j.skip(*missing), j;
  const Trial t = run_trial(property, backend, rc::shrinkable::just(c));
  if (t.kind == Trial::Kind::failed) j.fail(property.id + ": " + t.message);
  else if (t.kind == Trial::Kind::declined) j.skip(property.id + " declines this case: " + t.message);
  else j.note(property.id + " holds on this case");
  return j;
}

Judgement check_recorded_property(Backend& backend, const Case& c) {
  const PropertyDef* p = c.property ? find_property(c.property->id) : nullptr;
  if (!p) {
    Judgement j;
    j.fail("unknown property " + (c.property ? c.property->id : std::string("(none)")) + " in the case's record");
    return j;
  }
  return check_property(*p, backend, c);
}

const std::vector<PropertyDef>& all_properties() {
  static const std::vector<PropertyDef> properties = [] {
    std::vector<PropertyDef> all = metadata_properties();
    for (auto* area : {attention_properties, oracle_arithmetic_properties, small_seq_properties, kv_buffer_properties,
                       sharding_properties, context_parallel_properties})
      for (PropertyDef& p : area()) all.push_back(std::move(p));
    return all;
  }();
  return properties;
}

const PropertyDef* find_property(const std::string& id) {
  for (const PropertyDef& p : all_properties())
    if (p.id == id) return &p;
  return nullptr;
}

}  // namespace attn_oracle::properties
