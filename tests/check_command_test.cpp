// check_command_test.cpp: `attn-oracle check` in process (tools/check.hpp) on the
// reference and on a planted metadata bug: the report files are byte-identical
// for the same seed, an unexpected failure exits 1, the skips and xfails lists
// turn failures into skipped / xfail and a listed pass into XPASS (exit 0),
// entries that match nothing are warned about, and SIGINT stops after the
// running property with a partial report marked interrupted (exit 130).
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "check.hpp"
#include "planted/planted_backends.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::temp_directory_path() / "attn_oracle_check_command_test";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path write_list(const std::string& name, const std::string& text) {
  fs::create_directories(kDir);
  std::ofstream(kDir / name) << text;
  return kDir / name;
}

// The first planted metadata bug, registered under its backend's name.
const planted::PlantedBug& planted_bug() {
  static const planted::PlantedBug bug = [] {
    for (planted::PlantedBug& b : planted::metadata_bugs())
      if (b.property.rfind("metadata/", 0) == 0) {
        BackendRegistry::instance().add(b.make()->name(), b.make);
        return b;
      }
    return planted::PlantedBug{};
  }();
  return bug;
}

std::string planted_name() { return planted_bug().make()->name(); }

CheckOptions options(const std::string& backend, const std::string& report) {
  CheckOptions o;
  o.backend = backend;
  o.filter = "metadata/";
  o.cases = 10;
  o.seed = 7;
  o.report_dir = (kDir / report).string();
  return o;
}

json report_json(const std::string& report) { return json::parse(slurp(kDir / report / "conformance.json")); }

TEST(CheckCommand, ReportsAreByteIdenticalForTheSameSeed) {
  ASSERT_FALSE(planted_bug().property.empty());
  for (const std::string& backend : {std::string("reference"), planted_name()}) {
    run_check_command(options(backend, "a"));
    run_check_command(options(backend, "b"));
    for (const char* file : {"conformance.md", "conformance.json"})
      EXPECT_EQ(slurp(kDir / "a" / file), slurp(kDir / "b" / file)) << backend << " " << file;
  }
}

TEST(CheckCommand, ReportHoldsVersionsSettingsAndResults) {
  EXPECT_EQ(run_check_command(options("reference", "ref")), 0);
  const json j = report_json("ref");
  EXPECT_EQ(j["schema"], "attn-oracle.conformance/1");
  for (const char* k : {"attn-oracle", "compiler", "CUDA", "cuDNN", "device"}) EXPECT_TRUE(j["versions"].contains(k)) << k;
  EXPECT_EQ(j["settings"]["seed"], 7);
  EXPECT_EQ(j["settings"]["max_success"], 10);
  ASSERT_FALSE(j["results"].empty());
  for (const json& r : j["results"]) EXPECT_EQ(r["status"], "passed") << r["id"];
  EXPECT_FALSE(j["interrupted"]);
}

TEST(CheckCommand, UnexpectedFailureExitsOneWithItsCounterexample) {
  const std::string property = planted_bug().property;
  EXPECT_EQ(run_check_command(options(planted_name(), "fail")), 1);
  bool found = false;
  const json report = report_json("fail");
  for (const json& r : report["results"])
    if (r["property"] == property) {
      found = true;
      EXPECT_EQ(r["status"], "FAILED");
      EXPECT_TRUE(fs::exists(r["counterexample"].get<std::string>()));
      EXPECT_NE(r["replay"].get<std::string>().find("attn-oracle replay --backend " + planted_name()), std::string::npos);
    }
  EXPECT_TRUE(found) << property;
}

TEST(CheckCommand, ListsSkipExpectFailuresAndWarn) {
  const std::string property = planted_bug().property;
  CheckOptions o = options("all", "lists");
  o.xfails_file =
      write_list("xfails.txt", "# known bugs\n" + planted_name() + "/metadata/\nreference/" + property + "  # a pass\n").string();
  o.skips_file = write_list("skips.txt", "cpu/\nnosuch/backend\n").string();
  EXPECT_EQ(run_check_command(o), 0);
  const json j = report_json("lists");
  int xfail = 0;
  for (const json& r : j["results"]) {
    const std::string id = r["id"];
    if (id.rfind("cpu/", 0) == 0) {
      EXPECT_EQ(r["status"], "skipped") << id;
    } else if (id == "reference/" + property) {
      EXPECT_EQ(r["status"], "XPASS") << id;
    } else if (id == planted_name() + "/" + property) {
      EXPECT_EQ(r["status"], "xfail") << id;
    }
    xfail += r["status"] == "xfail";
  }
  EXPECT_GE(xfail, 1);
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"].dump();
  EXPECT_NE(j["warnings"][0].get<std::string>().find("nosuch/backend matches no test"), std::string::npos);
}

// A metadata backend that presses Ctrl-C once, during its first case.
class InterruptingBackend final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "interrupting"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    if (!pressed_) std::raise(SIGINT);
    pressed_ = true;
    return make_reference_backend()->metadata()->metadata(batch);
  }

 private:
  bool pressed_ = false;
};

TEST(CheckCommand, SigintStopsAfterTheRunningPropertyAndWritesAPartialReport) {
  BackendRegistry::instance().add("interrupting", [] { return std::make_unique<InterruptingBackend>(); });
  EXPECT_EQ(run_check_command(options("interrupting", "interrupted")), 130);
  const json j = report_json("interrupted");
  EXPECT_TRUE(j["interrupted"]);
  EXPECT_EQ(j["results"].size(), 1u);
  EXPECT_NE(slurp(kDir / "interrupted" / "conformance.md").find("Interrupted"), std::string::npos);
  EXPECT_EQ(std::signal(SIGINT, SIG_DFL), SIG_DFL);  // the previous handler is back
}

}  // namespace
}  // namespace attn_oracle
