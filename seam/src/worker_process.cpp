// worker_process.cpp: see worker_process.hpp. Tested by tests/process_backend_test.cpp
// (workers written in sh that crash, hang, print garbage or greet wrongly).
#include "worker_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline seam {
namespace {

constexpr size_t kStderrKeep = 64 * 1024;
constexpr size_t kStderrLines = 40;
constexpr int kExitGraceMs = 2000;  // after its stdout closes, how long a worker may take to exit

using Clock = std::chrono::steady_clock;

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return std::string(name ? std::string("SIG") + name : "signal") + " (signal " + std::to_string(sig) + ")";
  }
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

}  // namespace

WorkerProcess::WorkerProcess(std::string command, double timeout_seconds)
    : command_(std::move(command)), timeout_(timeout_seconds) {}

WorkerProcess::~WorkerProcess() { stop(/*kill_it=*/true); }

void WorkerProcess::start() {
  int in[2], out[2], err[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) fail("cannot create the worker's stdin", false);
  if (pipe2(out, O_CLOEXEC) != 0) close(in[0]), close(in[1]), fail("cannot create the worker's stdout", false);
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    fail("cannot create the worker's stderr", false);
  }
  const pid_t parent = getpid();
  const char* shell_command = command_.c_str();
  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a supervisor killed mid-call takes its worker along
    if (getppid() != parent) _exit(127);
    dup2(in[1], 0), dup2(out[1], 1), dup2(err[1], 2);
    for (int fd = 3; fd < 1024; ++fd) close(fd);  // the isolation pipes of a child stay with it
    execl("/bin/sh", "sh", "-c", shell_command, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[1]), close(out[1]), close(err[1]);
  if (pid < 0) {
    close(in[0]), close(out[0]), close(err[0]);
    fail(std::string("cannot start the worker: ") + std::strerror(errno), false);
  }
  setpgid(pid, pid);
  ++starts_.total;
  if (failed_) ++starts_.restarts, failed_ = false;
  pid_ = pid, in_ = in[0], out_ = out[0], err_ = err[0];
  set_nonblocking(in_), set_nonblocking(out_), set_nonblocking(err_);
  reader_ = wire::FrameReader();
  stderr_.clear();  // a failure reports the stderr of the worker that failed, not of its predecessors

  wire::Message greeting;
  Ended ended;
  try {
    ended = transfer("", greeting, hello_timeout());
  } catch (const wire::ProtocolError& e) {
    fail(std::string("the worker's first message is not a hello frame: ") + e.what(), false);
  }
  if (ended == Ended::timeout) fail("the worker sent no hello within " + std::to_string(int(hello_timeout())) + " s", true);
  if (ended == Ended::eof) {
    drain_stderr(200);
    fail("the worker ended before its hello: " + stop(false), false);
  }
  const nlohmann::json& h = greeting.header;
  const std::string protocol = h.value("protocol", nlohmann::json()).is_string() ? h["protocol"].get<std::string>() : h.value("protocol", nlohmann::json()).dump();
  if (protocol != wire::kWorkerProtocol)
    fail("the worker speaks protocol " + protocol + "; this build speaks " + wire::kWorkerProtocol + " (docs/protocol.md)", false);
  if (!h.contains("capabilities") || !h["capabilities"].is_array() || h["capabilities"].empty())
    fail("the worker's hello announces no capability: " + h.dump().substr(0, 300), false);
  if (h.contains("outputs")) {
    const nlohmann::json& outputs = h["outputs"];
    const std::set<nlohmann::json> known = {"lse", "gradients", "small_seq_p"};
    if (!outputs.is_array() || std::any_of(outputs.begin(), outputs.end(), [&](const nlohmann::json& o) { return !known.count(o); }))
      fail("the worker's hello has outputs " + outputs.dump().substr(0, 200) +
               ": a list of the optional outputs it produces, each \"lse\", \"gradients\" or \"small_seq_p\"", false);
  }
  if (h.contains("lse_dtype") && h["lse_dtype"] != "float32" && h["lse_dtype"] != "input")
    fail("the worker's hello has lse_dtype " + h["lse_dtype"].dump().substr(0, 100) +
             ": \"float32\" (the default) or \"input\" (lse stored in the problem's dtype)", false);
  if (h.contains("kv_buffer_steps")) {
    const nlohmann::json& steps = h["kv_buffer_steps"];
    const std::set<nlohmann::json> known = {"write_slice", "attend", "stream"};
    if (!steps.is_array() || std::any_of(steps.begin(), steps.end(), [&](const nlohmann::json& o) { return !known.count(o); }))
      fail("the worker's hello has kv_buffer_steps " + steps.dump().substr(0, 200) +
               ": a list of the K/V buffer steps it serves, each \"write_slice\", \"attend\" or \"stream\"", false);
  }
  if (h.contains("context_parallel_ops")) {
    const nlohmann::json& ops = h["context_parallel_ops"];
    const std::set<nlohmann::json> known = {"cp_rank_metadata",   "cp_rank_attention", "cp_attention",
                                            "validate_cp_layout", "cp_reorder",        "cp_balance_bound"};
    if (!ops.is_array() || std::any_of(ops.begin(), ops.end(), [&](const nlohmann::json& o) { return !known.count(o); }))
      fail("the worker's hello has context_parallel_ops " + ops.dump().substr(0, 200) +
               ": a list of the optional context-parallel ops it answers, each \"cp_rank_metadata\", "
               "\"cp_rank_attention\", \"cp_attention\", \"validate_cp_layout\", \"cp_reorder\" or \"cp_balance_bound\"",
           false);
  }
  if (h.contains("domain")) try {
      wire::read_domain(h["domain"]);
    } catch (const wire::ProtocolError& e) {
      fail(std::string("the worker's hello has a bad domain: ") + e.what() + " (docs/protocol.md)", false);
    }
  hello_ = h;
}

