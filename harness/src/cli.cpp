// attn_oracle_cli.cpp: the `attn-oracle` command line (README.md, docs/vendoring.md).
//
//   eval    [--backend NAME] [--memory-budget BYTES] CASE
//                                   the backend's result as JSON (exit 0), or
//                                   {"error": {"code", "message"}} (exit 2), also
//                                   for a problem the backend does not support;
//                                   exit 3 when the result holds a NaN
//   replay  [--backend NAME] CASE   a counterexample: the property check it records; any
//                                   other case: the backend against the reference. PASS (0),
//                                   FAIL (3) or SKIP (4: nothing judged); default backend:
//                                   the one the case records, else reference
//   check   [--backend NAME|all] [--cases N] [--seed S] [--filter PREFIX,...] [--deep]
//           [--skips FILE] [--xfails FILE] [--report DIR] [--store DIR|--no-store]
//   backends                        registered backends, versions, capabilities
//   promote CASE OUT --note TEXT    CASE plus the reference's result, for fixtures/
//   export --npy DIR [--fixtures D] fixtures as .npy files + index.json (npy_export.hpp)
//   coverage [--markdown]           what the properties exercise (coverage.hpp)
//
// Exit 1 is for usage errors, unknown backends, missing capabilities and
// unreadable files; nothing but the final JSON is ever printed on stdout by eval,
// so scripts can parse it. What eval prints, how replay judges and what promote
// pins are the library's (replay.hpp, one CaseOp per op), shared with the tests.
//
// Tested by tests/cli_test.cpp (runs the built binary on fixtures) and, for the
// evaluation semantics, tests/fixtures_test.cpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <iostream>
#include <map>
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

namespace attn_oracle {
namespace {

using nlohmann::json;

constexpr const char* kUsage = R"(usage: PROGRAM COMMAND [OPTIONS]   (attn-oracle, or a conformance binary)

commands:
  eval [--backend NAME] [--memory-budget BYTES] CASE
                                  print the backend's result for a case file as JSON
                                  (default backend: reference); exit 2 with
                                  {"error": {"code", "message"}} when the input is rejected
                                  or the backend does not support it; exit 3 when the
                                  result holds a NaN; BYTES (K, M, G
                                  suffixes) overrides ATTN_ORACLE_MEMORY_BUDGET (4G)
  replay [--backend NAME] CASE    re-run a counterexample's property check, or compare the
                                  backend with the reference on any other case file; prints
                                  PASS (exit 0), FAIL (exit 3) or SKIP (exit 4: nothing was
                                  judged) and the first differences; default backend: the one
                                  the case records, else reference
  repro [--backend NAME] CASE [--out FILE] [--direct FILE]
                                  a counterexample as a standalone GoogleTest file (stdout,
                                  or FILE) that calls the backend through the seam alone and
                                  asserts the reference's answer inline: the call of the
                                  case's property check that the backend answers differently
                                  from the reference; exit 3 when no call does; --direct:
                                  that call as a case file with `expected` (what `python -m
                                  attn_oracle repro` writes a Python script from)
  NAME is a registered backend (`backends` lists them) or exec:COMMAND, a worker
  process speaking docs/protocol.md (COMMAND runs under /bin/sh -c; per-call time
  limit ATTN_ORACLE_WORKER_TIMEOUT seconds, default 60), e.g.
  --backend 'exec:python3 -m attn_oracle.worker examples.numpy_backend:Backend'
  check [--backend NAME|all] [--cases N] [--seed S|random] [--filter PREFIX[,PREFIX...]] [--deep]
        [--profile ci|deep] [--skips FILE] [--xfails FILE] [--report DIR] [--shard I/N] [--max-failures K]
        [--case-timeout SECONDS] [--no-isolation] [--list | --describe] [--store DIR | --no-store] [--shape-stable]
                                  run every property (N draws each, default 100, seed
                                  20261122) on the chosen backends, each property in a
                                  child process so that a crash or a hang is reported
                                  and the run goes on (an exec: backend's worker is
                                  its own isolation: one worker serves the run and is
                                  restarted after a crash or a hang, and the summary
                                  counts its starts); --filter: the properties whose
                                  id starts with one of the comma-separated
                                  prefixes; every failing draw is kept and
                                  clustered by root (wrong answers on ordinary inputs
                                  first, then input classes such as a side with no
                                  tokens, with the decline that would take each out,
                                  then exceptions, then crashes); K (3) clusters shown
                                  in full, each shrunk and written, the rest one line
                                  each; write
                                  DIR/conformance.{md,json} (default DIR: report);
                                  FILEs: skip and expected-failure lists (a test-id or
                                  property prefix a line, `version=V`, `# reason`;
                                  default $ATTN_ORACLE_SKIPS / $ATTN_ORACLE_XFAILS, which
                                  a conformance binary sets to its own lists);
                                  --deep: 10x the draws; --profile deep (or
                                  ATTN_ORACLE_PROFILE=deep): long documents (up to
                                  4096 tokens a side, 16 a row), tile edges and wide
                                  heads drawn more often; --shard I/N: the draws k with
                                  k mod N = I - 1 (also GTEST_SHARD_INDEX/TOTAL_SHARDS);
                                  exit 1 on a failure or an expected failure that
                                  passes, 130 when interrupted; --list: print the ids
                                  of the properties that would run, run nothing
                                  (--describe: each with what it checks);
                                  the failures a run finds are kept in the failures
                                  directory and replayed first by the next run on the
                                  same backend (name and version), a fixed one retired
                                  after 3 passing runs: --store DIR keeps them (and
                                  every counterexample) in DIR, --no-store replays and
                                  keeps none (also ATTN_ORACLE_STORE=off|DIR);
                                  --shape-stable (or ATTN_ORACLE_SHAPE_STABLE=1): sizes
                                  from a small menu (sides of 16, 64 or 144 tokens, 1
                                  or 2 rows, M 4 or 8, heads 2/1 or 2/2, head dims 8
                                  and 64, no extra dims), so that a backend that
                                  compiles per shape (jax.jit, torch.compile)
                                  compiles a few times a run; a backend can declare
                                  its own menu in its domain's `sizes`
  report merge --out DIR REPORT.json|DIR...
                                  one report from the reports of a run's shards (a
                                  directory: every *.json in it)
  backends                        list the registered backends
  promote CASE OUT --note TEXT    write CASE with the reference's result as `expected`
                                  (how a counterexample becomes a fixture)
  export --npy DIR [--fixtures FIXTURES]
                                  every fixture's inputs and expected outputs as .npy
                                  files plus DIR/index.json
  coverage [--markdown]           ops x mask kinds x layouts x dtypes the properties exercise;
                                  the text form also counts the validity-rule edges drawn
  --help                          this message
)";

