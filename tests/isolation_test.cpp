// isolation_test.cpp: a backend that crashes or hangs is reported, not fatal
// (harness/isolation.hpp). This binary is built like a vendor's conformance
// binary (its main is attn_oracle::conformance_main, which speaks the child
// verbs), with backends of its own registered:
//  - aborting: the reference's metadata, but an abort on any batch of two or
//    more rows (a crash in one input class; abort, not a segfault, because a
//    sanitizer build turns SIGSEGV into its own report and exit status 1);
//  - hanging: the reference's metadata, but it never returns on a sliding window;
//  - aborting_and_off_by_one: the abort, and a wrong last cu_seqlens_kv on one row;
//  - reference.
// A crash fails its property with the case it crashed on, shrunk, written, and a
// replay line that crashes again; a hang fails after the case time limit; the
// property goes on drawing after a crash and the run with the next property; an
// isolated run counts what an in-process run counts, with the run's draw
// settings (given to the child on its command line).
#include <chrono>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/harness/isolation.hpp"
#include "attn_oracle/harness/program.hpp"
#include "attn_oracle/runner/property_runner.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/model/validate.hpp"
#include "attn_oracle/harness/settings.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;

class Aborting final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "aborting"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    if (auto l = validate_shapes(batch); l && l->rows() >= 2) std::abort();
    return make_reference_backend()->metadata()->metadata(batch);
  }
};

class Hanging final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "hanging"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    while (batch.window.left >= 0 || batch.window.right >= 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    return make_reference_backend()->metadata()->metadata(batch);
  }
};

// Two bugs: the crash of Aborting, and a last cu_seqlens_kv one too large
// on a one-row batch of two or more documents.
class AbortingAndOffByOne final : public Backend, MetadataCapability {
 public:
  std::string name() const override { return "aborting_and_off_by_one"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    if (auto l = validate_shapes(batch); l && l->rows() >= 2) std::abort();
    Expected<Metadata> md = make_reference_backend()->metadata()->metadata(batch);
    if (!md || md.value().cu_seqlens_kv.size() <= 2) return md;
    Metadata bad = md.value();
    ++bad.cu_seqlens_kv.back();
    return bad;
  }
};

ATTN_ORACLE_REGISTER_BACKEND(Aborting);
ATTN_ORACLE_REGISTER_BACKEND(AbortingAndOffByOne);
ATTN_ORACLE_REGISTER_BACKEND(Hanging);
const bool kReference = (register_reference_backend(), true);

RunSettings settings(const std::string& dir) {
  RunSettings s = default_run_settings();
  s.cases = 40;
  s.failures_dir = (fs::temp_directory_path() / "attn_oracle_isolation_test" / dir).string();
  s.program = this_program();
  s.use_store = false;  // the same result every run (this binary's main turns the store on)
  return s;
}

PropertyOutcome isolated(const std::string& backend, const std::string& property, const RunSettings& s,
                         double timeout = 60) {
  auto b = BackendRegistry::instance().make(backend);
  return run_property_isolated(*find_property(property), *b, s, IsolationSettings{s.program, timeout});
}

TEST(Isolation, ACrashFailsThePropertyWithTheShrunkCaseItCrashedOn) {
  const PropertyOutcome o = isolated("aborting", "metadata/matchesReference", settings("crash"));
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  ASSERT_EQ(o.failures.size(), 1u);
  const PropertyFailure& f = o.failures[0];
  EXPECT_NE(f.message.find("SIGABRT"), std::string::npos) << f.message;
  const Expected<Case> c = read_case_file(f.case_path);
  ASSERT_TRUE(c.ok()) << f.case_path;
  const BatchLayout l = validate_shapes(c->as<MetadataCase>()->batch).value();
  EXPECT_EQ(l.rows(), 2);  // shrunk to the smallest batch that still crashes
  EXPECT_LE(std::max(l.q_len, l.kv_len), 2);
  EXPECT_GT(f.shrinks, 0);
  // The printed replay line, run as printed, crashes the same way.
  const int status = std::system((f.replay_command + " > /dev/null 2>&1").c_str());
  EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 128)) << f.replay_command;
}

