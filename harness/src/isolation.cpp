// isolation.cpp: properties in child processes, and the shrinking of a crash
// (isolation.hpp). Tested by tests/isolation_test.cpp (a backend that
// segfaults on one input class, one that hangs) and the vendor consumer project.
#include "attn_oracle/harness/isolation.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attn_oracle/harness/report.hpp"

extern char** environ;

namespace attn_oracle {
namespace {

constexpr int kProtocolFd = 3;  // child -> supervisor: what it is doing, what it found
constexpr int kRequestFd = 4;   // supervisor -> a `__child-trials` child: the next candidate
constexpr int kMaxCrashShrinkTrials = 400;

// ------------------------------------------------------------------ the child process
bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

class Child {
 public:
  // With `requests`, the child also reads lines on kRequestFd (send()).
  static std::optional<Child> start(const std::vector<std::string>& args, bool requests = false) {
    int fds[2], in[2] = {-1, -1};
    if (!cloexec_pipe(fds)) return std::nullopt;
    if (requests && !cloexec_pipe(in, /*socket=*/true)) return close(fds[0]), close(fds[1]), std::nullopt;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], kProtocolFd);
    if (requests) posix_spawn_file_actions_adddup2(&actions, in[0], kRequestFd);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);  // Ctrl-C is the supervisor's to handle, not the child's
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (requests) close(in[0]);
    if (rc != 0) {
      close(fds[0]);
      if (requests) close(in[1]);
      return std::nullopt;
    }
    return Child(pid, fds[0], in[1]);
  }

  Child(Child&& o) noexcept : pid_(o.pid_), fd_(o.fd_), request_fd_(o.request_fd_), buffer_(std::move(o.buffer_)) {
    o.pid_ = -1, o.fd_ = -1, o.request_fd_ = -1;
  }
  ~Child() {
    if (request_fd_ >= 0) close(request_fd_);
    if (pid_ > 0) finish(/*kill_it=*/true);
    if (fd_ >= 0) close(fd_);
  }

  // One request line to a child started with `requests`; false if it is gone
  // (a socket, so a write to a dead child fails instead of raising SIGPIPE).
  bool send(const std::string& line) {
    const std::string text = line + "\n";
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::send(request_fd_, text.data() + done, text.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // The next protocol line; nullopt at the end of the stream, or when none
  // came within `timeout` seconds (then timed_out is set).
  std::optional<std::string> next_line(double timeout, bool& timed_out) {
    timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    for (;;) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return timed_out = true, std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[65536];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Waits for the child (killing it first when asked); "" for a clean exit 0,
  // else how it ended ("SIGSEGV (signal 11)", "exit status 3").
  std::string finish(bool kill_it) {
    if (pid_ <= 0) return "";
    if (kill_it) kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      const char* name = sigabbrev_np(sig);
      return std::string(name ? std::string("SIG") + name : "signal") + " (signal " + std::to_string(sig) + ")";
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return "exit status " + std::to_string(WEXITSTATUS(status));
    return "";
  }

 private:
  Child(pid_t pid, int fd, int request_fd) : pid_(pid), fd_(fd), request_fd_(request_fd) {}

  // A pipe (or socket pair) whose ends sit above the protocol fds and close on
  // exec: the child keeps only the copies dup2'd onto kProtocolFd / kRequestFd.
  static bool cloexec_pipe(int fds[2], bool socket = false) {
    int raw[2];
    if ((socket ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, raw) : pipe2(raw, O_CLOEXEC)) != 0) return false;
    fds[0] = fcntl(raw[0], F_DUPFD_CLOEXEC, 10), fds[1] = fcntl(raw[1], F_DUPFD_CLOEXEC, 10);
    close(raw[0]), close(raw[1]);
    if (fds[0] >= 0 && fds[1] >= 0) return true;
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    return false;
  }

  pid_t pid_;
  int fd_, request_fd_;
  std::string buffer_;
};

// ------------------------------------------------------------------ arguments
std::string path_text(const std::vector<size_t>& path) {
  std::string s;
  for (size_t i : path) {
    if (!s.empty()) s += ',';
    s += std::to_string(i);
  }
  return s.empty() ? "-" : s;
}

std::vector<size_t> path_from(const std::string& text) {
  std::vector<size_t> path;
  if (text == "-") return path;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) path.push_back(std::stoull(part));
  return path;
}

