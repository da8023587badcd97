// attn_oracle_cli.cpp: the `attn-oracle` command line (DESIGN section 9).
//
//   eval    [--backend NAME] [--memory-budget BYTES] CASE
//                                   the backend's result as JSON (exit 0), or
//                                   {"error": {"code", "message"}} (exit 2), also
//                                   for a problem the backend does not support
//   replay  [--backend NAME] CASE   the backend against the reference: PASS (0) / FAIL (3)
//   check   [--backend NAME|all] [--cases N] [--seed S] [--filter PREFIX] [--deep]
//           [--skips FILE] [--xfails FILE] [--report DIR]
//   backends                        registered backends, versions, capabilities
//   promote CASE OUT --note TEXT    CASE plus the reference's result, for fixtures/
//   export --npy DIR [--fixtures D] fixtures as .npy files + index.json (npy_export.hpp)
//   coverage [--markdown]           what the properties exercise (coverage.hpp)
//
// Exit 1 is for usage errors, unknown backends and missing capabilities; nothing
// but the final JSON is ever printed on stdout by eval, so scripts can parse it.
// Metadata is compared exactly (error codes too); attention goes through the
// tolerance rule of DESIGN section 5, small_seq through the same rule per output
// (o, p, dq, dk, dv) against ref::small_seq. A case's `expected` field is compared
// with the reference's own result (errors by code; attention and small_seq values
// to 1e-12 relative). Sharding cases: {"ok": true} when a shapes-only case is
// accepted, else the sharded attention judged like attention; their error
// messages are compared exactly (DESIGN section 8 pins them).
//
// Tested by tests/cli_test.cpp (runs the built binary on fixtures) and, for the
// evaluation semantics, tests/fixtures_test.cpp.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "attn_oracle/backend.hpp"
#include "attn_oracle/case_file.hpp"
#include "attn_oracle/memory_budget.hpp"
#include "check.hpp"
#include "coverage.hpp"
#include "npy_export.hpp"
#include "attn_oracle/kv_buffer_case.hpp"
#include "attn_oracle/sharding_case.hpp"
#include "attn_oracle/small_seq_checks.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "builtin_backends.hpp"