// A backend that cannot even be made in an isolated child (its construction aborts
// there: a library that fails to initialise in a fresh process). The test body makes it.
bool made_in_the_test = false;
class DiesInAChild final : public Backend, MetadataCapability {
 public:
  DiesInAChild() {
    if (!made_in_the_test) std::abort();
  }
  std::string name() const override { return "dies_in_a_child"; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return make_reference_backend()->metadata()->metadata(batch); }
};
const bool kDiesInAChild = BackendRegistry::instance().add("dies_in_a_child", [] {
  return std::unique_ptr<Backend>(new DiesInAChild());
});

// A child that dies before saying anything is no case's crash: the property fails at
// once, saying so, rather than shrinking a "crash" that every case has (it did, one
// child per shrink step: a run of minutes).
TEST(Isolation, AChildThatDiesBeforeItsFirstDrawFailsThePropertyAtOnce) {
  made_in_the_test = true;
  auto b = BackendRegistry::instance().make("dies_in_a_child");
  const RunSettings s = settings("no_child");
  const auto start = std::chrono::steady_clock::now();
  const PropertyOutcome o = run_property_isolated(*find_property("metadata/matchesReference"), *b, s,
                                                  IsolationSettings{s.program, 60});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_EQ(o.status, PropertyOutcome::Status::failed);
  EXPECT_TRUE(o.failures.empty());
  EXPECT_NE(o.message.find("ended before its first draw (SIGABRT"), std::string::npos) << o.message;
}

// After a crash a fresh child goes on from the next draw: the wrong value is
// reported too, and every draw is counted.
TEST(Isolation, APropertyThatCrashedGoesOnDrawingAndReportsTheOtherBug) {
  const RunSettings s = settings("crash_and_bug");
  const PropertyOutcome o = isolated("aborting_and_off_by_one", "metadata/matchesReference", s);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  ASSERT_EQ(o.failures.size(), 2u) << o.failures[0].message;
  std::set<std::string> kinds;
  for (const PropertyFailure& f : o.failures)
    kinds.insert(f.message.find("SIGABRT") != std::string::npos      ? "crash"
                 : f.message.find("cu_seqlens_kv") != std::string::npos ? "off by one"
                                                                         : f.message);
  EXPECT_EQ(kinds, (std::set<std::string>{"crash", "off by one"}));
  EXPECT_EQ(o.drawn, s.cases);
  EXPECT_EQ(o.passed + o.declined + o.failed, o.drawn);
  EXPECT_NE(o.failures[0].case_path, o.failures[1].case_path);
}

// A stored case that crashes the child replaying it is a failure from the
// store, not shrunk again; a fresh child then draws without replaying.
TEST(Isolation, AStoredCrashIsAFailureFromTheStoreAndTheDrawsGoOn) {
  RunSettings s = settings("stored_crash");
  fs::remove_all(s.failures_dir);
  s.use_store = true;
  ASSERT_EQ(isolated("aborting", "metadata/matchesReference", s).status, PropertyOutcome::Status::failed);
  const PropertyOutcome o = isolated("aborting", "metadata/matchesReference", s);
  ASSERT_EQ(o.failures.size(), 1u);
  EXPECT_TRUE(o.failures[0].from_store);
  EXPECT_NE(o.failures[0].message.find("SIGABRT"), std::string::npos) << o.failures[0].message;
  EXPECT_EQ(o.store.replayed, 1);
  EXPECT_EQ(o.store.still_failing, 1);
  EXPECT_EQ(o.drawn, s.cases);
}

