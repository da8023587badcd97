// property.hpp: a property of the suite and the check of one case.
//
// A property is a draw and a check. The draw builds a Case from RapidCheck
// generators (`*gen`, composed with gen::build / mapcat / weightedOneOf) and
// records any other value it drew (with_drawn, property_check.hpp); the check
// judges the backend on that case and reports with fail_case / decline_case.
// Because the check sees nothing but the case, a counterexample file re-runs it
// exactly (`attn-oracle replay`, runner/replay.hpp). Running a property over
// many draws, shrinking and keeping its failures is attn_oracle::runner
// (runner/property_runner.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/cases/case.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/properties/draw_settings.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline properties {

// What a property's draw depends on besides RapidCheck's Random: the backend
// (its outputs and declines shape a draw), its domain, the domain the run
// draws in and the size profile. Built once per run of a property on a backend
// (draw_context), so that no draw re-derives a domain.
struct DrawContext {
  Backend& backend;
  InputDomain declared;  // backend.domain(): kv_buffer draws keep their own sizes
  InputDomain domain;    // drawing_domain(declared, shape_stable): what the other draws are drawn in
  SizeProfile profile = SizeProfile::ci;
};
DrawContext draw_context(Backend& backend, const DrawSettings& settings);

struct PropertyDef {
  std::string id;        // "metadata/matchesReference": reads as a sentence
  Capability needs;      // skipped, with the reason, on a backend without it
  std::string summary;   // one line for reports
  std::function<Case(const DrawContext&)> draw;        // one case, from generators
  std::function<void(Backend&, const Case&, CheckRecord&)> check;  // fail_case / decline_case; notes in the record
  std::optional<Capability> also_needs = std::nullopt;  // a second capability, skipped likewise
  std::vector<Output> needs_outputs = {};  // skipped, with the reason, on a backend that does not produce one
  // Why this property cannot draw inside a backend's domain (input_domain.hpp):
  // it needs padding, extra dims, positions away from 0, ... Skipped with the
  // reason before any draw; nullopt (or no function) when it can.
  std::function<std::optional<std::string>(const InputDomain&)> excluded_by = {};
  // The K/V buffer steps it calls (backend.hpp): skipped, with the reason, on a
  // backend that serves micro_sequence without them.
  std::vector<KvBufferStep> needs_kv_steps = {};
  // The context-parallel calls it makes past the permutation (backend.hpp):
  // skipped, with the reason, on a backend that does not serve one.
  std::vector<CpOp> needs_cp_ops = {};
};

// Why `property` is skipped on the context's backend before any draw: a
// capability or an output it lacks, or a domain that excludes what the
// property needs.
std::optional<std::string> skipped_before_drawing(const PropertyDef& property, const DrawContext& context);

// The optional outputs (attention.hpp) a property of this capability would
// judge that the backend does not produce: "lse" for a backend without lse.
std::vector<std::string> outputs_not_compared(const PropertyDef& property, const ProducedOutputs& produced);

// One case drawn and checked: what the check said, the labels it classified
// the case with, the worst error / budget of its float comparisons and its
// time inside the backend (its CheckRecord).
struct Trial {
  enum class Kind { passed, failed, declined };
  Kind kind = Kind::passed;
  std::string message;  // failed: the check's message; declined: the reason
  std::optional<Case> c;  // absent when the draw itself threw
  std::vector<std::string> labels;
  std::optional<double> worst_ratio;
  double backend_seconds = 0.0;
  std::string backend_log;  // what a failed worker printed (BackendFailure)
  bool hung = false;        // the backend ran out of time: no shrinking, no more draws
};
// Draws the shrinkable's case and checks it; `before_check` sees the case first.
// A draw that throws anything but a decline is a failure of the property too
// (a generator or backend bug shows).
Trial run_trial(const PropertyDef& p, Backend& backend, const rc::Shrinkable<Case>& shrinkable,
                const std::function<void(const Case&)>& before_check = {});

// The check of `property` on one case: PASS, FAIL with "<id>: <message>" as its
// first line, or SKIP when the backend lacks a capability or the check declines.
Judgement check_property(const PropertyDef& property, Backend& backend, const Case& c);
// check_property of the property a counterexample records (c.property->id).
Judgement check_recorded_property(Backend& backend, const Case& c);

// Every property of the suite, in report order.
const std::vector<PropertyDef>& all_properties();
const PropertyDef* find_property(const std::string& id);

// Per API area (metadata_properties.cpp, attention_properties.cpp, ...).
std::vector<PropertyDef> metadata_properties();
std::vector<PropertyDef> attention_properties();
std::vector<PropertyDef> oracle_arithmetic_properties();  // the oracle's own arithmetic, on every backend's run
std::vector<PropertyDef> small_seq_properties();
std::vector<PropertyDef> kv_buffer_properties();
std::vector<PropertyDef> sharding_properties();
std::vector<PropertyDef> context_parallel_properties();

}  // namespace attn_oracle::properties
