// cli.cpp: the `attn-oracle` command line (README.md, docs/vendoring.md), on
// CLI11: one subcommand per verb, typed options, and the help generated from
// their definitions (`attn-oracle --help`: every command and option;
// `attn-oracle COMMAND --help`: one command's).
//
// Exit statuses: 0 done (PASS for replay); 1 usage errors, unknown backends,
// missing capabilities, unreadable files, and a `check` that failed; 2 an
// input the backend rejects or does not support (eval prints
// {"error": {"code", "message"}}); 3 eval: the result holds a NaN, replay: FAIL,
// repro: no call disagrees; 4 replay: SKIP (nothing judged). Nothing but the
// final JSON is ever printed on stdout by eval, so scripts can parse it. What
// eval prints, how replay judges and what promote pins are the library's
// (replay.hpp, one CaseOp per op), shared with the tests.
//
// The settings a command runs with come from the program's edge
// (CheckEnvironment::settings, settings.hpp): flags here override them.
//
// Tested by tests/cli_test.cpp (runs the built binary on fixtures) and, for the
// evaluation semantics, tests/fixtures_test.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/harness/cli.hpp"
#include "attn_oracle/harness/coverage.hpp"
#include "attn_oracle/harness/isolation.hpp"
#include "attn_oracle/harness/npy_export.hpp"
#include "attn_oracle/harness/report.hpp"
#include "attn_oracle/harness/repro.hpp"
#include "attn_oracle/runner/replay.hpp"

