// property_runner.cpp: the driver behind every property run (property_runner.hpp)
// and the check of one case, shared with replay.
#include "attn_oracle/property_runner.hpp"

#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include <rapidcheck.h>

#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle {
namespace {

thread_local std::vector<std::string>* current_labels = nullptr;

// ------------------------------------------------------------------ one trial
struct Trial {
  enum class Kind { passed, failed, declined };
  Kind kind = Kind::passed;
  std::string message;  // failed: the check's message; declined: the reason
  Case c;
  std::vector<std::string> labels;
};

// Draws the shrinkable's case and checks it. A draw that throws anything but a
// decline is a failure of the property too (a generator or backend bug shows).
Trial run_trial(const PropertyDef& p, Backend& backend, const rc::Shrinkable<Case>& shrinkable) {
  Trial t;
  current_labels = &t.labels;
  try {
    t.c = shrinkable.value();
    p.check(backend, t.c);
  } catch (const PropertyFailure& f) {
    t.kind = Trial::Kind::failed, t.message = f.message;
  } catch (const CaseDeclined& d) {
    t.kind = Trial::Kind::declined, t.message = d.reason;
  } catch (const rc::GenerationFailure& g) {
    t.kind = Trial::Kind::declined, t.message = std::string("generation failed: ") + g.what();
  } catch (const std::exception& e) {
    t.kind = Trial::Kind::failed, t.message = std::string("exception: ") + e.what();
  } catch (...) {
    t.kind = Trial::Kind::failed, t.message = "an exception that is not a std::exception";
  }
  current_labels = nullptr;
  return t;
}

// The first shrink that still fails, again and again (RapidCheck's strategy).
Trial shrink(const PropertyDef& p, Backend& backend, rc::Shrinkable<Case> best, Trial failing, int& steps) {
  auto shrinks = best.shrinks();
  while (auto next = shrinks.next()) {
    Trial t = run_trial(p, backend, *next);
    if (t.kind != Trial::Kind::failed) continue;
    best = *next;
    failing = std::move(t);
    shrinks = best.shrinks();
    ++steps;
  }
  return failing;
}

// Sizes spread evenly over [0, max_size], the largest always used (RapidCheck's rule).
int size_for(const RunSettings& s, int i) {
  const int sizes = s.max_size + 1;
  const int regular = (s.max_success / sizes) * sizes;
  if (i < regular) return i % sizes;
  const int rest = s.max_success - regular;
  return rest == 1 ? 0 : ((i % sizes) * s.max_size) / (rest - 1);
}

std::string file_stem(const std::string& id) {
  std::string out = id;
  for (char& c : out)
    if (c == '/') c = '.';
  return out;
}

void save_counterexample(PropertyOutcome& out, const RunSettings& settings) {
  Case& c = *out.counterexample;
  c.note = "counterexample of " + out.property + " on backend " + out.backend + " (seed " +
           std::to_string(settings.seed) + ", " + std::to_string(out.cases) + " cases, " +
           std::to_string(out.shrinks) + " shrinks): " + out.message;
  const std::filesystem::path path =
      std::filesystem::path(settings.failures_dir) / out.backend / (file_stem(out.property) + ".case.json");
  if (write_case_file(path.string(), c)) out.case_path = path.string();
  out.replay_command = "attn-oracle replay --backend " + out.backend + " " + out.case_path;
}

// "max_success=200 seed=7": RapidCheck's RC_PARAMS syntax; other keys are RapidCheck's own.
std::optional<uint64_t> rc_param(const std::string& name) {
  const char* params = std::getenv("RC_PARAMS");
  if (!params) return std::nullopt;
  std::istringstream words(params);
  for (std::string word; words >> word;)
    if (word.rfind(name + "=", 0) == 0) try {
        return std::stoull(word.substr(name.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
  return std::nullopt;
}

}  // namespace

void fail_case(const std::string& message) { throw PropertyFailure{message}; }
void decline_case(const std::string& reason) { throw CaseDeclined{reason}; }

void classify(bool holds, const std::string& label) {
  if (holds && current_labels) current_labels->push_back(label);
}

std::string_view op_name(const Case& c) { return op_of(c).name(); }

Case with_drawn(Case c, nlohmann::json drawn) {
  if (!c.property) c.property = PropertyRecord{};
  c.property->drawn = std::move(drawn);
  return c;
}

std::string_view to_string(PropertyOutcome::Status status) {
  switch (status) {
    case PropertyOutcome::Status::passed: return "passed";
    case PropertyOutcome::Status::failed: return "FAILED";
    case PropertyOutcome::Status::skipped: return "skipped";
    case PropertyOutcome::Status::gave_up: return "gave up";
  }
  return "?";
}

RunSettings default_run_settings(uint64_t seed_if_unset) {
  RunSettings s;
  if (auto n = rc_param("max_success")) s.max_success = static_cast<int>(*n);
  if (auto n = rc_param("max_size")) s.max_size = static_cast<int>(std::min<uint64_t>(*n, 100));
  s.seed = rc_param("seed").value_or(seed_if_unset != 0 ? seed_if_unset : std::random_device{}());
  const char* dir = std::getenv("ATTN_ORACLE_FAILURES_DIR");
  s.failures_dir = dir && *dir ? dir : ATTN_ORACLE_DEFAULT_FAILURES_DIR;
  return s;
}

PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             const ProgressFn& progress) {
  PropertyOutcome out;
  out.property = property.id;
  out.backend = backend.name();
  for (std::optional<Capability> needed : {std::optional<Capability>(property.needs), property.also_needs}) {
    if (!needed || backend.has(*needed)) continue;
    out.status = PropertyOutcome::Status::skipped;
    out.message = "backend " + out.backend + " lacks the " + std::string(to_string(*needed)) + " capability";
    return out;
  }
  const RunSettings s = [&] {
    RunSettings r = settings;
    r.max_size = std::clamp(r.max_size, 0, 100);
    return r;
  }();
  const rc::Gen<Case> gen = rc::gen::exec([&property, &backend] { return property.draw(backend); });
  ToleranceRatioSink ratios;
  rc::Random random(s.seed);
  int recent_declines = 0;
  while (out.cases < s.max_success) {
    const int size = size_for(s, out.cases) + recent_declines / 10;
    const rc::Shrinkable<Case> shrinkable = gen(random.split(), size);
    Trial t = run_trial(property, backend, shrinkable);
    if (t.kind == Trial::Kind::passed) {
      ++out.cases, recent_declines = 0;
      for (const std::string& l : t.labels) ++out.labels[l];
      if (s.on_case_passed) s.on_case_passed(t.c);
      if (progress) progress(out.cases, s.max_success);
      continue;
    }
    if (t.kind == Trial::Kind::declined) {
      ++recent_declines;
      if (++out.declined > 10 * s.max_success) {
        out.status = PropertyOutcome::Status::gave_up;
        out.message = "gave up after " + std::to_string(out.declined) + " declined draws; the last: " + t.message;
        break;
      }
      continue;
    }
    t = shrink(property, backend, shrinkable, std::move(t), out.shrinks);
    out.status = PropertyOutcome::Status::failed;
    ++out.cases;
    out.message = t.message;
    out.counterexample = std::move(t.c);
    PropertyRecord& record = out.counterexample->property ? *out.counterexample->property
                                                          : out.counterexample->property.emplace();
    record.id = property.id, record.backend = backend.name(), record.backend_version = backend.version();
    record.seed = s.seed;
    out.rerun_command = "attn-oracle check --backend " + out.backend + " --filter " + property.id + " --seed " +
                        std::to_string(s.seed) + " --cases " + std::to_string(s.max_success);
    save_counterexample(out, s);
    break;
  }
  out.worst_ratio = ratios.worst();
  return out;
}

Judgement check_property(const PropertyDef& property, Backend& backend, const Case& c) {
  Judgement j;
  for (std::optional<Capability> needed : {std::optional<Capability>(property.needs), property.also_needs})
    if (needed && !backend.has(*needed))
      return j.skip("backend " + backend.name() + " lacks the " + std::string(to_string(*needed)) + " capability"), j;
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
    for (auto* area : {attention_properties, small_seq_properties, kv_buffer_properties, sharding_properties})
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
