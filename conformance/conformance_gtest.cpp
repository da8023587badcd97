// conformance_gtest.cpp: every property x every registered backend as one
// GoogleTest each, named Conformance/Property.Check/<backend>__<property>.
//
// Linked as an object library (attn_oracle::conformance) so that a vendoring
// project gets these tests by linking it and registering its backends with
// ATTN_ORACLE_REGISTER_BACKEND; the parameters are read from the registry when
// GoogleTest initialises, after every static registration has run.
// A missing capability is a skip with the reason; a failure prints the shrunk
// counterexample, its case file and the replay command.
#include <gtest/gtest.h>

#include "attn_oracle/property_runner.hpp"

namespace attn_oracle {
namespace {

struct ConformanceParam {
  std::string backend, property;
};

std::vector<ConformanceParam> conformance_params() {
  std::vector<ConformanceParam> out;
  for (const std::string& backend : BackendRegistry::instance().names())
    for (const PropertyDef& p : all_properties()) out.push_back({backend, p.id});
  return out;
}

std::string test_name(const testing::TestParamInfo<ConformanceParam>& info) {
  std::string name = info.param.backend + "__" + info.param.property;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

void PrintTo(const ConformanceParam& p, std::ostream* os) { *os << p.property << " on " << p.backend; }

class Property : public testing::TestWithParam<ConformanceParam> {};

TEST_P(Property, Check) {
  std::unique_ptr<Backend> backend = BackendRegistry::instance().make(GetParam().backend);
  ASSERT_NE(backend, nullptr);
  const PropertyDef* property = find_property(GetParam().property);
  ASSERT_NE(property, nullptr);
  const PropertyOutcome o = run_property(*property, *backend, default_run_settings());
  if (o.status == PropertyOutcome::Status::skipped) GTEST_SKIP() << o.message;
  EXPECT_EQ(o.status, PropertyOutcome::Status::passed)
      << o.message << "\ncounterexample: " << o.case_path << "\nreplay: " << o.replay_command
      << "\nrerun: " << o.rerun_command;
  RecordProperty("cases", o.cases);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Property);
INSTANTIATE_TEST_SUITE_P(Conformance, Property, testing::ValuesIn(conformance_params()), test_name);

}  // namespace
}  // namespace attn_oracle
