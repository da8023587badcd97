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

namespace attn_oracle::inline harness {
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

// What a child is asked to do: which property on which backend, from where,
// and (for a trial) which case. With the run's settings, it is the child's
// whole command line: `attn-oracle-child VERB --settings JSON --task JSON`. A
// child reads no setting from the environment (settings.hpp).
struct ChildTask {
  std::string property, backend;
  ResumePoint resume;
  int draw = 0;
  std::vector<size_t> path;
  std::string write_case;  // a trial: where to write the case it checks ("": nowhere)
};

std::vector<std::string> child_args(const std::string& verb, const RunSettings& s, const ChildTask& t) {
  const nlohmann::ordered_json task = {{"property", t.property}, {"backend", t.backend}, {"resume", to_json(t.resume)},
                                       {"draw", t.draw},         {"path", t.path},       {"write_case", t.write_case}};
  return {"attn-oracle-child", verb, "--settings", to_json(s).dump(), "--task", task.dump()};
}

ChildTask task_for(const PropertyDef& p, const Backend& b, const ResumePoint& resume = {}) {
  ChildTask t;
  t.property = p.id, t.backend = b.name(), t.resume = resume;
  return t;
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
  ChildTask task = task_for(p, b);
  task.draw = draw, task.path = path, task.write_case = write_to;
  auto child = Child::start(child_args("__child-trial", s, task));
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
      : args_(child_args("__child-trials", s, task_for(p, b))), timeout_(timeout) {}

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
  ChildTask task;
};

// `VERB --settings JSON --task JSON`, as child_args writes it.
std::optional<ChildArgs> parse_child(const std::vector<std::string>& args) {
  if (args.size() != 5 || args[1] != "--settings" || args[3] != "--task") return std::nullopt;
  try {
    ChildArgs c;
    c.settings = run_settings_from_json(nlohmann::json::parse(args[2]));
    const nlohmann::json task = nlohmann::json::parse(args[4]);
    ChildTask& t = c.task;
    t.property = task.at("property").get<std::string>(), t.backend = task.at("backend").get<std::string>();
    t.resume = resume_point_from_json(task.at("resume"));
    t.draw = task.at("draw").get<int>(), t.path = task.at("path").get<std::vector<size_t>>();
    t.write_case = task.at("write_case").get<std::string>();
    return c;
  } catch (const std::exception&) {  // nlohmann::json's parse and type errors, a bad shard or profile
    return std::nullopt;
  }
}

constexpr const char* kTrialKinds[] = {"passed", "failed", "declined", "none"};  // by TrialResult::Kind

void say(const std::string& line) { write_all(kProtocolFd, line + "\n"); }

// A `__child-property` child's run, told to its supervisor line by line (run_child reads them).
struct ToSupervisor : RunListener {
  void before_trial(int draw, const std::vector<size_t>& path) override {
    say("trial " + std::to_string(draw) + " " + path_text(path));
  }
  void after_draw(int draw, std::string_view kind) override { say("draw " + std::to_string(draw) + " " + std::string(kind)); }
  void failure_found(const PropertyFailure& f) override { say("failure " + failure_to_json(f).dump()); }
  void before_stored_case(const std::string& path) override { say("stored " + path); }
  void store_replayed(const StoreReplay& r) override { say("store " + store_replay_to_json(r).dump()); }
};

}  // namespace

bool is_isolation_child_verb(const std::string& verb) {
  return verb == "__child-property" || verb == "__child-trial" || verb == "__child-trials";
}

int run_isolation_child(const std::vector<std::string>& args) {
  const auto c = parse_child(args);
  const PropertyDef* property = c ? find_property(c->task.property) : nullptr;
  auto backend = c ? BackendRegistry::instance().make(c->task.backend) : nullptr;
  if (!property || !backend) return 2;
  const RunSettings& s = c->settings;
  const ChildTask& task = c->task;
  if (args[0] == "__child-trial") {
    const TrialResult r = run_draw(*property, draw_context(*backend, s.draws), s, task.draw, task.path, [&](const Case& drawn) {
      if (task.write_case.empty()) return;
      Case written = drawn;
      PropertyRecord& record = written.property ? *written.property : written.property.emplace();
      record.id = property->id, record.backend = backend->name(), record.backend_version = backend->version();
      record.seed = s.seed;
      written.note = "the case " + property->id + " was checking on backend " + backend->name() + " when it crashed or hung (seed " +
                     std::to_string(s.seed) + ", draw " + std::to_string(task.draw) + ")";
      write_case_file(task.write_case, written);
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
  ToSupervisor to_supervisor;
  const PropertyOutcome o = run_property(*property, *backend, s, &to_supervisor, task.resume);
  say("outcome " + outcome_to_json(o).dump());
  return 0;
}

namespace {

// One child's share of a run: from its resume point's first draw until it ends or
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

ChildRun run_child(const PropertyDef& property, Backend& backend, const RunSettings& settings, const ResumePoint& resume,
                   const IsolationSettings& isolation, int total, int done_before, RunListener& listener) {
  ChildRun run;
  auto child = Child::start(child_args("__child-property", settings, task_for(property, backend, resume)));
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
      listener.progress(done_before + out.drawn, total);
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
                                      const IsolationSettings& isolation, RunListener* listener_or_none) {
  if (skipped_before_drawing(property, draw_context(backend, settings.draws)))
    return run_property(property, backend, settings);  // nothing runs
  RunListener quiet;
  RunListener& listener = listener_or_none ? *listener_or_none : quiet;
  PropertyOutcome out;
  out.property = property.id, out.backend = backend.name(), out.backend_version = backend.version();
  out.seed = settings.seed;
  const auto start = std::chrono::steady_clock::now();
  const int total = draws_in_shard(settings.cases, settings.shard);
  ResumePoint resume;
  bool no_child = false;  // the program could not run a child at all
  for (;;) {
    resume.known_signatures.clear();
    for (const PropertyFailure& f : out.failures) resume.known_signatures.insert(f.signature);
    ChildRun run = run_child(property, backend, settings, resume, isolation, total, out.drawn, listener);
    merge_outcome(out, run.outcome);
    if (!run.crashed) break;
    if (!run.spoke) {  // the program itself cannot run a child: nothing to shrink, and retrying repeats it
      out.message = "the isolated child process ended before its first draw (" + run.how +
                    "): its stderr says why; --no-isolation runs the property in this process";
      no_child = true;
      break;
    }
    if (!run.stored_case.empty()) {  // a stored case crashed it: a failure as it is, and no replay again
      out.failures.push_back(stored_crash(property, backend, settings, run.stored_case, run.how));
      ++out.store.replayed, ++out.store.still_failing;
      resume.replay_store = false;
      continue;
    }
    // A crash in the search is a draw that failed; in a shrink, that draw was counted already.
    if (run.path.empty()) ++out.drawn, ++out.failed;
    if (!resume.known_signatures.count(std::string(kCrashSignature)))
      out.failures.push_back(shrink_crash(property, backend, settings, isolation, run.draw, run.path, run.how, run.timed_out));
    else  // the crash shown already: one more draw of its cluster
      for (const PropertyFailure& f : out.failures)
        if (f.signature == kCrashSignature) merge_clusters(out.clusters, {cluster_of_message(f.message, run.draw)});
    resume.first_draw = run.draw + 1;
    // After a hang, more of the same would cost a time limit each: stop there.
    if (run.timed_out || resume.first_draw >= settings.cases) break;
  }
  rank_failures(out, settings.max_failures);
  settle_status(out);
  if (no_child) out.status = PropertyOutcome::Status::failed;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace attn_oracle::harness
