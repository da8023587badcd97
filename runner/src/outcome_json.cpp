// outcome_json.cpp: a property run's result as JSON and back (run_outcome.hpp): what an
// isolated child reports to its parent and what the reports (harness/report.hpp) hold.
// Tested by tests/check_command_test.cpp (reports read back and merged) and
// tests/isolation_test.cpp.
#include <cmath>

#include "attn_oracle/runner/run_outcome.hpp"

namespace attn_oracle::inline runner {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

ojson ratio_json(const std::optional<double>& ratio) {
  if (!ratio) return nullptr;
  if (!std::isfinite(*ratio)) return std::isnan(*ratio) ? "nan" : "inf";  // JSON has no infinity
  return *ratio;
}

std::optional<double> ratio_from(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j == "inf") return INFINITY;
  if (j == "nan") return NAN;
  return std::nullopt;
}

}  // namespace

ojson failure_to_json(const PropertyFailure& f) {
  ojson j;
  j["message"] = f.message;
  j["signature"] = f.signature;
  j["cluster"] = f.cluster;
  j["draw"] = f.draw;
  j["shrinks"] = f.shrinks;
  j["nondeterministic"] = f.nondeterministic;
  if (f.from_store) j["from_store"] = true;
  j["counterexample"] = f.case_path;
  j["replay"] = f.replay_command;
  j["rerun"] = f.rerun_command;
  j["repro"] = f.repro_command;
  if (!f.backend_log.empty()) j["backend_log"] = f.backend_log;
  return j;
}

ojson cluster_to_json(const FailureCluster& c) {
  ojson j;
  j["key"] = c.key;
  j["rank"] = std::string(to_string(c.rank));
  if (c.input_class) j["input_class"] = std::string(to_string(*c.input_class));
  if (!c.decline.empty()) j["decline"] = c.decline;
  j["draws"] = c.draws;
  j["first_draw"] = c.first_draw;
  j["example"] = c.example;
  j["counterexample"] = c.counterexample;
  j["shown"] = c.shown;
  if (c.stored) j["stored"] = true;
  return j;
}

FailureCluster cluster_from_json(const json& j) {
  FailureCluster c;
  c.key = j.value("key", "");
  const std::string rank = j.value("rank", "");
  for (FailureRank r : {FailureRank::wrong_on_ordinary_input, FailureRank::wrong_on_input_class, FailureRank::exception,
                        FailureRank::crash})
    if (rank == to_string(r)) c.rank = r;
  const std::string cls = j.value("input_class", "");
  for (InputClass k : kInputClasses)
    if (cls == to_string(k)) c.input_class = k;
  c.decline = j.value("decline", "");
  c.draws = j.value("draws", 0);
  c.first_draw = j.value("first_draw", 0);
  c.example = j.value("example", "");
  c.counterexample = j.value("counterexample", "");
  c.shown = j.value("shown", false);
  c.stored = j.value("stored", false);
  return c;
}

PropertyFailure failure_from_json(const json& j) {
  PropertyFailure f;
  f.message = j.value("message", "");
  f.signature = j.value("signature", "");
  f.cluster = j.value("cluster", "");
  f.draw = j.value("draw", 0);
  f.shrinks = j.value("shrinks", 0);
  f.nondeterministic = j.value("nondeterministic", false);
  f.from_store = j.value("from_store", false);
  f.case_path = j.value("counterexample", "");
  f.replay_command = j.value("replay", "");
  f.rerun_command = j.value("rerun", "");
  f.repro_command = j.value("repro", "");
  f.backend_log = j.value("backend_log", "");
  return f;
}