namespace attn_oracle {
namespace {

using nlohmann::json;

constexpr const char* kUsage = R"(usage: attn-oracle COMMAND [OPTIONS]

commands:
  eval [--backend NAME] [--memory-budget BYTES] CASE
                                  print the backend's result for a case file as JSON
                                  (default backend: reference); exit 2 with
                                  {"error": {"code", "message"}} when the input is rejected
                                  or the backend does not support it; BYTES (K, M, G
                                  suffixes) overrides ATTN_ORACLE_MEMORY_BUDGET (4G)
  replay [--backend NAME] CASE    compare the backend with the reference on a case file;
                                  prints PASS (exit 0) or FAIL (exit 3) and the first differences
  check [--backend NAME|all] [--cases N] [--seed S] [--filter PREFIX] [--deep]
        [--skips FILE] [--xfails FILE] [--report DIR]
                                  run every property on the chosen backends and write
                                  DIR/conformance.{md,json} (default DIR: report);
                                  FILEs list test-id prefixes (BACKEND/PROPERTY) one a
                                  line; --deep: 10x the cases; exit 1 on an unexpected
                                  failure, 130 when interrupted
  backends                        list the registered backends
  promote CASE OUT --note TEXT    write CASE with the reference's result as `expected`
                                  (how a counterexample becomes a fixture)
  export --npy DIR [--fixtures FIXTURES]
                                  every fixture's inputs and expected outputs as .npy
                                  files plus DIR/index.json
  coverage [--markdown]           ops x mask kinds x layouts x dtypes the properties exercise
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
  return out;
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

// ---------------------------------------------------------------------------
// One backend on one case
// ---------------------------------------------------------------------------

// A result, the input's rejection, or (skip non-empty) a missing capability.
struct Evaluation {
  std::optional<Metadata> metadata;
  std::optional<AttentionResult> attention;
  std::optional<SmallSeqResult> small_seq;
  std::optional<Error> error;
  std::string skip;
  bool unsupported = false;  // skip: the backend has the capability but not for this problem
  bool sharding_ok = false;  // a shapes-only sharding case the backend accepts
  json to_json(const AttentionProblem& problem) const {
    if (error) return error_to_json(*error);
    if (sharding_ok) return {{"ok", true}};
    if (metadata) return metadata_to_json(*metadata);
    if (small_seq) return small_seq_result_to_json(problem, *small_seq);
    return attention_result_to_json(problem, *attention);
  }
};

// small_seq on `backend`.
Evaluation evaluate_small_seq(Backend& backend, const Case& c, const AttentionInputs& inputs) {
  Evaluation e;
  const AttentionProblem problem = attention_problem(c);
  Expected<SmallSeqResult> r = Error{ErrorCode::unsupported, ""};
  if (backend.small_seq()) {
    if (validate_attention(problem, &inputs) && small_seq_documents(problem, &inputs))
      if (auto reason = backend.small_seq()->unsupported(problem))
        return e.unsupported = true, e.skip = "backend " + backend.name() + " does not support this problem: " + *reason, e;
    r = backend.small_seq()->small_seq(problem, inputs);
  } else {
    return e.skip = "backend " + backend.name() + " lacks the small_seq capability", e;
  }
  if (r) e.small_seq = r.value();
  else e.error = r.error();
  return e;
}

// op sharding (sharding_case.hpp): {"ok": true} for a shapes-only case the
// backend accepts, else its sharded attention, or the error.
Evaluation evaluate_sharding(Backend& backend, const Case& c) {
  Evaluation e;
  if (!backend.sharding()) return e.skip = "backend " + backend.name() + " lacks the sharding capability", e;
  auto r = evaluate_sharding_case(*backend.sharding(), c);
  if (!r) e.error = r.error();
  else if (r.value()) e.attention = *r.value();
  else e.sharding_ok = true;
  return e;
}

Evaluation evaluate(Backend& backend, const Case& c, const AttentionInputs& inputs) {
  Evaluation e;
  const std::string who = "backend " + backend.name();
  if (c.op == CaseOp::metadata) {
    if (!backend.metadata()) return e.skip = who + " lacks the metadata capability", e;
    auto md = backend.metadata()->metadata(c.batch);
    if (md) e.metadata = md.value();
    else e.error = md.error();
    return e;
  }
  if (c.op == CaseOp::small_seq) return evaluate_small_seq(backend, c, inputs);
  if (c.op == CaseOp::sharding) return evaluate_sharding(backend, c);
  if (c.op != CaseOp::attention)
    return e.skip = "op " + std::string(to_string(c.op)) + " is not supported by this tool yet", e;
  if (!backend.attention()) return e.skip = who + " lacks the attention capability", e;
  const AttentionProblem problem = attention_problem(c);
  // unsupported() may assume a valid problem; an invalid one goes straight to
  // attention(), which must reject it with the code of DESIGN section 2.
  if (validate_attention(problem, &inputs))
    if (auto reason = backend.attention()->unsupported(problem))
      return e.unsupported = true, e.skip = who + " does not support this problem: " + *reason, e;
  auto r = backend.attention()->attention(problem, inputs);
  if (r) e.attention = r.value();
  else e.error = r.error();
  return e;
}

// The case file and, for attention, its inputs; prints and returns the error otherwise.
struct LoadedCase {
  Case c;
  AttentionInputs inputs;
};

Expected<LoadedCase> load_case(const std::string& path) {
  auto c = read_case_file(path);
  if (!c) return c.error();
  LoadedCase loaded{c.value(), {}};
  if (loaded.c.op == CaseOp::attention || loaded.c.op == CaseOp::small_seq ||
      (loaded.c.op == CaseOp::sharding && !loaded.c.sharding_shapes)) {
    auto in = attention_inputs(loaded.c);
    if (!in) return in.error();
    loaded.inputs = in.value();
  }
  return loaded;
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

// The backend named by --backend (default reference); nullptr after a usage error.
std::unique_ptr<Backend> backend_from(const Args& args) {
  const std::string name = flag(args, "--backend", "reference");
  auto backend = BackendRegistry::instance().make(name);
  if (!backend) usage_error("unknown backend " + name + " (registered: " + registered_names() + ")");
  return backend;
}

// ---------------------------------------------------------------------------
// eval
// ---------------------------------------------------------------------------

int eval_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--backend", "--memory-budget"}, error);
  if (!args) return usage_error(error);
  if (args->positional.size() != 1) return usage_error("eval takes exactly one case file");
  if (!apply_memory_budget(*args)) return 1;
  auto backend = backend_from(*args);
  if (!backend) return 1;
  auto loaded = load_case(args->positional[0]);
  if (!loaded) {
    print_json(error_to_json(loaded.error()));
    return 2;
  }
  if (loaded->c.op == CaseOp::kv_buffer) {  // kv_buffer_case.hpp
    if (!backend->kv_buffer()) {
      std::cerr << "attn-oracle eval: backend " << backend->name() << " lacks the kv_buffer capability\n";
      return 1;
    }
    const json out = evaluate_kv_buffer_case(*backend->kv_buffer(), loaded->c);
    print_json(out);
    return out.contains("error") ? 2 : 0;
  }
  const Evaluation e = evaluate(*backend, loaded->c, loaded->inputs);
  if (e.unsupported) {
    print_json(error_to_json(Error{ErrorCode::unsupported, e.skip}));
    return 2;
  }
  if (!e.skip.empty()) {
    std::cerr << "attn-oracle eval: " << e.skip << "\n";
    return 1;
  }
  print_json(e.to_json(attention_problem(loaded->c)));
  return e.error ? 2 : 0;
}

// ---------------------------------------------------------------------------
// replay: comparisons
// ---------------------------------------------------------------------------

struct Verdict {
  bool pass = true;
  std::vector<std::string> lines;
  void fail(const std::string& line) {
    pass = false;
    lines.push_back(line);
  }
};

std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    index[k] = shape[k] > 0 ? flat % shape[k] : 0;
    flat = shape[k] > 0 ? flat / shape[k] : 0;
  }
  return shape_to_string(index);
}