const nlohmann::json& WorkerProcess::hello() {
  if (pid_ < 0) start();
  return hello_;
}

wire::Message WorkerProcess::exchange(const std::string& op, const std::string& frame) {
  if (pid_ < 0) start();
  wire::Message reply;
  Ended ended;
  try {
    ended = transfer(frame, reply, timeout_);
  } catch (const wire::ProtocolError& e) {
    fail("the worker broke the protocol answering " + op + ": " + e.what(), false);
  }
  if (ended == Ended::timeout)
    fail("the worker answered nothing to " + op + " within " + std::to_string(int(timeout_)) +
             " s (ATTN_ORACLE_WORKER_TIMEOUT); it was killed",
         true);
  if (ended == Ended::eof) {
    const std::string how = stop(false);
    fail("the worker ended while answering " + op + ": " + (how.empty() ? "exit status 0" : how), false);
  }
  return reply;
}

WorkerProcess::Ended WorkerProcess::transfer(const std::string& out, wire::Message& in, double timeout_seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  size_t written = 0;
  char chunk[1 << 16];
  for (;;) {
    if (auto m = reader_.next()) {
      in = std::move(*m);
      return Ended::message;
    }
    pollfd fds[3] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}, {in_, POLLOUT, 0}};
    const int n = written < out.size() ? 3 : 2;
    if (err_ < 0) fds[1].fd = -1;
    const int ready = poll(fds, n, ms_until(deadline));
    if (ready < 0 && errno != EINTR) return Ended::eof;
    if (ready <= 0) {
      if (ms_until(deadline) == 0) return Ended::timeout;
      continue;
    }
    if (fds[1].revents) {
      const ssize_t got = read(err_, chunk, sizeof chunk);
      if (got > 0) stderr_.append(chunk, static_cast<size_t>(got));
      else if (got == 0) close_fd(err_);
      if (stderr_.size() > 2 * kStderrKeep) stderr_.erase(0, stderr_.size() - kStderrKeep);
    }
    if (n == 3 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t sent = send(in_, out.data() + written, out.size() - written, MSG_NOSIGNAL);
      if (sent < 0 && errno != EAGAIN && errno != EINTR) return Ended::eof;  // it closed its stdin: it is ending
      if (sent > 0) written += static_cast<size_t>(sent);
    }
    if (fds[0].revents) {
      const ssize_t got = read(out_, chunk, sizeof chunk);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) return Ended::eof;
      if (got > 0) reader_.feed(chunk, static_cast<size_t>(got));
    }
  }
}

void WorkerProcess::drain_stderr(int wait_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  char chunk[1 << 16];
  while (err_ >= 0) {
    pollfd p{err_, POLLIN, 0};
    if (poll(&p, 1, ms_until(deadline)) <= 0) break;
    const ssize_t got = read(err_, chunk, sizeof chunk);
    if (got <= 0) {
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      close_fd(err_);
      break;
    }
    stderr_.append(chunk, static_cast<size_t>(got));
  }
  if (stderr_.size() > kStderrKeep) stderr_.erase(0, stderr_.size() - kStderrKeep);
}

std::string WorkerProcess::stop(bool kill_it) {
  if (pid_ < 0) return "";
  close_fd(in_);  // a worker reading its stdin ends on EOF
  int status = 0;
  bool reaped = false;
  if (!kill_it)
    for (auto until = Clock::now() + std::chrono::milliseconds(kExitGraceMs); Clock::now() < until;) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  kill(-pid_, SIGKILL);  // the group: sh and whatever it started
  if (!reaped) waitpid(pid_, &status, 0);
  drain_stderr(kill_it ? 0 : 200);
  close_fd(out_), close_fd(err_);
  pid_ = -1;
  if (!reaped) return kill_it ? "" : "killed after closing its stdout";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : how_it_ended(status);
}

std::string WorkerProcess::stderr_tail() const {
  size_t at = stderr_.size(), lines = 0;
  while (at > 0 && lines <= kStderrLines)
    if (stderr_[--at] == '\n' && at + 1 < stderr_.size()) ++lines;
  std::string tail = stderr_.substr(lines > kStderrLines ? at + 1 : at);
  return tail.size() > 4000 ? "..." + tail.substr(tail.size() - 4000) : tail;
}

void WorkerProcess::fail(const std::string& what, bool hang) {
  stop(/*kill_it=*/true);
  failed_ = true;
  throw BackendFailure(what, stderr_tail(), hang);
}

}  // namespace attn_oracle::seam