// Every setting the child runs with, on its command line: a child reads no
// setting from the environment (settings.hpp).
std::vector<std::string> settings_args(const std::string& verb, const PropertyDef& p, const Backend& b,
                                       const RunSettings& s) {
  return {"attn-oracle-child", verb, "--property", p.id, "--backend", b.name(), "--seed", std::to_string(s.seed),
          "--cases", std::to_string(s.cases), "--max-size", std::to_string(s.max_size), "--shard",
          std::to_string(s.shard_index) + "/" + std::to_string(s.shard_count), "--max-failures",
          std::to_string(s.max_failures), "--failures-dir", s.failures_dir, "--program", s.program,
          "--first-draw", std::to_string(s.first_draw), "--known", nlohmann::json(s.known_signatures).dump(),
          "--store", s.use_store ? (s.replay_store ? "replay" : "keep") : "off",
          "--profile", std::string(to_string(s.draws.profile)), "--shape-stable", s.draws.shape_stable ? "1" : "0",
          "--draw-log", s.draw_log};
}

// ------------------------------------------------------------------ crashes
struct CrashTrial {
  enum class Kind { none, passed, declined, failed, crashed } kind = Kind::none;
  std::string how;  // crashed: "SIGSEGV (signal 11)" or "no answer within 120 s"
};

CrashTrial trial_result(const std::string& line) {
  if (line.rfind("result none", 0) == 0) return {CrashTrial::Kind::none, ""};
  if (line.rfind("result passed", 0) == 0) return {CrashTrial::Kind::passed, ""};
  if (line.rfind("result declined", 0) == 0) return {CrashTrial::Kind::declined, ""};
  return {CrashTrial::Kind::failed, ""};
}

std::string no_answer(double timeout) { return "no answer within " + std::to_string(static_cast<int>(timeout)) + " s"; }

// Draw k walked down `path`, run in a fresh child that first writes the case to `write_to`.
CrashTrial trial_in_fresh_child(const PropertyDef& p, Backend& b, const RunSettings& s, int draw,
                                const std::vector<size_t>& path, double timeout, const std::string& write_to) {
  std::vector<std::string> args = settings_args("__child-trial", p, b, s);
  args.insert(args.end(), {"--draw", std::to_string(draw), "--path", path_text(path), "--write-case", write_to});
  auto child = Child::start(args);
  if (!child) return {CrashTrial::Kind::crashed, "the child process could not be started"};
  bool timed_out = false;
  std::optional<std::string> line = child->next_line(timeout, timed_out);
  if (timed_out) return child->finish(true), CrashTrial{CrashTrial::Kind::crashed, no_answer(timeout)};
  const std::string ended = child->finish(false);
  if (!line) return {CrashTrial::Kind::crashed, ended.empty() ? "an exit without an answer" : ended};
  return trial_result(*line);
}

// Candidates of a shrink, one after another in one child (`__child-trials`),
// and a new child after each crash: starting a process is the slow part
// (seconds, for a sanitizer build), and most candidates do not crash.
class TrialChildren {
 public:
  TrialChildren(const PropertyDef& p, Backend& b, const RunSettings& s, double timeout)
      : args_(settings_args("__child-trials", p, b, s)), timeout_(timeout) {}

  CrashTrial run(int draw, const std::vector<size_t>& path) {
    if (!child_)
      if (auto started = Child::start(args_, /*requests=*/true)) child_.emplace(std::move(*started));
    if (!child_) return {CrashTrial::Kind::crashed, "the child process could not be started"};
    bool timed_out = false;
    std::optional<std::string> line;
    if (child_->send(std::to_string(draw) + " " + path_text(path))) line = child_->next_line(timeout_, timed_out);
    if (line) return trial_result(*line);
    std::string how = timed_out ? no_answer(timeout_) : child_->finish(false);
    if (timed_out) child_->finish(true);
    child_.reset();
    return {CrashTrial::Kind::crashed, how.empty() ? "an exit without an answer" : how};
  }

 private:
  std::vector<std::string> args_;
  double timeout_;
  std::optional<Child> child_;
};