void compare_field(const char* name, const std::vector<int64_t>& got,
                   const std::vector<int64_t>& want, const Shape& shape, Verdict& v) {
  if (got.size() != want.size())
    return v.fail(std::string(name) + ": backend has " + std::to_string(got.size()) +
                  " entries, reference " + std::to_string(want.size()));
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      v.fail(std::string(name) + index_string(int64_t(i), shape) + ": backend " +
             std::to_string(got[i]) + ", reference " + std::to_string(want[i]));
}

void compare_metadata(const Metadata& got, const Metadata& want, Verdict& v) {
  if (got.extra != want.extra || got.batch != want.batch || got.max_segments != want.max_segments)
    v.fail("shape (extra, B, M): backend " + shape_to_string(got.extra) + ", " +
           std::to_string(got.batch) + ", " + std::to_string(got.max_segments) + "; reference " +
           shape_to_string(want.extra) + ", " + std::to_string(want.batch) + ", " +
           std::to_string(want.max_segments));
  Shape seqlens = want.extra, offsets = want.extra;
  seqlens.insert(seqlens.end(), {want.batch, want.max_segments});
  offsets.insert(offsets.end(), {want.batch, want.max_segments + 1});
  const Shape flat = {int64_t(want.cu_seqlens_q.size())};
  compare_field("q_seqlens", got.q_seqlens, want.q_seqlens, seqlens, v);
  compare_field("kv_seqlens", got.kv_seqlens, want.kv_seqlens, seqlens, v);
  compare_field("q_offsets", got.q_offsets, want.q_offsets, offsets, v);
  compare_field("kv_offsets", got.kv_offsets, want.kv_offsets, offsets, v);
  compare_field("cu_seqlens_q", got.cu_seqlens_q, want.cu_seqlens_q, flat, v);
  compare_field("cu_seqlens_kv", got.cu_seqlens_kv, want.cu_seqlens_kv, flat, v);
  compare_field("ragged_offsets_q", got.ragged_offsets_q, want.ragged_offsets_q, flat, v);
  compare_field("ragged_offsets_kv", got.ragged_offsets_kv, want.ragged_offsets_kv, flat, v);
  if (v.pass) v.lines.push_back("metadata: every field equal");
}