constexpr size_t kMaxDifferenceLines = 10;

// ---------------------------------------------------------------------------
// Arguments and output helpers
// ---------------------------------------------------------------------------

struct Args {
  std::map<std::string, std::string> flags;  // "--backend" -> "cuda"
  std::vector<std::string> positional;
};

std::string env_or(const char* variable, const std::string& fallback) {
  const char* value = std::getenv(variable);
  return value && *value ? value : fallback;
}

int usage_error(const std::string& message) {
  std::cerr << "attn-oracle: " << message << "\n\n" << kUsage;
  return 1;
}

// Accepts `--flag VALUE` and `--flag=VALUE` for the flags in `allowed`.
std::optional<Args> parse_args(const std::vector<std::string>& argv,
                               const std::set<std::string>& allowed, std::string& error) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      args.positional.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (!allowed.count(name)) return error = "unknown option " + name, std::nullopt;
    if (eq != std::string::npos) {
      args.flags[name] = a.substr(eq + 1);
    } else if (i + 1 < argv.size()) {
      args.flags[name] = argv[++i];
    } else {
      return error = "option " + name + " needs a value", std::nullopt;
    }
  }
  return args;
}

std::string flag(const Args& args, const std::string& name, const std::string& fallback) {
  auto it = args.flags.find(name);
  return it == args.flags.end() ? fallback : it->second;
}