namespace attn_oracle::inline harness {
namespace {

using nlohmann::json;

constexpr size_t kMaxDifferenceLines = 10;
constexpr size_t kHelpWidth = 60;  // characters of a description line

// ---------------------------------------------------------------------------
// The command line: what each command takes
// ---------------------------------------------------------------------------

// The values of every command's options; the chosen command reads its own.
struct CommandLine {
  std::string backend, case_path, memory_budget;  // eval, replay (backend "": the recorded one)
  ReproOptions repro;
  CheckOptions check;
  int cases = 0, case_timeout = 0;   // check: 0 when not given
  std::string seed, shard, profile, store_dir;  // check: "" when not given; converted after parsing
  bool no_isolation = false, shape_stable = false;
  std::string merge_out;
  std::vector<std::string> merge_reports;
  std::string promote_out, note;
  std::string npy_dir, fixtures_dir;
  bool markdown = false;
};

// `text` broken into lines of at most kHelpWidth characters (CLI11 indents them).
std::string wrapped(const std::string& text) {
  std::istringstream words(text);
  std::string out, line;
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > kHelpWidth) out += line + "\n", line.clear();
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

template <class T>
bool parse_number(const std::string& text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// A validator that names no type in the help (CLI11's own append theirs to the option's).
CLI::Validator plain(std::function<std::string(std::string&)> check) { return CLI::Validator(std::move(check), "", ""); }

std::string positive_integer(std::string& text) {
  int n = 0;
  return parse_number(text, n) && n >= 1 ? "" : "needs a positive integer";
}

const std::string kBackendHelp =
    "NAME: a registered backend (`backends` lists them) or exec:COMMAND, a worker process speaking docs/protocol.md";

void add_eval(CLI::App& app, CommandLine& v) {
  CLI::App* eval = app.add_subcommand(
      "eval", wrapped("print the backend's result for a case file as JSON; exit 2 with {\"error\": {\"code\", "
                      "\"message\"}} when the input is rejected or the backend does not support it, 3 when the "
                      "result holds a NaN"));
  eval->add_option("--backend", v.backend, wrapped(kBackendHelp + " (default: reference)"))->type_name("NAME");
  eval->add_option("--memory-budget", v.memory_budget,
                   wrapped("bytes one evaluation may ask for, with K, M or G suffixes (default: "
                           "$ATTN_ORACLE_MEMORY_BUDGET, else 4G)"))
      ->type_name("BYTES")
      ->check(plain([](std::string& text) {
        return parse_memory_size(text) ? std::string() : "needs a positive size in bytes (K, M, G suffixes)";
      }));
  eval->add_option("CASE", v.case_path, "a case file (docs/case-files.md)")->type_name("")->required();
}

void add_replay(CLI::App& app, CommandLine& v) {
  CLI::App* replay = app.add_subcommand(
      "replay", wrapped("re-run a counterexample's property check, or compare the backend with the reference on "
                        "any other case file; prints PASS (exit 0), FAIL (exit 3) or SKIP (exit 4: nothing was "
                        "judged) and the first differences"));
  replay->add_option("--backend", v.backend, wrapped(kBackendHelp + " (default: the one the case records, else reference)"))
      ->type_name("NAME");
  replay->add_option("CASE", v.case_path, "a case file")->type_name("")->required();
}

void add_repro(CLI::App& app, CommandLine& v) {
  CLI::App* repro = app.add_subcommand(
      "repro", wrapped("a counterexample as a standalone GoogleTest file that calls the backend through the seam "
                       "alone and asserts the reference's answer inline: the call of the case's property check "
                       "that the backend answers differently; exit 3 when no call does"));
  repro->add_option("--backend", v.repro.backend, wrapped(kBackendHelp + " (default: the one the case records)"))
      ->type_name("NAME");
  repro->add_option("--out", v.repro.out_path, "the test file (default: stdout)")->type_name("FILE");
  repro->add_option("--direct", v.repro.direct_path,
                    wrapped("also that call as a case file with `expected` (what `python -m attn_oracle repro` "
                            "writes a Python script from)"))
      ->type_name("FILE");
  repro->add_option("CASE", v.repro.case_path, "a counterexample's case file")->type_name("")->required();
}

// check's options that say what runs and how much of it.
void add_check_selection(CLI::App* check, CommandLine& v) {
  CheckOptions& o = v.check;
  check->add_option("--backend", o.backend, wrapped(kBackendHelp + ", or all (default: all)"))->type_name("NAME|all");
  check->add_option("--cases", v.cases, wrapped("draws per property (default: RC_PARAMS max_success, else 100)"))
      ->type_name("N")
      ->check(plain(positive_integer));
  check->add_option("--seed", v.seed, wrapped("the run's seed, or random: a fresh one, printed (default: RC_PARAMS "
                                              "seed, else 20261122)"))
      ->type_name("S|random")
      ->check(plain([](std::string& text) {
        uint64_t seed = 0;
        return text == "random" || parse_number(text, seed) ? std::string()
                                                            : "needs an unsigned 64-bit integer or `random`";
      }));
  check->add_option("--filter", o.filter, wrapped("the properties whose id starts with one of the comma-separated prefixes"))
      ->type_name("PREFIX[,PREFIX...]");
  check->add_flag("--deep", o.deep, "10 times the draws");
  check->add_option("--profile", v.profile,
                    wrapped("deep: long documents (up to 4096 tokens a side, 16 a row), tile edges and wide heads "
                            "drawn more often (default: $ATTN_ORACLE_PROFILE, else ci)"))
      ->type_name("ci|deep")
      ->check(plain([](std::string& text) { return size_profile_from(text) ? "" : "takes ci or deep"; }));
  check->add_flag("--shape-stable", v.shape_stable,
                  wrapped("sizes from a small menu (sides of 16, 64 or 144 tokens, 1 or 2 rows, M 4 or 8, heads 2/1 "
                          "or 2/2, head dims 8 and 64, no extra dims), so that a backend that compiles per shape "
                          "(jax.jit, torch.compile) compiles a few times a run; a backend can declare its own menu "
                          "in its domain's `sizes` (also ATTN_ORACLE_SHAPE_STABLE=1)"));
  check->add_option("--shard", v.shard, "the draws k with k mod N = I - 1 (also GTEST_SHARD_INDEX/TOTAL_SHARDS)")
      ->type_name("I/N")
      ->check(plain([](std::string& text) { return parse_shard(text) ? std::string() : "needs I/N with 1 <= I <= N"; }));
  check->add_flag("--list", o.list, "print the ids of the properties that would run, run nothing");
  check->add_flag("--describe", o.describe, "the same ids, each with what it checks");
}

// check's options that say how it runs, what it keeps and where it writes.
void add_check_running(CLI::App* check, CommandLine& v) {
  CheckOptions& o = v.check;
  check->add_option("--skips", o.skips_file,
                    wrapped("skip list: a test-id or property prefix a line, `version=V`, `# reason` (default: "
                            "$ATTN_ORACLE_SKIPS, a conformance binary's own list)"))
      ->type_name("FILE");
  check->add_option("--xfails", o.xfails_file,
                    wrapped("expected-failure list, in the same form (default: $ATTN_ORACLE_XFAILS)"))
      ->type_name("FILE");
  check->add_option("--report", o.report_dir, "write DIR/conformance.{md,json} (default: report)")->type_name("DIR");
  check->add_option("--junit-xml", o.junit_xml,
                    wrapped("also write the report as JUnit XML: a test case per property and backend, each failure "
                            "with its shrunk case and its replay and repro lines (docs/ci.md)"))
      ->type_name("FILE");
  check->add_option("--devices", o.devices,
                    wrapped("one child check per device, each seeing that device alone (CUDA_VISIBLE_DEVICES) and "
                            "drawing its share of the draws; one merged report. Over an outer CUDA_VISIBLE_DEVICES "
                            "the devices index its list (docs/ci.md)"))
      ->type_name("I,J,...");
  check->add_option("--require-coverage", o.coverage_file,
                    wrapped("fail a property whose judged draws of an input class fall short of FILE's targets "
                            "(`PROPERTY CLASS >= N` a line; docs/ci.md)"))
      ->type_name("FILE");
  check->add_option("--log-draws", o.draw_log,
                    wrapped("append every draw to FILE as a JSON line in Hypothesis's observability format (what "
                            "was drawn, judged or declined and why; docs/ci.md)"))
      ->type_name("FILE");
  check->add_flag("--github-annotations", o.github_annotations,
                  wrapped("print a GitHub Actions ::error line per failure, naming its case file, and a ::warning per "
                          "warning (docs/ci.md)"));
  check->add_option("--max-failures", o.max_failures,
                    wrapped("failure clusters shown in full per property, each shrunk and written; the rest one "
                            "line each (default: 3)"))
      ->type_name("K")
      ->check(plain(positive_integer));
  check->add_option("--case-timeout", v.case_timeout,
                    wrapped("a draw that runs longer in a child process is a hang (default: "
                            "$ATTN_ORACLE_CASE_TIMEOUT, else 120)"))
      ->type_name("SECONDS")
      ->check(plain(positive_integer));
  check->add_flag("--no-isolation", v.no_isolation,
                  wrapped("run each property in this process, not in a child that a crash or a hang cannot take "
                          "the run with (also ATTN_ORACLE_ISOLATE=0)"));
  CLI::Option* store = check->add_option(
      "--store", v.store_dir,
      wrapped("keep the failures a run finds (and every counterexample) in DIR; the next run on the same backend "
              "replays them first, and retires a fixed one after 3 passing runs (default: the failures "
              "directory, $ATTN_ORACLE_FAILURES_DIR, else attn-oracle-failures; $ATTN_ORACLE_STORE=off|DIR)"))
      ->type_name("DIR")
      ->check(plain([](std::string& dir) { return dir.empty() ? "needs a directory" : ""; }));
  check->add_flag("--no-store", o.no_store, "replay and keep no failures")->excludes(store);
}

void add_check(CLI::App& app, CommandLine& v) {
  CLI::App* check = app.add_subcommand(
      "check", wrapped("run every property on the chosen backends, each property in a child process so that a "
                       "crash or a hang is reported and the run goes on (an exec: backend's one worker is its own "
                       "isolation, restarted after a crash or a hang); every failing draw is kept and clustered by "
                       "root (wrong answers on ordinary inputs first, then input classes with the decline that "
                       "would take each out, then exceptions, then crashes); exit 1 on a failure or an expected "
                       "failure that passes, 130 when interrupted"));
  add_check_selection(check, v);
  add_check_running(check, v);
}

void add_other_commands(CLI::App& app, CommandLine& v) {
  CLI::App* report = app.add_subcommand(
      "report", wrapped("merge --out DIR REPORT.json|DIR...: one report from the reports of a run's shards (a "
                        "directory: every *.json in it)"));
  report->require_subcommand(1);
  CLI::App* merge = report->add_subcommand(
      "merge", wrapped("one report from the reports of a run's shards (a directory: every *.json in it)"));
  merge->add_option("--out", v.merge_out, "write DIR/conformance.{md,json}")->type_name("DIR")->required();
  merge->add_option("REPORTS", v.merge_reports, "REPORT.json files or directories")->type_name("")->required();
  app.add_subcommand("backends", "list the registered backends, their versions and capabilities");
  CLI::App* promote = app.add_subcommand(
      "promote", wrapped("write CASE with the reference's result as `expected` (how a counterexample becomes a fixture)"));
  promote->add_option("CASE", v.case_path, "a case file")->type_name("")->required();
  promote->add_option("OUT", v.promote_out, "the fixture to write")->type_name("")->required();
  promote->add_option("--note", v.note, "what the fixture pins (default: the case's note)")->type_name("TEXT");
  CLI::App* exported = app.add_subcommand(
      "export", wrapped("every fixture's inputs and expected outputs as .npy files plus DIR/index.json"));
  exported->add_option("--npy", v.npy_dir, "the directory to write")->type_name("DIR")->required();
  exported->add_option("--fixtures", v.fixtures_dir, "the fixtures (default: this build's)")->type_name("DIR");
  CLI::App* coverage = app.add_subcommand(
      "coverage", wrapped("ops x mask kinds x layouts x dtypes the properties exercise; the text form also counts "
                          "the validity-rule edges drawn"));
  coverage->add_flag("--markdown", v.markdown, "as a Markdown table");
  app.add_subcommand("help", "this message");
}

constexpr const char* kFooter =
    "NAME is a registered backend (`backends` lists them) or exec:COMMAND, a worker process\n"
    "speaking docs/protocol.md (COMMAND runs under /bin/sh -c; per-call time limit\n"
    "ATTN_ORACLE_WORKER_TIMEOUT seconds, default 60), e.g.\n"
    "  --backend 'exec:python3 -m attn_oracle.worker examples.numpy_backend:Backend'\n"
    "Exit 1 is for usage errors, unknown backends, missing capabilities and unreadable files.\n"
    "The environment variables each command reads: docs/vendoring.md, \"Settings at a glance\".";

// The whole command line of a program on the harness: `program` names it in the help.
void define_commands(CLI::App& app, CommandLine& v) {
  app.require_subcommand(0, 1);
  app.footer(kFooter);
  app.get_formatter()->label("Usage", "usage");
  app.get_formatter()->column_width(34);
  add_eval(app, v);
  add_replay(app, v);
  add_repro(app, v);
  add_check(app, v);
  add_other_commands(app, v);
}

// ---------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------

std::string registered_names() {
  std::string out;
  for (const std::string& n : BackendRegistry::instance().names()) out += (out.empty() ? "" : ", ") + n;
  return out + ", or exec:COMMAND for a worker process (docs/protocol.md)";
}

int usage_error(const std::string& message) {
  std::cerr << "attn-oracle: " << message << " (--help: the usage)\n";
  return 1;
}

// Top-level keys one per line, values compact: readable and still one JSON value.
void print_json(const json& j) {
  if (!j.is_object() || j.empty()) {
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "{\n";
  for (auto it = j.begin(); it != j.end(); ++it)
    std::cout << "  " << json(it.key()).dump() << ": " << it.value().dump()
              << (std::next(it) == j.end() ? "\n" : ",\n");
  std::cout << "}\n";
}

// The backend called `name`; nullptr after a usage error.
std::unique_ptr<Backend> backend_named(const std::string& name) {
  auto backend = BackendRegistry::instance().make(name);
  if (!backend) usage_error("unknown backend " + name + " (registered: " + registered_names() + ")");
  return backend;
}

// ---------------------------------------------------------------------------
// eval, replay
// ---------------------------------------------------------------------------

// The path of the first "nan" in an output ("o[0][1][0][2]"), or "".
std::string first_nan(const json& j, const std::string& path = "") {
  if (j.is_string()) return j.get<std::string>() == "nan" ? (path.empty() ? "the top" : path) : "";
  if (j.is_number_float() && std::isnan(j.get<double>())) return path;
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i)
      if (std::string at = first_nan(j[i], path + "[" + std::to_string(i) + "]"); !at.empty()) return at;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      if (std::string at = first_nan(it.value(), path.empty() ? it.key() : path + "." + it.key()); !at.empty()) return at;
  return "";
}

int eval_command(const CommandLine& v) {
  if (!v.memory_budget.empty()) set_memory_budget(*parse_memory_size(v.memory_budget));
  auto backend = backend_named(v.backend.empty() ? "reference" : v.backend);
  if (!backend) return 1;
  const Expected<Case> c = read_case_file(v.case_path);
  if (!c) {
    print_json(error_to_json(c.error()));
    return 2;
  }
  const Evaluation e = evaluate_case(*backend, c.value());
  if (e.kind == Evaluation::Kind::missing_capability) {
    std::cerr << "attn-oracle eval: " << e.reason << "\n";
    return 1;
  }
  print_json(e.output);
  if (e.kind != Evaluation::Kind::result) return 2;
  if (const std::string at = first_nan(e.output); !at.empty()) {
    std::cerr << "attn-oracle eval: the output holds NaN at " << at << " (no correct output is NaN)\n";
    return 3;
  }
  return 0;
}

// The backend the case records when this program has it; else the reference,
// said on stderr (a fixture pinned from a backend that lives elsewhere).
std::string default_replay_backend(const std::string& path) {
  const Expected<Case> c = read_case_file(path);
  if (!c || !c->property || c->property->backend.empty()) return "reference";
  if (BackendRegistry::instance().make(c->property->backend)) return c->property->backend;
  std::cerr << "attn-oracle replay: the case records backend " << c->property->backend
            << ", which this program does not register (" << registered_names()
            << "); replaying on reference (--backend NAME picks another)\n";
  return "reference";
}

int replay_command(const CommandLine& v) {
  auto backend = backend_named(v.backend.empty() ? default_replay_backend(v.case_path) : v.backend);
  if (!backend) return 1;
  const Expected<Judgement> j = replay_file(*backend, v.case_path);
  if (!j) {
    std::cerr << "attn-oracle replay: cannot read the case: " << to_string(j.error().code) << ": "
              << j.error().message << "\n";
    return 1;
  }
  std::cout << to_string(j->status) << "\n";
  std::cout << "  on backend " << backend->name() << " (" << backend->version() << ")\n";
  for (size_t i = 0; i < j->lines.size() && i < kMaxDifferenceLines; ++i) std::cout << "  " << j->lines[i] << "\n";
  if (j->lines.size() > kMaxDifferenceLines)
    std::cout << "  ... and " << j->lines.size() - kMaxDifferenceLines << " more\n";
  switch (j->status) {
    case Judgement::Status::pass: return 0;
    case Judgement::Status::fail: return 3;
    case Judgement::Status::skip: return 4;
  }
  return 1;
}

// ---------------------------------------------------------------------------
// check, report, backends, promote, export
// ---------------------------------------------------------------------------

// check's options: the parsed flags over the settings the program resolved.
int check_command(CommandLine& v, const CheckEnvironment& env) {
  CheckOptions& o = v.check;
  if (o.backend != "all" && !BackendRegistry::instance().make(o.backend))
    return usage_error("unknown backend " + o.backend + " (registered: " + registered_names() + ")");
  if (v.cases > 0) o.cases = v.cases;
  if (v.case_timeout > 0) o.case_timeout_seconds = v.case_timeout;
  if (!v.store_dir.empty()) o.store_dir = v.store_dir;
  if (v.seed == "random") o.random_seed = true;
  else if (!v.seed.empty()) o.seed = std::stoull(v.seed);
  if (!v.shard.empty()) o.shard = parse_shard(v.shard);
  if (!v.profile.empty()) o.profile = size_profile_from(v.profile);
  o.shape_stable = o.shape_stable || v.shape_stable;
  o.isolate = o.isolate && !v.no_isolation;
  return run_check_command(o, env);
}

// The reports named: files, and every *.json in a directory (sorted).
std::vector<std::string> report_paths(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& name : names) {
    if (!std::filesystem::exists(name)) continue;  // a results directory no test wrote to
    if (!std::filesystem::is_directory(name)) {
      out.push_back(name);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& e : std::filesystem::directory_iterator(name))
      if (e.path().extension() == ".json") inside.push_back(e.path().string());
    std::sort(inside.begin(), inside.end());
    out.insert(out.end(), inside.begin(), inside.end());
  }
  return out;
}

// report merge --out DIR REPORT.json|DIR...: one report from shard reports (or
// the per-test reports of a conformance binary). Exit 0 once it is written.
int merge_command(const CommandLine& v) {
  std::vector<CheckReport> shards;
  for (const std::string& path : report_paths(v.merge_reports)) {
    std::ifstream in(path);
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    const Expected<CheckReport> r = report_from_json(j);
    if (!r) return usage_error(path + ": " + r.error().message);
    shards.push_back(r.value());
  }
  const Expected<CheckReport> merged = merge_reports(shards);
  if (!merged) return usage_error(merged.error().message);
  std::string error;
  if (!write_report_files(merged.value(), v.merge_out, error)) return usage_error(error);
  std::cout << merged->count(Verdict::passed) << " passed, " << merged->count(Verdict::failed) << " failed, "
            << merged->count(Verdict::skipped) << " skipped, " << merged->count(Verdict::xfail)
            << " expected failures, " << merged->count(Verdict::xpass) << " unexpected passes\nreport: "
            << v.merge_out << "/conformance.md, " << v.merge_out << "/conformance.json\n";
  return 0;
}

int backends_command(const CheckEnvironment& env) {
  for (const std::string& name : BackendRegistry::instance().names()) {
    auto backend = BackendRegistry::instance().make(name);
    std::string caps;
    for (Capability c : backend->capabilities()) {
      if (!caps.empty()) caps += ',';
      caps += to_string(c);
    }
    std::cout << name << "\t" << backend->version() << "\t" << (caps.empty() ? "-" : caps) << "\n";
  }
  // Absent backends, one "# name: why" line each (after the tab-separated rows).
  std::string note = env.backends_note;
  for (size_t at = 0; !note.empty(); note = at == std::string::npos ? "" : note.substr(at + 2)) {
    at = note.find("; ");
    std::cout << "# " << note.substr(0, at) << "\n";
  }
  return 0;
}

// promote CASE OUT --note TEXT: the case with the reference's result as its
// `expected` field and a note saying what it pins, ready for fixtures/.
int promote_command(const CommandLine& v) {
  const Expected<Case> c = read_case_file(v.case_path);
  if (!c) return usage_error("cannot read " + v.case_path + ": " + c.error().message);
  const Case promoted = promote_case(c.value(), v.note.empty() ? c->note : v.note);
  if (!write_case_file(v.promote_out, promoted)) return usage_error("cannot write " + v.promote_out);
  std::cout << v.promote_out << "\n";
  return 0;
}

int export_command(const CommandLine& v, const CheckEnvironment& env) {
  const std::string fixtures = v.fixtures_dir.empty() ? env.fixtures_dir : v.fixtures_dir;
  if (fixtures.empty()) return usage_error("export needs --fixtures DIR (this program has no fixtures of its own)");
  return export_npy(fixtures, v.npy_dir);
}

// Every command with its options: `attn-oracle --help`, `help`, or nothing.
std::string full_help(const CLI::App& app) {
  return app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::All);
}

// CLI11 takes `--store=` (nothing after the '=') as `--store` and then the next
// argument as its value; `--store ""` is what it means, as it always did here.
std::vector<std::string> with_empty_values(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (const std::string& a : argv) {
    if (a.starts_with("--") && a.size() > 3 && a.back() == '=' && a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
    } else {
      out.push_back(a);
    }
  }
  return out;
}

// The chosen command, run.
int dispatch(const CLI::App& app, CommandLine& v, const CheckEnvironment& env) {
  const auto chosen = [&](const char* name) { return app.got_subcommand(name); };
  if (chosen("eval")) return eval_command(v);
  if (chosen("replay")) return replay_command(v);
  if (chosen("repro")) return repro_command(v.repro);
  if (chosen("check")) return check_command(v, env);
  if (chosen("report")) return merge_command(v);
  if (chosen("backends")) return backends_command(env);
  if (chosen("promote")) return promote_command(v);
  if (chosen("export")) return export_command(v, env);
  if (chosen("coverage")) return std::cout << coverage_table(v.markdown), 0;
  std::cout << full_help(app);  // `help`
  return 0;
}

}  // namespace

