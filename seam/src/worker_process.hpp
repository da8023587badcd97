// worker_process.hpp (internal): one worker process and one exchange at a time
// with it (docs/protocol.md). Started by /bin/sh -c COMMAND in its own process
// group (killed as a group, and with the parent when the parent dies); stdin a
// socket (a write to a dead worker fails instead of raising SIGPIPE), stdout and
// stderr pipes. Every exchange writes the request while it reads the reply and
// the worker's stderr, so neither side can block the other, under one deadline.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <string>

#include "attn_oracle/seam/backend.hpp"
#include "worker_protocol.hpp"

namespace attn_oracle::inline seam {

class WorkerProcess {
 public:
  WorkerProcess(std::string command, double timeout_seconds);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // The worker's hello, starting it when it is not running. Throws
  // BackendFailure when it cannot be started or says something else.
  const nlohmann::json& hello();
  // One request and its reply (op names the request in messages). On a crash, a
  // hang or a protocol error the worker is stopped (the next call restarts it)
  // and BackendFailure is thrown with the end of its stderr.
  wire::Message exchange(const std::string& op, const std::string& frame);
  // What the worker wrote on stderr lately (its last 40 lines).
  std::string stderr_tail() const;
  const std::string& command() const { return command_; }
  // Every start so far, and those that replaced a worker that failed.
  WorkerStarts starts() const { return starts_; }
  double timeout() const { return timeout_; }
  // The hello comes after the worker's imports (numpy, jax, torch: seconds on a
  // loaded machine), so it gets at least 30 s whatever the per-call limit.
  double hello_timeout() const { return std::max(timeout_, 30.0); }

 private:
  enum class Ended { message, eof, timeout };
  void start();
  // Writes `out`, reads until a whole message; ProtocolError on garbage.
  Ended transfer(const std::string& out, wire::Message& in, double timeout_seconds);
  void drain_stderr(int wait_ms);
  std::string stop(bool kill_it);  // "" or how it ended: "exit status 1", "SIGSEGV (signal 11)"
  [[noreturn]] void fail(const std::string& what, bool hang);

  std::string command_;
  double timeout_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  wire::FrameReader reader_;
  nlohmann::json hello_;
  std::string stderr_;  // the last kStderrKeep bytes
  WorkerStarts starts_;
  bool failed_ = false;  // the last worker was stopped by fail(): the next start is a restart
};

}  // namespace attn_oracle::seam
