// run_outcome.cpp: see run_outcome.hpp.
#include "attn_oracle/runner/run_outcome.hpp"

#include <regex>

#include "attn_oracle/properties/generators.hpp"
#include "attn_oracle/properties/property.hpp"

#include <algorithm>
#include <string>

namespace attn_oracle::inline runner {

std::string stored_case_word(int n) { return n == 1 ? "saved failure" : "saved failures"; }

std::vector<std::string> mix_keys(const Case& c) {
  const CoverageCell cell = op_of(c).coverage(c.payload);
  std::vector<std::string> out = {"op " + std::string(op_of(c).name())};
  if (cell.row != "-") out.push_back("mask " + cell.row);
  for (const std::string& l : cell.layouts) out.push_back("layout " + l);
  for (const std::string& d : cell.dtypes) out.push_back("dtype " + d);
  return out;
}

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

namespace {

// Whether `repro` writes a program for the cases of `property` (harness/src/repro_command.cpp,
// python/attn_oracle/repro.py): a sharding or context-parallel case replays, it has no standalone form.
bool has_standalone_reproduction(const std::string& property) {
  const PropertyDef* p = find_property(property);
  return !p || (p->needs != Capability::sharding && p->needs != Capability::context_parallel);
}

}  // namespace

void set_replay_commands(PropertyFailure& f, const RunSettings& s, const std::string& backend,
                         const std::string& property, bool this_run) {
  f.replay_command = s.program + " replay --backend " + shell_word(backend) + " " + shell_word(f.case_path);
  f.repro_command = has_standalone_reproduction(property)
                        ? s.program + " repro --backend " + shell_word(backend) + " " + shell_word(f.case_path)
                        : "";
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

std::vector<std::string> store_lines(const StoreReplay& r) {
  std::vector<std::string> lines;
  if (r.replayed > 0) {
    std::string line = std::to_string(r.replayed) + " " + stored_case_word(r.replayed) + " replayed: ";
    std::vector<std::string> parts;
    if (r.still_failing > 0) parts.push_back(std::to_string(r.still_failing) + " still " + (r.still_failing == 1 ? "fails" : "fail"));
    if (r.now_passing > 0) parts.push_back(std::to_string(r.now_passing) + " now " + (r.now_passing == 1 ? "passes" : "pass"));
    if (r.retired > 0) parts.push_back(std::to_string(r.retired) + " retired");
    for (size_t i = 0; i < parts.size(); ++i) line += (i == 0 ? "" : ", ") + parts[i];
    lines.push_back(line);
  }
  if (r.unreadable > 0)
    lines.push_back(std::to_string(r.unreadable) + " " + stored_case_word(r.unreadable) + " skipped: unreadable");
  lines.insert(lines.end(), r.notes.begin(), r.notes.end());
  return lines;
}

void merge_store_replay(StoreReplay& into, const StoreReplay& add) {
  into.replayed += add.replayed, into.still_failing += add.still_failing, into.now_passing += add.now_passing;
  into.retired += add.retired, into.unreadable += add.unreadable;
  into.notes.insert(into.notes.end(), add.notes.begin(), add.notes.end());
}

nlohmann::ordered_json store_replay_to_json(const StoreReplay& r) {
  return {{"replayed", r.replayed}, {"still_failing", r.still_failing}, {"now_passing", r.now_passing},
          {"retired", r.retired},   {"unreadable", r.unreadable},       {"notes", r.notes}};
}

StoreReplay store_replay_from_json(const nlohmann::json& j) {
  StoreReplay r;
  r.replayed = j.value("replayed", 0), r.still_failing = j.value("still_failing", 0);
  r.now_passing = j.value("now_passing", 0), r.retired = j.value("retired", 0), r.unreadable = j.value("unreadable", 0);
  r.notes = j.value("notes", std::vector<std::string>{});
  return r;
}

void rank_failures(PropertyOutcome& o, int shown) {
  // Every failure in a cluster: those a crashed child or the supervisor reported have none yet.
  for (PropertyFailure& f : o.failures) {
    const auto known = [&] {
      return std::any_of(o.clusters.begin(), o.clusters.end(), [&](const FailureCluster& c) { return c.key == f.cluster; });
    };
    if (f.cluster.empty() || !known()) {
      FailureCluster c = cluster_of_message(f.message, f.draw);
      if (!f.cluster.empty()) c.key = f.cluster;
      c.counterexample = f.case_path;
      f.cluster = c.key;
      merge_clusters(o.clusters, {c});
    }
    for (FailureCluster& c : o.clusters)
      if (c.key == f.cluster && c.counterexample.empty()) c.counterexample = f.case_path, c.example = f.message;
  }
  std::stable_sort(o.clusters.begin(), o.clusters.end(), [](const FailureCluster& a, const FailureCluster& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.draws != b.draws) return a.draws > b.draws;
    return a.first_draw < b.first_draw;
  });
  std::vector<PropertyFailure> kept;
  for (FailureCluster& c : o.clusters) {
    c.shown = false;
    if (static_cast<int>(kept.size()) >= shown) continue;
    auto f = std::find_if(o.failures.begin(), o.failures.end(), [&](const PropertyFailure& g) { return g.cluster == c.key; });
    if (f == o.failures.end()) continue;
    c.shown = true;
    kept.push_back(*f);
  }
  o.failures = std::move(kept);
  o.failure_summary.clear();
  if (o.clusters.empty() || o.clusters.front().rank == FailureRank::wrong_on_ordinary_input) return;
  const auto crashes = std::count_if(o.clusters.begin(), o.clusters.end(),
                                     [](const FailureCluster& c) { return c.rank == FailureRank::crash; });
  const auto classes = static_cast<long>(o.clusters.size()) - crashes;
  std::string what;
  if (classes > 0)
    what = std::to_string(classes) + (classes == 1 ? " input class" : " input classes") + " rejected or answered wrongly";
  if (crashes > 0)
    what += (what.empty() ? "" : "; ") + std::to_string(crashes) + (crashes == 1 ? " crash or hang" : " crashes or hangs");
  o.failure_summary = what + "; no wrong answer on ordinary inputs in " + std::to_string(o.judged()) +
                      " judged draws";
}

std::vector<TriageEntry> triage_entries(const PropertyOutcome& o) {
  std::vector<TriageEntry> out;
  if (o.clusters.empty()) {
    for (const PropertyFailure& f : o.failures) out.push_back({"", &f, "", ""});
    return out;
  }
  int n = 0;
  for (const FailureCluster& c : o.clusters) {
    TriageEntry e{"[" + std::to_string(++n) + "] " + cluster_line(c), nullptr, c.example, c.decline};
    for (const PropertyFailure& f : o.failures)
      if (c.shown && f.cluster == c.key) e.failure = &f;
    out.push_back(std::move(e));
  }
  return out;
}

std::string triage_cost_line(const PropertyOutcome& o) {
  if (o.clusters.empty()) return "";
  const size_t shown = o.failures.size();
  std::string line = std::to_string(o.failed) + (o.failed == 1 ? " failing draw" : " failing draws") + " in " +
                     std::to_string(o.clusters.size()) + (o.clusters.size() == 1 ? " cluster" : " clusters") + "; " +
                     std::to_string(o.shrunk) + " shrunk (" + std::to_string(o.shrink_trials) + " trials)";
  if (o.clusters.size() > shown) line += ", " + std::to_string(o.clusters.size() - shown) + " shown in one line";
  return line;
}

void merge_outcome(PropertyOutcome& into, const PropertyOutcome& add) {
  into.drawn += add.drawn, into.passed += add.passed, into.declined += add.declined, into.failed += add.failed;
  for (const auto& [k, n] : add.decline_reasons) into.decline_reasons[k] += n;
  for (const auto& [k, example] : add.decline_examples) into.decline_examples.emplace(k, example);
  for (const auto& [k, c] : add.classes) into.classes[k].first += c.first, into.classes[k].second += c.second;
  for (const auto& [k, n] : add.mix) into.mix[k] += n;
  for (const PropertyFailure& f : add.failures)
    if (std::none_of(into.failures.begin(), into.failures.end(),
                     [&](const PropertyFailure& g) { return g.signature == f.signature; }))
      into.failures.push_back(f);
  merge_clusters(into.clusters, add.clusters);
  into.shrunk += add.shrunk, into.shrink_trials += add.shrink_trials;
  if (into.not_compared.empty()) into.not_compared = add.not_compared;
  if (add.worst_ratio) into.worst_ratio = std::max(into.worst_ratio.value_or(0.0), *add.worst_ratio);
  into.largest.rows = std::max(into.largest.rows, add.largest.rows);
  into.largest.tokens = std::max(into.largest.tokens, add.largest.tokens);
  into.largest.devices = std::max(into.largest.devices, add.largest.devices);
  into.seconds += add.seconds;
  into.draw_seconds += add.draw_seconds, into.backend_seconds += add.backend_seconds;
  merge_store_replay(into.store, add.store);
  if (into.message.empty()) into.message = add.message;
}

}  // namespace attn_oracle::runner