bool is_cli_verb(const std::string& word) {
  static const std::set<std::string> verbs = {"eval",   "replay", "repro", "check",    "backends", "promote",
                                              "export", "report", "coverage", "help",     "--help"};
  return verbs.count(word) || is_isolation_child_verb(word);
}

int run_cli(const std::vector<std::string>& argv, const CheckEnvironment& env) {
  if (!argv.empty() && is_isolation_child_verb(argv[0])) return run_isolation_child(argv);
  CLI::App app(wrapped("attn-oracle: the property suite for packed attention, its reference and its "
                       "counterexamples"), env.program);
  CommandLine v;
  v.check.skips_file = env.settings.skips_file;
  v.check.xfails_file = env.settings.xfails_file;
  v.check.coverage_file = env.settings.coverage_file;
  v.check.isolate = env.settings.isolate;
  v.check.case_timeout_seconds = env.settings.case_timeout_seconds;
  define_commands(app, v);
  if (argv.empty()) return std::cout << full_help(app), 1;
  try {
    const std::vector<std::string> args = with_empty_values(argv);
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
    if (!args.empty() && args[0] == "check") v.check.arguments.assign(args.begin() + 1, args.end());
  } catch (const CLI::CallForHelp&) {
    std::cout << (app.get_subcommands().empty() ? full_help(app) : app.help());
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }
  try {
    return dispatch(app, v, env);
  } catch (const BackendFailure& e) {  // a worker process that cannot start or greet
    std::cerr << "attn-oracle: the backend failed: " << e.what() << "\n";
    if (!e.log.empty()) std::cerr << "its stderr ended with:\n" << e.log << (e.log.ends_with('\n') ? "" : "\n");
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "attn-oracle: internal error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace attn_oracle::harness
