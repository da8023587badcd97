// property_runner.cpp: RapidCheck driver behind every property run.
#include "attn_oracle/property_runner.hpp"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <rapidcheck.h>

#include "attn_oracle/reference/tolerance.hpp"

namespace attn_oracle {
namespace {

// Counts passed cases for the progress line (discarded draws are not cases run).
class ProgressListener final : public rc::detail::TestListener {
 public:
  ProgressListener(const ProgressFn& fn, int total) : fn_(fn), total_(total) {}
  void onTestCaseFinished(const rc::detail::CaseDescription& d) override {
    if (fn_ && d.result.type == rc::detail::CaseResult::Type::Success) fn_(++done_, total_);
  }
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

 private:
  const ProgressFn& fn_;
  int total_, done_ = 0;
};

std::string file_stem(const std::string& id) {
  std::string out = id;
  for (char& c : out)
    if (c == '/') c = '.';
  return out;
}

std::string reproduce_line(const std::string& test_id, const rc::detail::Reproduce& reproduce) {
  rc::detail::Configuration config;
  config.reproduce[test_id] = reproduce;
  return "RC_PARAMS=\"" + rc::detail::configToMinimalString(config) + "\"";
}

void save_counterexample(PropertyOutcome& out, const RunSettings& settings) {
  if (!out.counterexample) return;
  Case& c = *out.counterexample;
  c.note = "counterexample of " + out.property + " on backend " + out.backend + " (seed " +
           std::to_string(settings.seed) + "); rerun the shrunk case with " + out.reproduce_params;
  const std::filesystem::path path = std::filesystem::path(settings.failures_dir) / out.backend /
                                     (file_stem(out.property) + ".case.json");
  if (write_case_file(path.string(), c)) out.case_path = path.string();
  out.replay_command = "attn-oracle replay --backend " + out.backend + " " + out.case_path;
}

}  // namespace

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
  const rc::detail::TestParams& p = rc::detail::configuration().testParams;
  s.max_success = p.maxSuccess;
  s.max_size = std::min(p.maxSize, 100);
  s.seed = p.seed;
  const char* params = std::getenv("RC_PARAMS");
  if (seed_if_unset != 0 && (!params || std::string(params).find("seed=") == std::string::npos)) s.seed = seed_if_unset;
  const char* dir = std::getenv("ATTN_ORACLE_FAILURES_DIR");
  s.failures_dir = dir && *dir ? dir : ATTN_ORACLE_DEFAULT_FAILURES_DIR;
  return s;
}

PropertyOutcome run_property(const PropertyDef& property, Backend& backend,
                             const RunSettings& settings, const ProgressFn& progress) {
  PropertyOutcome out;
  out.property = property.id;
  out.backend = backend.name();
  for (std::optional<Capability> needed : {std::optional<Capability>(property.needs), property.also_needs}) {
    if (!needed || backend.has(*needed)) continue;
    out.status = PropertyOutcome::Status::skipped;
    out.message = "backend " + out.backend + " lacks the " + std::string(to_string(*needed)) + " capability";
    return out;
  }
  CaseRecorder recorder;
  auto testable = [&] {
    recorder.clear_current();
    try {
      property.body(backend, recorder);
      if (settings.on_case_passed && recorder.current_case()) settings.on_case_passed(*recorder.current_case());
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Failure) recorder.keep_current_as_failing();
      throw;
    } catch (const rc::GenerationFailure&) {
      throw;
    } catch (...) {
      recorder.keep_current_as_failing();
      throw;
    }
  };
  rc::detail::TestMetadata metadata;
  metadata.id = out.backend + "/" + property.id;
  metadata.description = property.summary;
  rc::detail::TestParams params;
  params.maxSuccess = settings.max_success;
  params.maxSize = std::min(settings.max_size, 100);
  params.seed = settings.seed;
  ProgressListener listener(progress, settings.max_success);
  ToleranceRatioSink ratios;
  const rc::detail::TestResult result = rc::detail::checkProperty(
      rc::detail::toProperty(testable), metadata, params, listener,
      rc::detail::configuration().reproduce);

  if (result.is<rc::detail::SuccessResult>()) {
    out.cases = result.get<rc::detail::SuccessResult>().numSuccess;
  } else if (result.is<rc::detail::FailureResult>()) {
    const auto& failure = result.get<rc::detail::FailureResult>();
    out.status = PropertyOutcome::Status::failed;
    out.cases = failure.numSuccess + 1;
    std::ostringstream os;
    rc::detail::printResultMessage(result, os);
    out.message = os.str();
    out.counterexample = recorder.failing();
    out.reproduce_params = reproduce_line(metadata.id, failure.reproduce);
    save_counterexample(out, settings);
  } else if (result.is<rc::detail::GaveUpResult>()) {
    out.status = PropertyOutcome::Status::gave_up;
    out.cases = result.get<rc::detail::GaveUpResult>().numSuccess;
    out.message = result.get<rc::detail::GaveUpResult>().description;
  } else {
    out.status = PropertyOutcome::Status::failed;
    out.message = result.get<rc::detail::Error>().description;
  }
  out.worst_ratio = ratios.worst();
  return out;
}

const std::vector<PropertyDef>& all_properties() {
  static const std::vector<PropertyDef> properties = [] {
    std::vector<PropertyDef> all = metadata_properties();
    for (PropertyDef& p : attention_properties()) all.push_back(std::move(p));
    for (PropertyDef& p : small_seq_properties()) all.push_back(std::move(p));
    for (PropertyDef& p : kv_buffer_properties()) all.push_back(std::move(p));
    for (PropertyDef& p : sharding_properties()) all.push_back(std::move(p));
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