TEST(Isolation, AHangFailsThePropertyAfterTheCaseTimeLimit) {
  const PropertyOutcome o = isolated("hanging", "metadata/matchesReference", settings("hang"), /*timeout=*/1);
  ASSERT_EQ(o.status, PropertyOutcome::Status::failed);
  ASSERT_FALSE(o.failures.empty());
  EXPECT_NE(o.failures[0].message.find("no answer within 1 s"), std::string::npos) << o.failures[0].message;
  const Expected<Case> c = read_case_file(o.failures[0].case_path);
  ASSERT_TRUE(c.ok());
  const Window w = c->as<MetadataCase>()->batch.window;
  EXPECT_TRUE(w.left >= 0 || w.right >= 0);
}

// The other properties still run after one crashed.
TEST(Isolation, TheRunGoesOnAfterACrash) {
  CheckOptions o;
  o.backend = "aborting";
  o.filter = "metadata/";
  // Few, small draws and one failure a property: every crash is shrunk over
  // child processes, which start slowly under sanitizers. The crash shrink of
  // raw arbitrary inputs walks a long way down (every integer halved in turn),
  // so that property is skipped, which the run must count too.
  o.cases = 10;
  o.max_failures = 1;
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_isolation_test";
  fs::create_directories(dir);
  o.skips_file = (dir / "skips.txt").string();
  std::ofstream(o.skips_file) << "metadata/arbitraryInputsMatchReference  # a long crash shrink\n";
  o.report_dir = (fs::temp_directory_path() / "attn_oracle_isolation_test" / "report").string();
  CheckEnvironment env;
  env.program = this_program();
  env.settings.run.max_size = 20;  // as RC_PARAMS=max_size=20 would at the edge; the children get it on their command line
  EXPECT_EQ(run_check_command(o, env), 1);
  std::ifstream in(fs::path(o.report_dir) / "conformance.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto metadata_properties = std::count_if(all_properties().begin(), all_properties().end(),
                                                 [](const PropertyDef& p) { return p.id.rfind("metadata/", 0) == 0; });
  EXPECT_EQ(j["results"].size(), static_cast<size_t>(metadata_properties));
  EXPECT_GE(j["summary"]["FAILED"].get<int>(), 1);
  EXPECT_EQ(j["summary"]["skipped"].get<int>(), 1);
}

TEST(Isolation, AnIsolatedRunCountsWhatAnInProcessRunCounts) {
  const RunSettings s = settings("same");
  auto reference = BackendRegistry::instance().make("reference");
  const PropertyDef& p = *find_property("metadata/rowsAreIndependent");
  const PropertyOutcome in_process = run_property(p, *reference, s);
  const PropertyOutcome in_child = isolated("reference", p.id, s);
  EXPECT_EQ(in_child.drawn, in_process.drawn);
  EXPECT_EQ(in_child.passed, in_process.passed);
  EXPECT_EQ(in_child.mix, in_process.mix);
  EXPECT_EQ(in_child.status, PropertyOutcome::Status::passed);
}

// A child gets the run's draw settings on its command line, not from the
// environment: a deep, shape-stable run draws in a child what it draws here.
TEST(Isolation, AChildDrawsWithTheRunsDrawSettings) {
  RunSettings s = settings("draws");
  s.cases = 10;
  auto reference = BackendRegistry::instance().make("reference");
  const PropertyDef& p = *find_property("metadata/matchesReference");
  const PropertyOutcome as_ci = run_property(p, *reference, s);
  s.draws = DrawSettings{SizeProfile::deep, true};
  const PropertyOutcome in_process = run_property(p, *reference, s);
  const PropertyOutcome in_child = isolated("reference", p.id, s);
  EXPECT_EQ(in_child.mix, in_process.mix);
  EXPECT_EQ(in_child.largest.tokens, in_process.largest.tokens);
  EXPECT_EQ(in_child.largest.rows, in_process.largest.rows);
  EXPECT_TRUE(as_ci.mix != in_process.mix || as_ci.largest.tokens != in_process.largest.tokens)
      << "the draw settings change the draws";
}

}  // namespace
}  // namespace attn_oracle