// The crash at (draw, path) shrunk over child processes, written, as a
// failure. A hang is written as it was found: every smaller candidate that
// still hangs would cost a whole time limit.
PropertyFailure shrink_crash(const PropertyDef& p, Backend& b, const RunSettings& s, const IsolationSettings& iso,
                             int draw, std::vector<size_t> path, std::string how, bool hang) {
  PropertyFailure f;
  f.draw = draw;
  TrialChildren children(p, b, s, iso.case_timeout_seconds);
  int tries = hang ? kMaxCrashShrinkTrials : 0;
  for (bool smaller = true; smaller && tries < kMaxCrashShrinkTrials;) {
    smaller = false;
    for (size_t i = 0; tries < kMaxCrashShrinkTrials; ++i, ++tries) {
      path.push_back(i);
      const CrashTrial t = children.run(draw, path);
      if (t.kind == CrashTrial::Kind::crashed) {
        how = t.how, smaller = true, ++f.shrinks;
        break;
      }
      path.pop_back();
      if (t.kind == CrashTrial::Kind::none) break;
    }
  }
  f.message = "the backend crashed or hung while this case was checked: " + how;
  f.signature = "crash";
  const auto file = std::filesystem::path(property_store_dir(s.failures_dir, b.identity(), p.id)) /
                    ("crash." + std::to_string(getpid()) + ".tmp");
  std::filesystem::create_directories(file.parent_path());
  // Written by a fresh child, which also shows whether the case crashes alone,
  // without the candidates that ran before it in the same process; then kept
  // under its hash like every counterexample.
  const CrashTrial alone =
      trial_in_fresh_child(p, b, s, draw, path, iso.case_timeout_seconds, std::filesystem::absolute(file).string());
  if (alone.kind != CrashTrial::Kind::crashed && !hang)
    f.message += " (run alone in a fresh process it did not crash: the crash depends on earlier calls)";
  if (const Expected<Case> written = read_case_file(file.string()))
    f.case_path = keep_counterexample(written.value(), b.identity(), p.id, s);
  std::error_code ec;
  std::filesystem::remove(file, ec);
  set_replay_commands(f, s, b.name(), p.id, true);
  return f;
}

// A stored case that crashed or hung the child replaying it: a failure from
// the store, not shrunk again.
PropertyFailure stored_crash(const PropertyDef& p, Backend& b, const RunSettings& s, const std::string& case_path,
                             const std::string& how) {
  PropertyFailure f;
  f.message = "the backend crashed or hung while this case was checked: " + how;
  f.signature = std::string(kCrashSignature);
  f.from_store = true;
  f.case_path = case_path;
  set_replay_commands(f, s, b.name(), p.id, false);
  return f;
}

// ------------------------------------------------------------------ the child verbs
struct ChildArgs {
  RunSettings settings;
  std::string property, backend, write_case;
  int draw = 0;
  std::vector<size_t> path;
};

std::optional<ChildArgs> parse_child(const std::vector<std::string>& args) {
  ChildArgs c;
  try {
    for (size_t i = 1; i + 1 < args.size(); i += 2) {
      const std::string& k = args[i];
      const std::string& v = args[i + 1];
      if (k == "--property") c.property = v;
      else if (k == "--backend") c.backend = v;
      else if (k == "--seed") c.settings.seed = std::stoull(v);
      else if (k == "--cases") c.settings.cases = std::stoi(v);
      else if (k == "--max-size") c.settings.max_size = std::stoi(v);
      else if (k == "--max-failures") c.settings.max_failures = std::stoi(v);
      else if (k == "--failures-dir") c.settings.failures_dir = v;
      else if (k == "--program") c.settings.program = v;
      else if (k == "--draw") c.draw = std::stoi(v);
      else if (k == "--path") c.path = path_from(v);
      else if (k == "--write-case") c.write_case = v;
      else if (k == "--first-draw") c.settings.first_draw = std::stoi(v);
      else if (k == "--known") c.settings.known_signatures = nlohmann::json::parse(v).get<std::set<std::string>>();
      else if (k == "--store") c.settings.use_store = v != "off", c.settings.replay_store = v == "replay";
      else if (k == "--profile") c.settings.draws.profile = v == "deep" ? SizeProfile::deep : SizeProfile::ci;
      else if (k == "--shape-stable") c.settings.draws.shape_stable = v == "1";
      else if (k == "--draw-log") c.settings.draw_log = v;
      else if (k == "--shard") {
        const size_t slash = v.find('/');
        c.settings.shard_index = std::stoi(v.substr(0, slash)), c.settings.shard_count = std::stoi(v.substr(slash + 1));
      } else return std::nullopt;
    }
  } catch (const std::exception&) {  // also nlohmann::json's parse and type errors
    return std::nullopt;
  }
  return c;
}

