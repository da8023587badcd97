// process_backend.hpp: a backend whose code under test runs in another process,
// a *worker*, spoken to over its stdin/stdout in the versioned protocol of
// docs/protocol.md (attn-oracle-worker/1). `exec:COMMAND` names one wherever a
// backend name is taken (BackendRegistry::make): `attn-oracle check --backend
// 'exec:python3 -m attn_oracle.worker my_module:MyBackend'`.
//
// One persistent worker per backend object, started by /bin/sh -c COMMAND on
// first use; its hello says which capabilities it serves. A worker that
// crashes, answers nothing within the per-call time limit, or breaks the
// protocol makes that call throw BackendFailure (the case fails, with the
// worker's stderr) and is restarted on the next call. A decline (`unsupported`
// reply) is ErrorCode::unsupported; a rejection carries the worker's code.
// Such a backend isolates itself (Backend::isolates_itself): runners keep it in
// their own process, so that one worker serves a whole run, and report its
// starts (Backend::worker_starts) to show it.
//
// Tested by tests/python_worker.cmake (the NumPy examples and broken workers
// end to end: crashes, hangs, garbage frames, a wrong protocol, worker starts).
#pragma once

#include <memory>
#include <string>

#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline seam {

// The per-call time limit in seconds of the workers started from now on:
// kDefaultWorkerTimeout unless the program's edge sets another (from
// ATTN_ORACLE_WORKER_TIMEOUT, harness/settings.hpp); <= 0: back to the default.
inline constexpr double kDefaultWorkerTimeout = 60.0;
double worker_timeout_seconds();
void set_worker_timeout_seconds(double seconds);

// A backend named "exec:" + command; nothing starts until it is first asked.
std::unique_ptr<Backend> make_process_backend(const std::string& command);

}  // namespace attn_oracle::seam
