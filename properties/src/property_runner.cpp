// property_runner.cpp: the driver behind every property run (property_runner.hpp)
// and the check of one case, shared with replay.
#include "attn_oracle/property_runner.hpp"

#include "attn_oracle/backend_calls.hpp"

#include <cctype>
#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <utility>

#include <rapidcheck.h>

#include "attn_oracle/generators.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/replay.hpp"

namespace attn_oracle {
namespace {

std::string over_budget_reason(const Error& e) { return "over the memory budget (" + e.message + ")"; }

thread_local std::vector<std::string>* current_labels = nullptr;

// ------------------------------------------------------------------ one trial
struct Trial {
  enum class Kind { passed, failed, declined };
  Kind kind = Kind::passed;
  std::string message;  // failed: the check's message; declined: the reason
  std::optional<Case> c;  // absent when the draw itself threw
  std::vector<std::string> labels;
  std::optional<double> worst_ratio;
  std::string backend_log;  // what a failed worker printed (BackendFailure)
  bool hung = false;        // the backend ran out of time: no shrinking, no more draws
};

// Draws the shrinkable's case and checks it. A draw that throws anything but a
// decline is a failure of the property too (a generator or backend bug shows).
Trial run_trial(const PropertyDef& p, Backend& backend, const rc::Shrinkable<Case>& shrinkable,
                const std::function<void(const Case&)>& before_check = {}) {
  Trial t;
  ToleranceRatioSink ratios;
  current_labels = &t.labels;
  try {
    t.c = shrinkable.value();
    if (before_check) before_check(*t.c);
    p.check(backend, *t.c);
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
  current_labels = nullptr;
  t.worst_ratio = ratios.worst();
  return t;
}

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
Trial shrink(const PropertyDef& p, Backend& backend, const RunSettings& s, int draw, rc::Shrinkable<Case> best,
             Trial failing, int& steps, int& trials, const std::function<bool(const Trial&)>& stays) {
  std::vector<size_t> path;
  std::vector<std::pair<size_t, rc::Shrinkable<Case>>> declined;
  auto shrinks = best.shrinks();
  size_t index = 0;
  // Tries `candidate` at `at` (its path from `best`): true when it became the new
  // best. A declined child of `best` is kept for a detour.
  const auto accept_if_failing = [&](const rc::Shrinkable<Case>& candidate, const std::vector<size_t>& at) {
    path.insert(path.end(), at.begin(), at.end());
    if (s.before_trial) s.before_trial(draw, path);
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

// "mask causal", "dtype bf16", "backward": the classes a whole decline of is reported.
std::vector<std::string> classes_of(const Case& c) {
  const CoverageCell cell = op_of(c).coverage(c.payload);
  std::vector<std::string> out;
  if (cell.row != "-") out.push_back("mask " + cell.row);
  for (const std::string& d : cell.dtypes) {
    const size_t space = d.find(' ');
    out.push_back("dtype " + d.substr(0, space));
    out.push_back(d.ends_with("fwd+bwd") ? "backward" : "forward");
  }
  return out;
}

void tally_mix(const Case& c, PropertyOutcome& out) {
  const CoverageCell cell = op_of(c).coverage(c.payload);
  ++out.mix["op " + std::string(op_of(c).name())];
  if (cell.row != "-") ++out.mix["mask " + cell.row];
  for (const std::string& l : cell.layouts) ++out.mix["layout " + l];
  for (const std::string& d : cell.dtypes) ++out.mix["dtype " + d];
  const CaseSize size = op_of(c).size(c.payload);
  out.largest.rows = std::max(out.largest.rows, size.rows);
  out.largest.tokens = std::max(out.largest.tokens, size.tokens);
  out.largest.devices = std::max(out.largest.devices, size.devices);
}

std::string blank_numbers(const std::string& text) {
  static const std::regex number("-?[0-9]+(\\.[0-9]+)?(e[-+]?[0-9]+)?");
  return std::regex_replace(text, number, "#");
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

}  // namespace

void settle_status(PropertyOutcome& o) {
  o.status = PropertyOutcome::Status::passed;
  if (!o.failures.empty()) {
    o.status = PropertyOutcome::Status::failed;
  } else if (o.passed == 0 && o.declined > 0) {
    o.status = PropertyOutcome::Status::skipped;
    const auto most = std::max_element(o.decline_reasons.begin(), o.decline_reasons.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    o.message = "every draw was declined; most often: " + o.decline_example(most->first);
  }
}

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
}  // namespace

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

std::string not_compared_line(const PropertyOutcome& o) {
  std::string names;
  for (size_t i = 0; i < o.not_compared.size(); ++i)
    names += (i == 0 ? "" : i + 1 == o.not_compared.size() ? " and " : ", ") + o.not_compared[i];
  if (names.empty()) return "";
  return names + " not compared (the backend does not produce " + (o.not_compared.size() == 1 ? "it" : "them") + ")";
}

std::string thin_judgement(const PropertyOutcome& o) {
  if (o.status != PropertyOutcome::Status::passed || o.drawn == 0 || o.judged() * 10 >= o.drawn) return "";
  return "judged only " + std::to_string(o.judged()) + " of " + std::to_string(o.drawn) + " draws";
}

std::vector<std::string> wholly_declined_classes(const PropertyOutcome& o) {
  std::vector<std::string> out;
  for (const auto& [name, counts] : o.classes) {
    const auto [drawn, declined] = counts;
    if (drawn >= 3 && declined == drawn)
      out.push_back("every " + (name.rfind("mask ", 0) == 0 || name.rfind("dtype ", 0) == 0 ? name.substr(name.find(' ') + 1) : name) +
                    " draw was declined (" + std::to_string(drawn) + " draws)");
  }
  return out;
}

void fail_case(const std::string& message) { throw CaseFailure{message}; }
void decline_case(const std::string& reason) { throw CaseDeclined{reason}; }

void fail_with(const std::string& before, const Error& error, const std::string& after) {
  decline_if_unsupported(error);
  if (error.code == ErrorCode::over_memory_budget) decline_case(over_budget_reason(error));
  fail_case(before + std::string(to_string(error.code)) + " (" + error.message + ")" + after);
}

void classify(bool holds, const std::string& label) {
  if (holds && current_labels) current_labels->push_back(label);
}

std::string_view op_name(const Case& c) { return op_of(c).name(); }

Case with_drawn(Case c, nlohmann::json drawn) {
  if (!c.property) c.property = PropertyRecord{};
  c.property->drawn = std::move(drawn);
  return c;
}

std::string failure_signature(const std::string& message) {
  const size_t colon = message.find(':');
  std::string lead = colon == std::string::npos ? message : message.substr(0, colon);
  // An index is one field whatever its rank: "q_seqlens[0, 1, 0] (slice 0, row 1,
  // slot 0)" of a vmapped draw and "q_seqlens[1, 0] (row 1, slot 0)" are one
  // mismatch, so that shrinking may drop the extra dims.
  static const std::regex index("\\[#(, #)*\\]( \\((slice #, )?row #, slot #\\))?");
  return std::regex_replace(blank_numbers(lead.substr(0, 120)), index, "[#]");
}

void set_replay_commands(PropertyFailure& f, const RunSettings& s, const std::string& backend,
                         const std::string& property, bool this_run) {
  f.replay_command = s.program + " replay --backend " + shell_word(backend) + " " + shell_word(f.case_path);
  f.repro_command = s.program + " repro --backend " + shell_word(backend) + " " + shell_word(f.case_path);
  f.rerun_command = s.program + " check --backend " + shell_word(backend) + " --filter " + property;
  if (this_run) f.rerun_command += " --seed " + std::to_string(s.seed) + " --cases " + std::to_string(s.cases);
  // Settings that change the draws, from a flag or the environment: the rerun names them.
  if (s.draws.profile == SizeProfile::deep) f.rerun_command += " --profile deep";
  if (s.draws.shape_stable) f.rerun_command += " --shape-stable";
}

std::string shell_word(const std::string& text) {
  static const std::regex plain("[A-Za-z0-9_./:=+,@%-]+");
  if (std::regex_match(text, plain)) return text;
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string backend_dir_name(const std::string& backend) {
  std::string out = backend;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return out.substr(0, 120);
}

std::string_view to_string(PropertyOutcome::Status status) {
  switch (status) {
    case PropertyOutcome::Status::passed: return "passed";
    case PropertyOutcome::Status::failed: return "FAILED";
    case PropertyOutcome::Status::skipped: return "skipped";
  }
  return "?";
}

PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             const ProgressFn& progress) {
  const auto start = std::chrono::steady_clock::now();
  PropertyOutcome out;
  out.property = property.id;
  out.backend = backend.name();
  out.backend_version = backend.version();
  out.seed = settings.seed;
  const DrawContext context = draw_context(backend, settings.draws);  // once: no draw re-derives the domain
  if (auto why = skipped_before_drawing(property, context)) {
    out.status = PropertyOutcome::Status::skipped;
    out.message = *why;
    return out;
  }
  out.not_compared = outputs_not_compared(property, backend.outputs());
  RunSettings s = settings;
  s.max_size = std::clamp(s.max_size, 0, 100);
  s.shard_count = std::max(1, s.shard_count);
  const rc::Gen<Case> gen = rc::gen::exec([&property, &context] { return property.draw(context); });
  replay_stored_failures(property, backend, s, out);  // before any draw; their groups become known
  Triage triage(s.max_failures, s.known_signatures, out.backend, property.needs);
  for (PropertyFailure& f : out.failures) triage.adopt(f);
  const int total = (s.cases - s.shard_index + s.shard_count - 1) / s.shard_count;
  const int first = s.shard_index + std::max(0, s.first_draw - s.shard_index + s.shard_count - 1) / s.shard_count * s.shard_count;
  for (int k = first; k < s.cases; k += s.shard_count) {
    const rc::Shrinkable<Case> shrinkable = gen(random_for(s.seed, k), size_for(s, k));
    if (s.before_trial) s.before_trial(k, {});
    const auto draw_start = std::chrono::steady_clock::now();
    const double backend_before = backend_seconds_on_this_thread();
    Trial t = run_trial(property, backend, shrinkable);
    out.draw_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - draw_start).count();
    out.backend_seconds += backend_seconds_on_this_thread() - backend_before;
    if (s.after_draw)
      s.after_draw(k, t.kind == Trial::Kind::passed ? "passed" : t.kind == Trial::Kind::declined ? "declined" : "failed");
    ++out.drawn;
    if (t.c) {
      tally_mix(*t.c, out);
      for (const std::string& c : classes_of(*t.c)) {
        ++out.classes[c].first;
        out.classes[c].second += t.kind == Trial::Kind::declined;
      }
    }
    if (progress) progress(out.drawn, total);
    if (t.kind == Trial::Kind::passed) {
      ++out.passed;
      for (const std::string& l : t.labels) ++out.mix["label " + l];
      if (t.worst_ratio) out.worst_ratio = std::max(out.worst_ratio.value_or(0.0), *t.worst_ratio);
      if (s.on_case_passed) s.on_case_passed(*t.c);
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
    t = shrink(property, backend, s, k, shrinkable, std::move(t), f.shrinks, out.shrink_trials,
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
      if (s.on_failure) s.on_failure(f);
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

TrialResult run_draw(const PropertyDef& property, Backend& backend, const RunSettings& settings, int draw,
                     const std::vector<size_t>& path, const std::function<void(const Case&)>& before_check) {
  RunSettings s = settings;
  s.max_size = std::clamp(s.max_size, 0, 100);
  const DrawContext context = draw_context(backend, s.draws);
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
  const Trial t = run_trial(property, backend, node, before_check);
  switch (t.kind) {
    case Trial::Kind::passed: return {TrialResult::Kind::passed, ""};
    case Trial::Kind::declined: return {TrialResult::Kind::declined, t.message};
    case Trial::Kind::failed: return {TrialResult::Kind::failed, t.message};
  }
  return {};
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
                       sharding_properties})
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

}  // namespace attn_oracle