void compare_attention(const LoadedCase& lc, const AttentionResult& got,
                       const AttentionResult& want, Verdict& v) {
  if (got.o.size() != want.o.size() || got.lse.size() != want.lse.size() ||
      got.grads.has_value() != want.grads.has_value())
    return v.fail("result sizes: backend o " + std::to_string(got.o.size()) + ", lse " +
                  std::to_string(got.lse.size()) + (got.grads ? ", grads" : ", no grads") +
                  "; reference o " + std::to_string(want.o.size()) + ", lse " +
                  std::to_string(want.lse.size()) + (want.grads ? ", grads" : ", no grads"));
  std::vector<std::string> passed;
  for (const ToleranceCheck& t :
       check_attention_tolerance(attention_problem(lc.c), lc.inputs, got, want))
    t.pass ? passed.push_back(t.describe()) : v.fail(t.describe());
  v.lines.insert(v.lines.end(), passed.begin(), passed.end());  // failures first
}

// Per output (o, p, dq, dk, dv) by the tolerance rule against ref::small_seq.
void compare_small_seq(const LoadedCase& lc, const SmallSeqResult& got, const SmallSeqResult& want, Verdict& v) {
  std::vector<std::string> passed;
  for (const ToleranceCheck& t : check_small_seq_tolerance(attention_problem(lc.c), lc.inputs, got, want))
    t.pass ? passed.push_back(t.describe()) : v.fail(t.describe());
  v.lines.insert(v.lines.end(), passed.begin(), passed.end());  // failures first
}

void compare(const LoadedCase& lc, const Evaluation& got, const Evaluation& want, Verdict& v) {
  if (got.error && want.error) {
    if (got.error->code == want.error->code && lc.c.op == CaseOp::sharding && got.error->message != want.error->message)
      return v.fail("error message (DESIGN section 8 pins it): backend \"" + got.error->message + "\", reference \"" +
                    want.error->message + "\"");
    if (got.error->code == want.error->code)
      return v.lines.push_back("both reject the input with " + std::string(to_string(got.error->code)));
    return v.fail("error code: backend " + std::string(to_string(got.error->code)) +
                  ", reference " + std::string(to_string(want.error->code)) + " (" +
                  want.error->message + ")");
  }
  if (got.error) return v.fail("backend rejects a valid input: " + got.error->message);
  if (want.error)
    return v.fail("backend accepts an invalid input; reference: " +
                  std::string(to_string(want.error->code)) + " (" + want.error->message + ")");
  if (got.metadata) return compare_metadata(*got.metadata, *want.metadata, v);
  if (got.small_seq) return compare_small_seq(lc, *got.small_seq, *want.small_seq, v);
  if (got.sharding_ok) return v.lines.push_back("both accept the sharding");
  compare_attention(lc, *got.attention, *want.attention, v);
}

// Differences between the reference's JSON and the case's `expected` (numbers to
// `rel` relative; an expected error compares by code only).
void diff_json(const json& got, const json& want, const std::string& path, double rel,
               Verdict& v) {
  if (got.is_number_integer() && want.is_number_integer()) {
    if (got == want) return;
  } else if (got.is_number() && want.is_number()) {
    const double a = got.get<double>(), b = want.get<double>();
    if (std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b))) return;
  } else if (got.is_array() && want.is_array() && got.size() == want.size()) {
    for (size_t i = 0; i < got.size(); ++i)
      diff_json(got[i], want[i], path + "[" + std::to_string(i) + "]", rel, v);
    return;
  } else if (got.is_object() && want.is_object()) {
    for (auto it = want.begin(); it != want.end(); ++it)
      diff_json(got.contains(it.key()) ? got[it.key()] : json(), it.value(),
                path + (path.empty() ? "" : ".") + it.key(), rel, v);
    for (auto it = got.begin(); it != got.end(); ++it)
      if (!want.contains(it.key()))
        v.fail("reference disagrees with the case's expected result: " + path +
               (path.empty() ? "" : ".") + it.key() + ": not in expected");
    return;
  } else if (got == want) {
    return;
  }
  v.fail("reference disagrees with the case's expected result: " + path + ": reference " +
         got.dump() + ", expected " + want.dump());
}

