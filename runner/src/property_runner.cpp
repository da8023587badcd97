// property_runner.cpp: the driver behind every property run (property_runner.hpp).
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/runner/draw_log.hpp"


#include <cctype>
#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <utility>

#include <rapidcheck.h>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/runner/replay.hpp"

namespace attn_oracle::inline runner {
namespace {

// Trials one level below the declined candidates of a shrink step, at most: a
// backend that declines a case on the way (an odd length, one row of two) would
// otherwise stop the shrink above a smaller failing case.
constexpr int kDeclinedDetourTrials = 32;

// The first shrink that still fails with the same root (`stays`), again and
// again (RapidCheck's strategy); when none does, the shrinks of the candidates
// the backend declined, within kDeclinedDetourTrials. `path` is each accepted
// shrink's index among its siblings (a detour adds two). A hang ends it: each
// smaller case that still hangs would cost a whole time limit. `trials` counts
// what it cost.
Trial shrink(const PropertyDef& p, Backend& backend, RunListener& listener, int draw, rc::Shrinkable<Case> best,
             Trial failing, int& steps, int& trials, const std::function<bool(const Trial&)>& stays) {
  std::vector<size_t> path;
  std::vector<std::pair<size_t, rc::Shrinkable<Case>>> declined;
  auto shrinks = best.shrinks();
  size_t index = 0;
  // Tries `candidate` at `at` (its path from `best`): true when it became the new
  // best. A declined child of `best` is kept for a detour.
  const auto accept_if_failing = [&](const rc::Shrinkable<Case>& candidate, const std::vector<size_t>& at) {
    path.insert(path.end(), at.begin(), at.end());
    listener.before_trial(draw, path);
    Trial t = run_trial(p, backend, candidate);
    ++trials;
    if (t.kind == Trial::Kind::failed && t.c && stays(t)) {
      best = candidate, failing = std::move(t), shrinks = best.shrinks(), index = 0, declined.clear();
      ++steps;
      return true;
    }
    path.resize(path.size() - at.size());
    if (t.kind == Trial::Kind::declined && at.size() == 1) declined.emplace_back(at.front(), candidate);
    return false;
  };
  while (!failing.hung) {
    if (auto next = shrinks.next()) {
      accept_if_failing(*next, {index++});
      continue;
    }
    bool detoured = false;
    int budget = kDeclinedDetourTrials;
    const auto children = std::exchange(declined, {});
    for (const auto& [at, candidate] : children) {
      auto below = candidate.shrinks();
      for (size_t j = 0; !detoured && budget > 0; ++j, --budget) {
        auto grandchild = below.next();
        if (!grandchild) break;
        detoured = accept_if_failing(*grandchild, {at, j});
      }
      if (detoured || budget == 0) break;
    }
    if (!detoured) break;
  }
  return failing;
}

// A shrunk failure in an input class, tried without it (out_of_input_classes):
// the first transformed case that still fails with the same root replaces it,
// as long as classes come off.
Trial out_of_classes(const PropertyDef& p, Backend& backend, const Triage& triage, const Triage::Draw& d,
                     Trial failing, int& trials) {
  for (int round = 0; round < 3; ++round) {
    const size_t classes = input_classes_of(*failing.c).size();
    bool lifted = false;
    for (const Case& c : out_of_input_classes(*failing.c)) {
      Trial t = run_trial(p, backend, rc::shrinkable::just(c));
      ++trials;
      if (t.kind != Trial::Kind::failed || !t.c || !triage.same_root(d, t.message, *t.c) ||
          input_classes_of(*t.c).size() >= classes)
        continue;
      failing = std::move(t), lifted = true;
      break;
    }
    if (!lifted) break;
  }
  return failing;
}

// A shrunk failure of several rows tried one row at a time (single_rows), then
// its row without each document in turn (without_each_document), as long as
// one still fails with the same root: the first that does replaces it.
Trial to_fewer_rows_and_documents(const PropertyDef& p, Backend& backend, const Triage& triage,
                                  const Triage::Draw& d, Trial failing, int& trials) {
  const auto first_failing = [&](const std::vector<Case>& candidates) -> std::optional<Trial> {
    for (const Case& c : candidates) {
      Trial t = run_trial(p, backend, rc::shrinkable::just(c));
      ++trials;
      if (t.kind == Trial::Kind::failed && t.c && triage.same_root(d, t.message, *t.c)) return t;
    }
    return std::nullopt;
  };
  if (auto one_row = first_failing(single_rows(*failing.c))) failing = std::move(*one_row);
  while (auto fewer = first_failing(without_each_document(*failing.c))) failing = std::move(*fewer);
  return failing;
}

// Sizes spread evenly over [0, max_size], the largest always used (RapidCheck's rule).
int size_for(const RunSettings& s, int k) {
  const int sizes = s.max_size + 1;
  const int regular = (s.cases / sizes) * sizes;
  if (k < regular) return k % sizes;
  const int rest = s.cases - regular;
  return rest == 1 ? 0 : ((k % sizes) * s.max_size) / (rest - 1);
}

// Draw k's generator state: a function of the seed and k alone, so that any
// subset of the draws (a shard) reproduces exactly those of the whole run.
rc::Random random_for(uint64_t seed, int k) {
  return rc::Random(rc::Random::Key{seed, static_cast<uint64_t>(k), 0x61747461ull, 0x6f7261636c65ull});
}

// "mask causal", "dtype bf16", "backward", "layout GQA": the classes a whole decline of is
// reported, and whose judged draws coverage targets count (harness/coverage_targets.hpp).
std::vector<std::string> classes_of(const Case& c) {
  const CoverageCell cell = op_of(c).coverage(c.payload);
  std::vector<std::string> out;
  if (cell.row != "-") out.push_back("mask " + cell.row);
  for (const std::string& l : cell.layouts) out.push_back("layout " + l);
  for (const std::string& d : cell.dtypes) {
    const size_t space = d.find(' ');
    out.push_back("dtype " + d.substr(0, space));
    out.push_back(d.ends_with("fwd+bwd") ? "backward" : "forward");
  }
  return out;
}

void tally_mix(const Case& c, PropertyOutcome& out) {
  for (const std::string& key : mix_keys(c)) ++out.mix[key];
  const CaseSize size = op_of(c).size(c.payload);
  out.largest.rows = std::max(out.largest.rows, size.rows);
  out.largest.tokens = std::max(out.largest.tokens, size.tokens);
  out.largest.devices = std::max(out.largest.devices, size.devices);
}


// The first path where JSON `a` and `b` differ, with both values.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  if (a.type() == b.type() && a.is_structured() && a.size() == b.size()) {
    if (a.is_array()) {
      for (size_t i = 0; i < a.size(); ++i)
        if (auto d = first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
      return "";
    }
    for (auto it = a.begin(); it != a.end(); ++it)
      if (auto d = first_difference(it.value(), b.value(it.key(), nlohmann::json()), path + (path.empty() ? "" : ".") +
                                                                                          it.key());
          !d.empty())
        return d;
    return "";
  }
  if (a == b) return "";
  return (path.empty() ? "the result" : path) + " differs between two identical calls (" + a.dump() + ", then " +
         b.dump() + ")";
}

// A failure found twice more is the backend's; one that does not repeat is its
// nondeterminism, named by the first output that differs between two calls.
void confirm_determinism(const PropertyDef& p, Backend& backend, PropertyFailure& f) {
  for (int again = 0; again < 2; ++again) {
    const Trial t = run_trial(p, backend, rc::shrinkable::just(f.counterexample));
    if (t.kind == Trial::Kind::failed && t.message == f.message) continue;
    f.nondeterministic = true;
    const nlohmann::json first = evaluate_case(backend, f.counterexample).output;
    const nlohmann::json second = evaluate_case(backend, f.counterexample).output;
    std::string what = first_difference(first, second, "");
    if (what.empty())
      what = "the check's verdict changes between identical runs (\"" + f.message + "\", then " +
             (t.kind == Trial::Kind::failed ? "\"" + t.message + "\"" : std::string(t.kind == Trial::Kind::passed ? "a pass" : "a decline")) + ")";
    f.message = "nondeterministic backend: " + what;
    f.signature = "nondeterministic backend";
    return;
  }
}

void save(PropertyFailure& f, const PropertyOutcome& out, const RunSettings& s, const Backend& backend) {
  PropertyRecord& record = f.counterexample.property ? *f.counterexample.property : f.counterexample.property.emplace();
  record.id = out.property;
  record.backend = out.backend;
  record.backend_version = out.backend_version;
  record.seed = s.seed;
  f.counterexample.note = "counterexample of " + out.property + " on backend " + out.backend + " (seed " +
                          std::to_string(s.seed) + ", draw " + std::to_string(f.draw) + ", " +
                          std::to_string(f.shrinks) + " shrinks): " + f.message;
  f.case_path = keep_counterexample(f.counterexample, backend.identity(), out.property, s);
  set_replay_commands(f, s, out.backend, out.property, true);
}


// One search draw, appended to s.draw_log (draw_log.hpp).
void log_draw(const RunSettings& s, const PropertyOutcome& out, int k, double run_start, const Trial& t,
              std::chrono::steady_clock::duration took) {
  DrawObservation o;
  o.property = out.property, o.backend = out.backend, o.backend_version = out.backend_version;
  o.seed = s.seed, o.draw = k, o.cases = s.cases, o.size = size_for(s, k);
  o.shard = s.shard, o.run_start = run_start;
  o.status = t.kind == Trial::Kind::passed ? "passed" : t.kind == Trial::Kind::declined ? "gave_up" : "failed";
  o.reason = t.kind == Trial::Kind::passed ? "" : t.message;
  o.drawn = t.c ? &*t.c : nullptr;
  o.seconds = std::chrono::duration<double>(took).count(), o.backend_seconds = t.backend_seconds;
  append_json_line(s.draw_log, observation_json(o));
}

}  // namespace


PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             RunListener* listener_or_none, const ResumePoint& resume_from) {
  RunListener quiet;
  RunListener& listener = listener_or_none ? *listener_or_none : quiet;
  const auto start = std::chrono::steady_clock::now();
  PropertyOutcome out;
  out.property = property.id;
  out.backend = backend.name();
  out.backend_version = backend.version();
  out.seed = settings.seed;
  const DrawContext context = draw_context(backend, settings.draws);  // once: no draw re-derives the domain
  const double run_start = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (auto why = skipped_before_drawing(property, context)) {
    out.status = PropertyOutcome::Status::skipped;
    out.message = *why;
    return out;
  }
  out.not_compared = outputs_not_compared(property, backend.outputs());
  RunSettings s = settings;
  s.max_size = std::clamp(s.max_size, 0, 100);
  s.shard.count = std::max(1, s.shard.count);
  const rc::Gen<Case> gen = rc::gen::exec([&property, &context] { return property.draw(context); });
  ResumePoint resume = resume_from;
  replay_stored_failures(property, backend, s, resume, listener, out);  // before any draw; their groups become known
  Triage triage(s.max_failures, resume.known_signatures, out.backend, property.needs);
  for (PropertyFailure& f : out.failures) f.cluster = triage.adopt(f.message, f.counterexample, f.case_path);
  const Shard shard = s.shard;
  const int total = draws_in_shard(s.cases, shard);
  const int first = shard.index + std::max(0, resume.first_draw - shard.index + shard.count - 1) / shard.count * shard.count;
  for (int k = first; k < s.cases; k += shard.count) {
    const rc::Shrinkable<Case> shrinkable = gen(random_for(s.seed, k), size_for(s, k));
    listener.before_trial(k, {});
    const auto draw_start = std::chrono::steady_clock::now();
    Trial t = run_trial(property, backend, shrinkable);
    out.draw_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - draw_start).count();
    out.backend_seconds += t.backend_seconds;
    listener.after_draw(k, t.kind == Trial::Kind::passed ? "passed" : t.kind == Trial::Kind::declined ? "declined" : "failed");
    if (!s.draw_log.empty()) log_draw(s, out, k, run_start, t, std::chrono::steady_clock::now() - draw_start);
    ++out.drawn;
    if (t.c) {
      tally_mix(*t.c, out);
      for (const std::string& c : classes_of(*t.c)) {
        ++out.classes[c].first;
        out.classes[c].second += t.kind == Trial::Kind::declined;
      }
    }
    listener.progress(out.drawn, total);
    if (t.kind == Trial::Kind::passed) {
      ++out.passed;
      for (const std::string& l : t.labels) ++out.mix["label " + l];
      if (t.worst_ratio) out.worst_ratio = std::max(out.worst_ratio.value_or(0.0), *t.worst_ratio);
      listener.case_passed(*t.c);
      continue;
    }
    if (t.kind == Trial::Kind::declined) {
      ++out.declined;
      const std::string reason = blank_numbers(t.message);
      ++out.decline_reasons[reason];
      out.decline_examples.emplace(reason, t.message);
      continue;
    }
    ++out.failed;
    const Triage::Draw d = triage.classify(k, t.message, t.c ? &*t.c : nullptr);
    if (!t.c || !triage.take(d)) {  // a root shrunk already, or past the shrink budget: one line
      if (t.hung) break;
      continue;
    }
    const bool hung = t.hung;
    PropertyFailure f;
    f.draw = k;
    ++out.shrunk;
    t = shrink(property, backend, listener, k, shrinkable, std::move(t), f.shrinks, out.shrink_trials,
               [&](const Trial& candidate) { return triage.same_root(d, candidate.message, *candidate.c); });
    if (!t.hung && !input_classes_of(*t.c).empty())
      t = out_of_classes(property, backend, triage, d, std::move(t), out.shrink_trials);
    if (!t.hung) t = to_fewer_rows_and_documents(property, backend, triage, d, std::move(t), out.shrink_trials);
    f.message = t.message;
    f.signature = d.group;
    f.backend_log = t.backend_log;
    f.counterexample = std::move(*t.c);
    if (!t.hung) confirm_determinism(property, backend, f);
    if (triage.place(d, f.message, f.counterexample)) {
      f.cluster = triage.last_cluster();
      save(f, out, s, backend);
      triage.attach(f.cluster, f.case_path);
      listener.failure_found(f);
      out.failures.push_back(std::move(f));
    }
    if (hung) break;  // more of the same would cost a time limit each (the draws after it are not run)
  }
  out.clusters = triage.clusters();
  rank_failures(out, s.max_failures);
  settle_status(out);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

TrialResult run_draw(const PropertyDef& property, const DrawContext& context, const RunSettings& settings, int draw,
                     const std::vector<size_t>& path, const std::function<void(const Case&)>& before_check) {
  RunSettings s = settings;
  s.max_size = std::clamp(s.max_size, 0, 100);
  const rc::Gen<Case> gen = rc::gen::exec([&property, &context] { return property.draw(context); });
  rc::Shrinkable<Case> node = gen(random_for(s.seed, draw), size_for(s, draw));
  for (size_t index : path) {
    auto shrinks = node.shrinks();
    std::optional<rc::Shrinkable<Case>> found;
    for (size_t i = 0; i <= index; ++i) {
      auto next = shrinks.next();
      if (!next) return TrialResult{TrialResult::Kind::no_such_shrink, ""};
      if (i == index) found = *next;
    }
    node = *found;
  }
  const Trial t = run_trial(property, context.backend, node, before_check);
  switch (t.kind) {
    case Trial::Kind::passed: return {TrialResult::Kind::passed, ""};
    case Trial::Kind::declined: return {TrialResult::Kind::declined, t.message};
    case Trial::Kind::failed: return {TrialResult::Kind::failed, t.message};
  }
  return {};
}

}  // namespace attn_oracle::runner