constexpr const char* kTrialKinds[] = {"passed", "failed", "declined", "none"};  // by TrialResult::Kind

void say(const std::string& line) { write_all(kProtocolFd, line + "\n"); }

}  // namespace

bool is_isolation_child_verb(const std::string& verb) {
  return verb == "__child-property" || verb == "__child-trial" || verb == "__child-trials";
}

int run_isolation_child(const std::vector<std::string>& args) {
  const auto c = parse_child(args);
  const PropertyDef* property = c ? find_property(c->property) : nullptr;
  auto backend = c ? BackendRegistry::instance().make(c->backend) : nullptr;
  if (!property || !backend) return 2;
  RunSettings s = c->settings;
  if (args[0] == "__child-trial") {
    const TrialResult r = run_draw(*property, draw_context(*backend, s.draws), s, c->draw, c->path, [&](const Case& drawn) {
      if (c->write_case.empty()) return;
      Case written = drawn;
      PropertyRecord& record = written.property ? *written.property : written.property.emplace();
      record.id = property->id, record.backend = backend->name(), record.backend_version = backend->version();
      record.seed = s.seed;
      written.note = "the case " + property->id + " was checking on backend " + backend->name() + " when it crashed or hung (seed " +
                     std::to_string(s.seed) + ", draw " + std::to_string(c->draw) + ")";
      write_case_file(c->write_case, written);
    });
    say(std::string("result ") + kTrialKinds[static_cast<int>(r.kind)]);
    return 0;
  }
  if (args[0] == "__child-trials") {  // "draw path" lines on kRequestFd until it closes
    FILE* requests = fdopen(kRequestFd, "r");
    if (!requests) return 2;
    char line[4096];
    const DrawContext context = draw_context(*backend, s.draws);
    while (std::fgets(line, sizeof line, requests)) {
      std::istringstream words(line);
      int draw = 0;
      std::string path;
      if (!(words >> draw >> path)) return 2;
      const TrialResult r = run_draw(*property, context, s, draw, path_from(path), nullptr);
      say(std::string("result ") + kTrialKinds[static_cast<int>(r.kind)]);
    }
    return 0;
  }
  s.before_trial = [](int draw, const std::vector<size_t>& path) {
    say("trial " + std::to_string(draw) + " " + path_text(path));
  };
  s.after_draw = [](int draw, std::string_view kind) { say("draw " + std::to_string(draw) + " " + std::string(kind)); };
  s.on_failure = [](const PropertyFailure& f) { say("failure " + failure_to_json(f).dump()); };
  s.before_stored_case = [](const std::string& path) { say("stored " + path); };
  s.on_store_replayed = [](const StoreReplay& r) { say("store " + store_replay_to_json(r).dump()); };
  const PropertyOutcome o = run_property(*property, *backend, s);
  say("outcome " + outcome_to_json(o).dump());
  return 0;
}