std::string registered_names() {
  std::string out;
  for (const std::string& n : BackendRegistry::instance().names()) out += (out.empty() ? "" : ", ") + n;
  return out + ", or exec:COMMAND for a worker process (docs/protocol.md)";
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

// --memory-budget BYTES (K, M, G suffixes): false after a usage error.
bool apply_memory_budget(const Args& args) {
  auto it = args.flags.find("--memory-budget");
  if (it == args.flags.end()) return true;
  const auto bytes = parse_memory_size(it->second);
  if (!bytes) return usage_error("--memory-budget needs a positive size in bytes (K, M, G suffixes)"), false;
  set_memory_budget(*bytes);
  return true;
}

// The backend named by --backend (default `fallback`); nullptr after a usage error.
std::unique_ptr<Backend> backend_from(const Args& args, const std::string& fallback = "reference") {
  const std::string name = flag(args, "--backend", fallback);
  auto backend = BackendRegistry::instance().make(name);
  if (!backend) usage_error("unknown backend " + name + " (registered: " + registered_names() + ")");
  return backend;
}

// ---------------------------------------------------------------------------
// eval
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

int eval_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--backend", "--memory-budget"}, error);
  if (!args) return usage_error(error);
  if (args->positional.size() != 1) return usage_error("eval takes exactly one case file");
  if (!apply_memory_budget(*args)) return 1;
  auto backend = backend_from(*args);
  if (!backend) return 1;
  const Expected<Case> c = read_case_file(args->positional[0]);
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

// ---------------------------------------------------------------------------
// replay
// ---------------------------------------------------------------------------

// The backend a counterexample recorded, when this build has it; else the reference.
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

int replay_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--backend"}, error);
  if (!args) return usage_error(error);
  if (args->positional.size() != 1) return usage_error("replay takes exactly one case file");
  const std::string& path = args->positional[0];
  auto backend = backend_from(*args, default_replay_backend(path));
  if (!backend) return 1;
  const Expected<Judgement> j = replay_file(*backend, path);
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
// check, report, backends
// ---------------------------------------------------------------------------

template <class T>
bool parse_number(const std::string& text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// "I/N" with 1 <= I <= N, as 0-based (index, count).
std::optional<std::pair<int, int>> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  int i = 0, n = 0;
  if (slash == std::string::npos || !parse_number(text.substr(0, slash), i) || !parse_number(text.substr(slash + 1), n) ||
      n < 1 || i < 1 || i > n)
    return std::nullopt;
  return std::pair{i - 1, n};
}

// Removes the value-less flag `name` from argv; true when it was there.
bool take_switch(std::vector<std::string>& argv, const std::string& name) {
  const auto it = std::find(argv.begin(), argv.end(), name);
  if (it == argv.end()) return false;
  argv.erase(it);
  return true;
}

int check_command(std::vector<std::string> argv, const CheckEnvironment& env) {
  CheckOptions options;
  options.deep = take_switch(argv, "--deep");
  options.isolate = !take_switch(argv, "--no-isolation");
  options.list = take_switch(argv, "--list");
  options.describe = take_switch(argv, "--describe");
  options.no_store = take_switch(argv, "--no-store");
  // The generators read it from the environment, so isolated children and workers' runs see it too.
  if (take_switch(argv, "--shape-stable")) setenv("ATTN_ORACLE_SHAPE_STABLE", "1", 1);
  std::string error;
  auto args = parse_args(argv, {"--backend", "--cases", "--seed", "--filter", "--skips", "--xfails", "--report",
                                "--shard", "--max-failures", "--case-timeout", "--profile", "--store"},
                         error);
  if (!args) return usage_error(error);
  if (!args->positional.empty()) return usage_error("check takes no positional arguments");
  if (args->flags.count("--profile")) {
    // The generators read it from the environment, so isolated children see it too.
    const std::string profile = args->flags["--profile"];
    if (profile != "ci" && profile != "deep") return usage_error("--profile takes ci or deep");
    setenv("ATTN_ORACLE_PROFILE", profile.c_str(), 1);
  }
  options.backend = flag(*args, "--backend", "all");
  options.filter = flag(*args, "--filter", "");
  // A conformance binary's own lists (attn_oracle_add_conformance ... SKIPS / XFAILS) unless given.
  options.skips_file = flag(*args, "--skips", env_or("ATTN_ORACLE_SKIPS", ""));
  options.xfails_file = flag(*args, "--xfails", env_or("ATTN_ORACLE_XFAILS", ""));
  options.report_dir = flag(*args, "--report", options.report_dir);
  if (args->flags.count("--store")) {
    if (options.no_store) return usage_error("give either --store DIR or --no-store, not both");
    if (args->flags["--store"].empty()) return usage_error("--store needs a directory");
    options.store_dir = args->flags["--store"];
  }
  if (options.backend != "all" && !BackendRegistry::instance().make(options.backend))
    return usage_error("unknown backend " + options.backend + " (registered: " + registered_names() + ")");
  if (args->flags.count("--cases")) {
    int cases = 0;
    if (!parse_number(args->flags["--cases"], cases) || cases < 1) return usage_error("--cases needs a positive integer");
    options.cases = cases;
  }
  if (args->flags.count("--seed")) {
    uint64_t seed = 0;
    if (args->flags["--seed"] == "random") options.random_seed = true;
    else if (parse_number(args->flags["--seed"], seed)) options.seed = seed;
    else return usage_error("--seed needs an unsigned 64-bit integer or `random`");
  }
  if (args->flags.count("--shard")) {
    options.shard = parse_shard(args->flags["--shard"]);
    if (!options.shard) return usage_error("--shard needs I/N with 1 <= I <= N");
  }
  if (args->flags.count("--max-failures") &&
      (!parse_number(args->flags["--max-failures"], options.max_failures) || options.max_failures < 1))
    return usage_error("--max-failures needs a positive integer");
  if (args->flags.count("--case-timeout")) {
    int seconds = 0;
    if (!parse_number(args->flags["--case-timeout"], seconds) || seconds < 1)
      return usage_error("--case-timeout needs a positive number of seconds");
    options.case_timeout_seconds = seconds;
  }
  return run_check_command(options, env);
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
int report_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] != "merge") return usage_error("report takes `merge --out DIR REPORT.json...`");
  std::string error;
  auto args = parse_args(std::vector<std::string>(argv.begin() + 1, argv.end()), {"--out"}, error);
  if (!args) return usage_error(error);
  if (args->positional.empty() || !args->flags.count("--out"))
    return usage_error("report merge needs --out DIR and at least one report");
  std::vector<CheckReport> shards;
  for (const std::string& path : report_paths(args->positional)) {
    std::ifstream in(path);
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    const Expected<CheckReport> r = report_from_json(j);
    if (!r) return usage_error(path + ": " + r.error().message);
    shards.push_back(r.value());
  }
  const Expected<CheckReport> merged = merge_reports(shards);
  if (!merged) return usage_error(merged.error().message);
  if (!write_report_files(merged.value(), args->flags["--out"], error)) return usage_error(error);
  std::cout << merged->count(Verdict::passed) << " passed, " << merged->count(Verdict::failed) << " failed, "
            << merged->count(Verdict::skipped) << " skipped, " << merged->count(Verdict::xfail)
            << " expected failures, " << merged->count(Verdict::xpass) << " unexpected passes\nreport: "
            << args->flags["--out"] << "/conformance.md, " << args->flags["--out"] << "/conformance.json\n";
  return 0;
}

