// check_record_test.cpp: what a check notes besides its verdict reaches the
// run's outcome through the CheckRecord it is handed (property_check.hpp), on
// every path that notes: the tolerance checks of the attention properties and
// of the K/V buffer's state machine (its SUT carries the record), the labels of
// the independent rules, the time inside the backend's calls. A check that
// notes nothing leaves the outcome's worst ratio empty.
#include <gtest/gtest.h>

#include "attn_oracle/backends/production_backends.hpp"
#include "attn_oracle/harness/settings.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle {
namespace {

std::unique_ptr<Backend> cpu_backend() {
  register_production_backends();
  return BackendRegistry::instance().make("cpu");
}

PropertyOutcome run_on_cpu(const std::string& id, int cases) {
  auto cpu = cpu_backend();
  RunSettings s = default_run_settings();
  s.cases = cases;
  return run_property(*find_property(id), *cpu, s);
}

TEST(CheckRecord, TheToleranceChecksAndTheBackendsTimeReachTheOutcome) {
  for (const char* id : {"attention/matchesReference", "kv_buffer/stepsMatchModel"}) {
    const PropertyOutcome o = run_on_cpu(id, 10);
    ASSERT_EQ(o.status, PropertyOutcome::Status::passed) << id;
    ASSERT_TRUE(o.worst_ratio.has_value()) << id << ": no tolerance check was noted";
    EXPECT_GT(*o.worst_ratio, 0.0) << id;
    EXPECT_LE(*o.worst_ratio, 1.0) << id;
  }
  EXPECT_GT(run_on_cpu("attention/matchesReference", 10).backend_seconds, 0.0);
}

TEST(CheckRecord, TheIndependentRulesLabelsReachTheMix) {
  const PropertyOutcome o = run_on_cpu("metadata/arbitraryInputsMatchReference", 20);
  int labelled = 0;
  for (const auto& [key, n] : o.mix) labelled += key.rfind("label ", 0) == 0 ? n : 0;
  EXPECT_GE(labelled, o.passed) << "every passing draw is labelled valid or with its code";
}

TEST(CheckRecord, WhatACheckNotesIsWhatTheRunReports) {
  auto cpu = cpu_backend();
  const PropertyDef& drawn = *find_property("metadata/matchesReference");
  PropertyDef noting = drawn;
  noting.check = [](Backend&, const Case&, CheckRecord& record) {
    ToleranceCheck worse, better;
    worse.ratio = 0.75, better.ratio = 0.25;
    record.note({better, worse});
    record.classify(true, "noted");
    record.classify(false, "not noted");
  };
  PropertyDef silent = drawn;
  silent.check = [](Backend&, const Case&, CheckRecord&) {};
  RunSettings s = default_run_settings();
  s.cases = 5;
  const PropertyOutcome o = run_property(noting, *cpu, s);
  EXPECT_EQ(o.worst_ratio, 0.75);
  EXPECT_EQ(o.mix.count("label noted") ? o.mix.at("label noted") : 0, 5);
  EXPECT_EQ(o.mix.count("label not noted"), 0u);
  EXPECT_EQ(run_property(silent, *cpu, s).worst_ratio, std::nullopt);
}

}  // namespace
}  // namespace attn_oracle