void compare_expected(const LoadedCase& lc, const Evaluation& ref, const json& expected,
                      Verdict& v) {
  if (expected.is_object() && expected.contains("error")) {
    const json& want = expected["error"];
    const json code = want.is_object() && want.contains("code") ? want["code"] : json();
    if (!ref.error)
      return v.fail("reference disagrees with the case's expected result: it accepts the input, "
                    "expected error " + code.dump());
    if (lc.c.op == CaseOp::sharding && want.is_object() && want.contains("message"))  // DESIGN 8 pins the message
      diff_json(ref.error->message, want["message"], "error.message", 0.0, v);
    return diff_json(std::string(to_string(ref.error->code)), code, "error.code", 0.0, v);
  }
  const double rel = lc.c.op == CaseOp::attention || lc.c.op == CaseOp::small_seq || lc.c.op == CaseOp::sharding ? 1e-12 : 0.0;
  diff_json(ref.to_json(attention_problem(lc.c)), expected, "", rel, v);
}

// ---------------------------------------------------------------------------
// replay
// ---------------------------------------------------------------------------

int replay_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--backend"}, error);
  if (!args) return usage_error(error);
  if (args->positional.size() != 1) return usage_error("replay takes exactly one case file");
  auto backend = backend_from(*args);
  if (!backend) return 1;
  auto loaded = load_case(args->positional[0]);
  if (!loaded) {
    std::cerr << "attn-oracle replay: cannot read the case: " << to_string(loaded.error().code)
              << ": " << loaded.error().message << "\n";
    return 1;
  }
  if (loaded->c.op == CaseOp::kv_buffer) return replay_kv_buffer_case(*backend, loaded->c, std::cout);
  auto reference = make_reference_backend();
  const Evaluation want = evaluate(*reference, loaded->c, loaded->inputs);
  const Evaluation got = evaluate(*backend, loaded->c, loaded->inputs);
  for (const Evaluation* e : {&got, &want})
    if (!e->skip.empty()) {
      std::cerr << "attn-oracle replay: " << e->skip << "\n";
      return 1;
    }
  Verdict v;
  compare(*loaded, got, want, v);
  if (loaded->c.expected) {
    const size_t before = v.lines.size();
    compare_expected(*loaded, want, *loaded->c.expected, v);
    if (v.lines.size() == before) v.lines.push_back("reference matches the case's expected result");
  }
  std::cout << (v.pass ? "PASS" : "FAIL") << "\n";
  for (size_t i = 0; i < v.lines.size() && i < kMaxDifferenceLines; ++i)
    std::cout << "  " << v.lines[i] << "\n";
  if (v.lines.size() > kMaxDifferenceLines)
    std::cout << "  ... and " << v.lines.size() - kMaxDifferenceLines << " more\n";
  return v.pass ? 0 : 3;
}

// ---------------------------------------------------------------------------
// check, backends
// ---------------------------------------------------------------------------