namespace {

// One child's share of a run: from settings.first_draw until it ends or
// crashes. What it reported before a crash (draws, shrunk failures) is kept.
struct ChildRun {
  PropertyOutcome outcome;  // the child's own, or what it reported before it died
  bool crashed = false, timed_out = false;
  bool spoke = false;       // it said anything at all: a child that dies first is not a case's crash
  std::string how;          // how it died
  int draw = 0;             // the trial in flight when it died
  std::vector<size_t> path;
  std::string stored_case;  // the stored case in flight when it died (failure_store.hpp)
};

ChildRun run_child(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                   const IsolationSettings& isolation, int total, int done_before, const ProgressFn& progress) {
  ChildRun run;
  auto child = Child::start(settings_args("__child-property", property, backend, settings));
  if (!child) return run.crashed = true, run.how = "the child process could not be started", run;
  PropertyOutcome& out = run.outcome;
  while (auto line = child->next_line(isolation.case_timeout_seconds, run.timed_out)) {
    run.spoke = true;
    std::istringstream words(*line);
    std::string verb;
    words >> verb;
    if (verb == "outcome") {
      child->finish(false);
      run.outcome = outcome_from_json(nlohmann::json::parse(line->substr(8)));
      return run;
    }
    if (verb == "stored") {
      run.stored_case = line->substr(7);
    } else if (verb == "store") {
      out.store = store_replay_from_json(nlohmann::json::parse(line->substr(6)));
      run.stored_case.clear();
    } else if (verb == "trial") {
      run.stored_case.clear();
      std::string p;
      words >> run.draw >> p;
      run.path = path_from(p);
    } else if (verb == "draw") {
      std::string kind;
      words >> run.draw >> kind;
      run.path.clear();
      ++out.drawn;
      out.passed += kind == "passed", out.declined += kind == "declined", out.failed += kind == "failed";
      if (progress) progress(done_before + out.drawn, total);
    } else if (verb == "failure") {
      out.failures.push_back(failure_from_json(nlohmann::json::parse(line->substr(8))));
    }
  }
  run.crashed = true;
  run.how = run.timed_out ? "no answer within " + std::to_string(static_cast<int>(isolation.case_timeout_seconds)) + " s"
                          : child->finish(false);
  if (run.timed_out) child->finish(true);
  if (run.how.empty()) run.how = "an exit without an outcome";
  return run;
}

}  // namespace

// Children in turn: each runs the property from a draw on; when one crashes,
// the crash is shrunk and reported (once per property) and the next child
// goes on from the draw after it, with the failures found so far, until the
// draws run out. A hang ends the property.
PropertyOutcome run_property_isolated(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                                      const IsolationSettings& isolation, const ProgressFn& progress) {
  if (skipped_before_drawing(property, draw_context(backend, settings.draws)))
    return run_property(property, backend, settings);  // nothing runs
  PropertyOutcome out;
  out.property = property.id, out.backend = backend.name(), out.backend_version = backend.version();
  out.seed = settings.seed;
  const auto start = std::chrono::steady_clock::now();
  const int total = (settings.cases - settings.shard_index + settings.shard_count - 1) / std::max(1, settings.shard_count);
  RunSettings s = settings;
  bool no_child = false;  // the program could not run a child at all
  for (;;) {
    s.known_signatures.clear();
    for (const PropertyFailure& f : out.failures) s.known_signatures.insert(f.signature);
    ChildRun run = run_child(property, backend, s, isolation, total, out.drawn, progress);
    merge_outcome(out, run.outcome);
    if (!run.crashed) break;
    if (!run.spoke) {  // the program itself cannot run a child: nothing to shrink, and retrying repeats it
      out.message = "the isolated child process ended before its first draw (" + run.how +
                    "): its stderr says why; --no-isolation runs the property in this process";
      no_child = true;
      break;
    }
    if (!run.stored_case.empty()) {  // a stored case crashed it: a failure as it is, and no replay again
      out.failures.push_back(stored_crash(property, backend, s, run.stored_case, run.how));
      ++out.store.replayed, ++out.store.still_failing;
      s.replay_store = false;
      continue;
    }
    // A crash in the search is a draw that failed; in a shrink, that draw was counted already.
    if (run.path.empty()) ++out.drawn, ++out.failed;
    if (!s.known_signatures.count(std::string(kCrashSignature)))
      out.failures.push_back(shrink_crash(property, backend, s, isolation, run.draw, run.path, run.how, run.timed_out));
    else  // the crash shown already: one more draw of its cluster
      for (const PropertyFailure& f : out.failures)
        if (f.signature == kCrashSignature) merge_clusters(out.clusters, {cluster_of_message(f.message, run.draw)});
    s.first_draw = run.draw + 1;
    // After a hang, more of the same would cost a time limit each: stop there.
    if (run.timed_out || s.first_draw >= settings.cases) break;
  }
  rank_failures(out, settings.max_failures);
  settle_status(out);
  if (no_child) out.status = PropertyOutcome::Status::failed;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace attn_oracle