int backends_command(const std::vector<std::string>& argv, const CheckEnvironment& env) {
  if (!argv.empty()) return usage_error("backends takes no arguments");
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
int promote_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--note"}, error);
  if (!args) return usage_error(error);
  if (args->positional.size() != 2) return usage_error("promote takes a case file and an output path");
  const Expected<Case> c = read_case_file(args->positional[0]);
  if (!c) return usage_error("cannot read " + args->positional[0] + ": " + c.error().message);
  const Case promoted = promote_case(c.value(), flag(*args, "--note", c->note));
  if (!write_case_file(args->positional[1], promoted)) return usage_error("cannot write " + args->positional[1]);
  std::cout << args->positional[1] << "\n";
  return 0;
}

int export_command(const std::vector<std::string>& argv, const CheckEnvironment& env) {
  std::string error;
  auto args = parse_args(argv, {"--npy", "--fixtures"}, error);
  if (!args) return usage_error(error);
  const std::string fixtures = flag(*args, "--fixtures", env.fixtures_dir);
  if (!args->positional.empty() || !args->flags.count("--npy") || fixtures.empty())
    return usage_error("export needs --npy DIR (and --fixtures DIR)");
  return export_npy(fixtures, args->flags["--npy"]);
}

int coverage_command(const std::vector<std::string>& argv) {
  if (argv.size() > 1 || (argv.size() == 1 && argv[0] != "--markdown"))
    return usage_error("coverage takes only --markdown");
  std::cout << coverage_table(!argv.empty());
  return 0;
}

}  // namespace

bool is_cli_verb(const std::string& word) {
  static const std::set<std::string> verbs = {"eval",   "replay", "repro", "check",    "backends", "promote",
                                              "export", "report", "coverage", "help",     "--help"};
  return verbs.count(word) || is_isolation_child_verb(word);
}

int run_cli(const std::vector<std::string>& argv, const CheckEnvironment& env) {
  if (argv.empty()) {
    std::cout << kUsage;
    return 1;
  }
  const std::string& command = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  try {
    if (command == "--help" || command == "-h" || command == "help") return std::cout << kUsage, 0;
    // `check --help` asks for the usage: no option parser should call it unknown.
    const auto is_help = [](const std::string& a) { return a == "--help" || a == "-h"; };
    if (is_cli_verb(command) && std::any_of(rest.begin(), rest.end(), is_help)) return std::cout << kUsage, 0;
    if (is_isolation_child_verb(command)) return run_isolation_child(argv);
    if (command == "eval") return eval_command(rest);
    if (command == "replay") return replay_command(rest);
    if (command == "repro") return repro_command(rest);
    if (command == "check") return check_command(rest, env);
    if (command == "report") return report_command(rest);
    if (command == "backends") return backends_command(rest, env);
    if (command == "promote") return promote_command(rest);
    if (command == "export") return export_command(rest, env);
    if (command == "coverage") return coverage_command(rest);
  } catch (const BackendFailure& e) {  // a worker process that cannot start or greet
    std::cerr << "attn-oracle: the backend failed: " << e.what() << "\n";
    if (!e.log.empty()) std::cerr << "its stderr ended with:\n" << e.log << (e.log.ends_with('\n') ? "" : "\n");
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "attn-oracle: internal error: " << e.what() << "\n";
    return 1;
  }
  return usage_error("unknown command " + command);
}

}  // namespace attn_oracle