template <class T>
bool parse_number(const std::string& text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

int check_command(std::vector<std::string> argv) {
  CheckOptions options;
  const auto deep = std::find(argv.begin(), argv.end(), "--deep");  // the one flag without a value
  if (deep != argv.end()) options.deep = true, argv.erase(deep);
  std::string error;
  auto args = parse_args(argv, {"--backend", "--cases", "--seed", "--filter", "--skips", "--xfails", "--report"}, error);
  if (!args) return usage_error(error);
  if (!args->positional.empty()) return usage_error("check takes no positional arguments");
  options.backend = flag(*args, "--backend", "all");
  options.filter = flag(*args, "--filter", "");
  options.skips_file = flag(*args, "--skips", "");
  options.xfails_file = flag(*args, "--xfails", "");
  options.report_dir = flag(*args, "--report", options.report_dir);
  if (options.backend != "all" && !BackendRegistry::instance().make(options.backend))
    return usage_error("unknown backend " + options.backend + " (registered: " +
                       registered_names() + ")");
  if (args->flags.count("--cases")) {
    int cases = 0;
    if (!parse_number(args->flags["--cases"], cases) || cases < 1)
      return usage_error("--cases needs a positive integer");
    options.cases = cases;
  }
  if (args->flags.count("--seed")) {
    uint64_t seed = 0;
    if (!parse_number(args->flags["--seed"], seed))
      return usage_error("--seed needs an unsigned 64-bit integer");
    options.seed = seed;
  }
  return run_check_command(options);
}

int backends_command(const std::vector<std::string>& argv) {
  if (!argv.empty()) return usage_error("backends takes no arguments");
  for (const std::string& name : BackendRegistry::instance().names()) {
    auto backend = BackendRegistry::instance().make(name);
    std::string caps;
    for (Capability c : backend->capabilities()) caps += (caps.empty() ? "" : ",") + std::string(to_string(c));
    std::cout << name << "\t" << backend->version() << "\t" << (caps.empty() ? "-" : caps) << "\n";
  }
  // Absent built-in backends, one "# name: why" line each (after the tab-separated rows).
  std::string note = builtin_backends_note();
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
  auto loaded = load_case(args->positional[0]);
  if (!loaded) return usage_error("cannot read " + args->positional[0] + ": " + loaded.error().message);
  auto reference = make_reference_backend();
  Case promoted = loaded->c;
  if (promoted.op == CaseOp::kv_buffer) {  // its own result format (kv_buffer_case.hpp)
    promoted.expected = evaluate_kv_buffer_case(*reference->kv_buffer(), promoted);
  } else {
    const Evaluation e = evaluate(*reference, loaded->c, loaded->inputs);
    if (!e.skip.empty()) return usage_error(e.skip);
    promoted.expected = e.to_json(attention_problem(promoted));
  }
  promoted.note = flag(*args, "--note", promoted.note);
  if (!write_case_file(args->positional[1], promoted)) return usage_error("cannot write " + args->positional[1]);
  std::cout << args->positional[1] << "\n";
  return 0;
}

int export_command(const std::vector<std::string>& argv) {
  std::string error;
  auto args = parse_args(argv, {"--npy", "--fixtures"}, error);
  if (!args) return usage_error(error);
  if (!args->positional.empty() || !args->flags.count("--npy")) return usage_error("export needs --npy DIR");
  return export_npy(flag(*args, "--fixtures", ATTN_ORACLE_FIXTURES_DIR), args->flags["--npy"]);
}

int coverage_command(const std::vector<std::string>& argv) {
  if (argv.size() > 1 || (argv.size() == 1 && argv[0] != "--markdown"))
    return usage_error("coverage takes only --markdown");
  std::cout << coverage_table(!argv.empty());
  return 0;
}

int run(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::cout << kUsage;
    return 1;
  }
  const std::string& command = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  register_builtin_backends();
  if (command == "eval") return eval_command(rest);
  if (command == "replay") return replay_command(rest);
  if (command == "check") return check_command(rest);
  if (command == "backends") return backends_command(rest);
  if (command == "promote") return promote_command(rest);
  if (command == "export") return export_command(rest);
  if (command == "coverage") return coverage_command(rest);
  return usage_error("unknown command " + command);
}

}  // namespace
}  // namespace attn_oracle

int main(int argc, char** argv) {
  try {
    return attn_oracle::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "attn-oracle: internal error: " << e.what() << "\n";
    return 1;
  }
}