ojson outcome_to_json(const PropertyOutcome& o) {
  ojson j;
  j["property"] = o.property;
  j["backend"] = o.backend;
  j["backend_version"] = o.backend_version;
  j["status"] = std::string(to_string(o.status));
  j["seed"] = o.seed;
  j["draws"] = {{"total", o.drawn}, {"passed", o.passed}, {"declined", o.declined}, {"failed", o.failed},
                {"judged", o.judged()}};
  if (!o.message.empty()) j["message"] = o.message;
  j["decline_reasons"] = ojson(o.decline_reasons);
  j["decline_examples"] = ojson(o.decline_examples);
  ojson classes = ojson::object();
  for (const auto& [k, c] : o.classes) classes[k] = {{"drawn", c.first}, {"declined", c.second}};
  j["classes"] = classes;
  j["wholly_declined"] = wholly_declined_classes(o);
  j["worst_error_to_budget"] = ratio_json(o.worst_ratio);
  j["not_compared"] = o.not_compared;
  j["mix"] = ojson(o.mix);
  j["largest"] = {{"rows", o.largest.rows}, {"tokens", o.largest.tokens}, {"devices", o.largest.devices}};
  j["seconds"] = std::round(o.seconds * 1000.0) / 1000.0;
  j["draw_seconds"] = {{"total", std::round(o.draw_seconds * 1000.0) / 1000.0},
                       {"in_backend", std::round(o.backend_seconds * 1000.0) / 1000.0}};
  j["failures"] = ojson::array();
  for (const PropertyFailure& f : o.failures) j["failures"].push_back(failure_to_json(f));
  j["clusters"] = ojson::array();
  for (const FailureCluster& c : o.clusters) j["clusters"].push_back(cluster_to_json(c));
  if (!o.failure_summary.empty()) j["failure_summary"] = o.failure_summary;
  j["shrunk"] = {{"draws", o.shrunk}, {"trials", o.shrink_trials}};
  if (!o.store.empty()) j["store"] = store_replay_to_json(o.store);
  return j;
}

PropertyOutcome outcome_from_json(const json& j) {
  PropertyOutcome o;
  o.property = j.value("property", "");
  o.backend = j.value("backend", "");
  o.backend_version = j.value("backend_version", "");
  const std::string status = j.value("status", "passed");
  o.status = status == "FAILED" ? PropertyOutcome::Status::failed
             : status == "skipped" ? PropertyOutcome::Status::skipped
                                   : PropertyOutcome::Status::passed;
  o.seed = j.value("seed", uint64_t{0});
  const json draws = j.value("draws", json::object());
  o.drawn = draws.value("total", 0), o.passed = draws.value("passed", 0);
  o.declined = draws.value("declined", 0), o.failed = draws.value("failed", 0);
  o.message = j.value("message", "");
  o.decline_reasons = j.value("decline_reasons", std::map<std::string, int>{});
  o.decline_examples = j.value("decline_examples", std::map<std::string, std::string>{});
  const json classes = j.value("classes", json::object());
  for (auto it = classes.begin(); it != classes.end(); ++it)
    o.classes[it.key()] = {it.value().value("drawn", 0), it.value().value("declined", 0)};
  o.worst_ratio = ratio_from(j.value("worst_error_to_budget", json()));
  o.not_compared = j.value("not_compared", std::vector<std::string>{});
  o.mix = j.value("mix", std::map<std::string, int>{});
  const json largest = j.value("largest", json::object());
  o.largest = CaseSize{largest.value("rows", int64_t{0}), largest.value("tokens", int64_t{0}),
                       largest.value("devices", int64_t{1})};
  o.seconds = j.value("seconds", 0.0);
  const json draw_seconds = j.value("draw_seconds", json::object());
  o.draw_seconds = draw_seconds.value("total", 0.0), o.backend_seconds = draw_seconds.value("in_backend", 0.0);
  for (const json& f : j.value("failures", json::array())) o.failures.push_back(failure_from_json(f));
  for (const json& c : j.value("clusters", json::array())) o.clusters.push_back(cluster_from_json(c));
  o.failure_summary = j.value("failure_summary", "");
  const json shrunk = j.value("shrunk", json::object());
  o.shrunk = shrunk.value("draws", 0), o.shrink_trials = shrunk.value("trials", 0);
  if (j.contains("store")) o.store = store_replay_from_json(j["store"]);
  return o;
}

}  // namespace attn_oracle::runner
