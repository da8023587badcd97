// backend.hpp: the one seam between the suite and the code under test
// (docs/semantics.md#11-where-each-concept-lives-in-the-code). A backend implements any subset of
// the capability interfaces; properties ask for the capability they need and report a skip, with
// the reason, when it is missing. Register a backend once with
// ATTN_ORACLE_REGISTER_BACKEND(MyBackend) in any linked translation unit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/model/error.hpp"
#include "attn_oracle/seam/input_domain.hpp"
#include "attn_oracle/model/kv_buffer.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"
#include "attn_oracle/model/sharding.hpp"
#include "attn_oracle/model/small_seq.hpp"

namespace attn_oracle::inline seam {

// `attention_buffers`: the attention capability can also write into caller-owned
// buffers (AttentionCapability::supports_attention_into), which the guard-band
// property needs.
enum class Capability { metadata, attention, attention_buffers, small_seq, sharding, kv_buffer, context_parallel };
std::string_view to_string(Capability capability);

// Every capability can decline a problem with a reason (`unsupported`): a layout
// or size the code under test does not take that Backend::domain() cannot say. A declined draw is counted with its
// reason and never judged; a property whose every draw is declined is SKIPPED.
class MetadataCapability {
 public:
  virtual ~MetadataCapability() = default;
  // A reason to decline this input (valid or not), or nullopt.
  virtual std::optional<std::string> unsupported(const PackedBatch&) { return std::nullopt; }
  // The metadata of docs/semantics.md#3-metadata, or the error code of
  // docs/semantics.md#4-error-codes.
  virtual Expected<Metadata> metadata(const PackedBatch& batch) = 0;
};

class AttentionCapability {
 public:
  virtual ~AttentionCapability() = default;
  // A reason to skip this problem (unsupported dtype, head dim, ...), or nullopt.
  virtual std::optional<std::string> unsupported(const AttentionProblem&) { return std::nullopt; }
  // Forward, and backward when problem.shape.backward. Inputs are already rounded
  // to problem.shape.dtype; outputs are returned widened to double.
  virtual Expected<AttentionResult> attention(const AttentionProblem& problem,
                                              const AttentionInputs& inputs) = 0;
  // True when this backend computes docs/semantics.md#2-the-attention-mask's token-level mask on
  // any input (the reference). Kernels apply the index rule to trimmed runs, which is
  // that mask only on representable inputs
  // (docs/semantics.md#the-kernels-index-rule-and-representability): for them, judging a case
  // against the reference is skipped when it is not representable.
  virtual bool token_level_mask() const { return false; }

  // Optional: the same computation written into caller-owned buffers in the
  // AttentionResult layouts (grads only when backward), so that a property can
  // surround them with NaN guard bands. A backend that can says so in
  // supports_attention_into(); the property is skipped for the others.
  struct Buffers {
    double* o = nullptr;    // [R, Tq, Hq, D]
    double* lse = nullptr;  // [R, Hq, Tq]; null when the backend produces no lse
    double* dq = nullptr;   // [R, Tq, Hq, D]
    double* dk = nullptr;   // [R, Tkv, Hkv, D]
    double* dv = nullptr;   // [R, Tkv, Hkv, D]
  };
  virtual bool supports_attention_into() const { return false; }
  virtual std::optional<Error> attention_into(const AttentionProblem&, const AttentionInputs&, const Buffers&) {
    return Error{ErrorCode::unsupported, "this backend cannot write into caller-owned buffers"};
  }
};

class SmallSeqCapability {
 public:
  virtual ~SmallSeqCapability() = default;
  // A reason to skip this problem (dtype, head dim, ...), or nullopt.
  virtual std::optional<std::string> unsupported(const AttentionProblem&) { return std::nullopt; }
  // docs/semantics.md#8-small-sequence-problems: o, P [docs, Hq, 16] and, when backward, dq / dk /
  // dv.
  virtual Expected<SmallSeqResult> small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) = 0;
};

// docs/semantics.md#9-sharding. Most backends implement it with SimulatedSharding
// (sharded_execution.hpp) over their own attention capability.
class ShardingCapability {
 public:
  virtual ~ShardingCapability() = default;
  // A reason to decline this mesh and call (valid or not), or nullopt.
  virtual std::optional<std::string> unsupported(const Sharding&, const ShardedShapes&) { return std::nullopt; }
  // This backend's spec validation; nullopt when the call is valid.
  virtual std::optional<Error> validate_sharding(const Sharding& sharding, const ShardedShapes& shapes) = 0;
  // `problem` run sharded over the mesh's devices and gathered back into the
  // unsharded layouts. An invalid problem or sharding gives its code before any
  // device runs.
  virtual Expected<AttentionResult> sharded_attention(const Sharding& sharding, const AttentionProblem& problem,
                                                      const AttentionInputs& inputs) = 0;
  // True when a device's attention realises the token-level mask on any input
  // (the reference); kernels realise it only on representable problems
  // (docs/semantics.md#the-kernels-index-rule-and-representability).
  virtual bool token_level_mask() const { return false; }
};

// docs/semantics.md#91-context-parallelism: a packed row split over `cp` ranks. Most
// backends implement it with SimulatedContextParallel (context_parallel.hpp)
// over their own attention and metadata; a stack's module implements it with
// the stack's own reordering, per-rank metadata and collectives.
//
// Tensors in and out are [B, T, ...]: the unsharded inputs in row order go in;
// outputs come back rank-major (rank r's local slots [r*L, (r+1)*L) of each
// row, L = T / cp, in the backend's own permutation), so that un-permuting
// them is the suite's job, with the permutation the backend reports.
// The context-parallel calls past the permutation, each optional: a stack whose
// kernels need a device is judged on its permutation and metadata first. A
// property that calls one the backend does not serve is skipped with the reason.
enum class CpOp { rank_metadata, rank_attention, run };
std::string_view to_string(CpOp op);  // "rank_metadata", "rank_attention", "cp_attention"

class ContextParallelCapability {
 public:
  virtual ~ContextParallelCapability() = default;
  // Whether this backend serves `op` (all of them unless it says otherwise);
  // one it does not serve answers `unsupported` if it is called anyway.
  virtual bool serves(CpOp) const { return true; }
  // A reason to decline this layout and problem (valid or not), or nullopt.
  virtual std::optional<std::string> unsupported(const CpLayout&, const AttentionProblem&) { return std::nullopt; }
  // This backend's checks of the layout: nullopt when it runs it, else the code.
  virtual std::optional<Error> validate_layout(const CpLayout& layout, const AttentionProblem& problem) = 0;
  // [B, T]: the row token each rank-major local slot holds.
  virtual Expected<std::vector<int64_t>> permutation(const CpLayout& layout, const AttentionProblem& problem) = 0;
  // `values` [B, T, width] put into rank-major local order, or, `inverse`, back
  // into row order (a stack's reorder and inverse-reorder functions). By
  // default, permutation() applied.
  virtual Expected<std::vector<double>> reorder(const CpLayout& layout, const AttentionProblem& problem,
                                                const std::vector<double>& values, int64_t width, bool inverse);
  // The metadata rank `rank` hands its kernel at `step` (0 <= step < cp_steps(layout)).
  virtual Expected<Metadata> rank_metadata(const CpLayout& layout, const AttentionProblem& problem, int64_t rank,
                                           int64_t step) = 0;
  // Rank `rank`'s forward at `step`: its queries (local order) against the keys
  // it meets then; o [B, Lq, Hq', D], lse [B, Hq', Lq] (Hq' = the rank's heads).
  // A ring's partial result, before any merge.
  virtual Expected<AttentionResult> rank_attention(const CpLayout& layout, const AttentionProblem& problem,
                                                   const AttentionInputs& inputs, int64_t rank, int64_t step) = 0;
  // The whole run: o, lse [B, Hq, T] and the gradients rank-major; dK/dV of
  // each token are its own (summed over every rank that met it).
  virtual Expected<AttentionResult> cp_attention(const CpLayout& layout, const AttentionProblem& problem,
                                                 const AttentionInputs& inputs) = 0;
  // The largest imbalance (max / mean attended pairs of a rank) this backend
  // promises for this layout and problem; nullopt promises nothing (the figure
  // is still reported).
  virtual std::optional<double> balance_bound(const CpLayout&, const AttentionProblem&) { return std::nullopt; }
  // As AttentionCapability::token_level_mask, for every rank's call.
  virtual bool token_level_mask() const { return false; }
};

// docs/semantics.md#3-metadata: the shared K/V buffer steps, tensors as in kv_buffer.hpp
// (buffer and grad_buffer [N, 2, Hkv, D], a micro-sequence's q and d_o
// [end - begin, Hq, D]).
//
// micro_sequence is the capability; the three steps after it are each optional,
// so that a backend whose kernel is not ready yet is judged on its metadata
// first. A backend says which steps it serves in steps(); a property that needs
// a step it does not serve is skipped with the reason, and one that needs only
// an attend (kv_buffer/earlierDocumentsDoNotInfluence) drives the suite's
// float64 varlen kernel with the backend's metadata instead.
enum class KvBufferStep { write_slice, attend, stream };
std::string_view to_string(KvBufferStep step);  // "write_slice", "attend", "stream"

struct KvBufferSteps {
  bool write_slice = true, attend = true, stream = true;
  bool has(KvBufferStep step) const;
  bool operator==(const KvBufferSteps&) const = default;
};

class KvBufferCapability {
 public:
  virtual ~KvBufferCapability() = default;
  // A reason to skip this problem (dtype, head dim, ...), or nullopt.
  virtual std::optional<std::string> unsupported(const KvBufferProblem&) { return std::nullopt; }
  // The canonical metadata of micro-sequence i.
  virtual Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& problem, int64_t i) = 0;
  // The steps below that this backend serves (all, unless it says otherwise);
  // one it does not serve answers `unsupported` if it is called anyway.
  virtual KvBufferSteps steps() const { return {}; }
  // Micro-sequence i's slice [end - begin, 2, Hkv, D] into buffer[begin, end);
  // an i past the last micro-sequence is kv_buffer_slice_out_of_bounds.
  virtual std::optional<Error> write_slice(const KvBufferProblem& problem, int64_t i, const std::vector<double>& slice,
                                           std::vector<double>& buffer);
  // Micro-sequence i against buffer[fdb, end): o, lse [Hq, end - begin] and, when
  // problem.shape.backward, dq, with dK/dV added into grad_buffer[fdb, end).
  virtual Expected<AttentionResult> attend(const KvBufferProblem& problem, int64_t i, const AttentionInputs& micro,
                                           const std::vector<double>& buffer, std::vector<double>* grad_buffer);
  // The streaming run (forward in order, backward in reverse) in the whole-sequence layouts.
  virtual Expected<AttentionResult> stream(const KvBufferProblem& problem, const AttentionInputs& inputs);
};

// Who the code under test is, however it was started: its failures are stored
// under this name and version (failure_store.hpp).
struct BackendIdentity {
  std::string name, version;
};

// How often a backend's worker process was started in this object's life: the
// first start and every restart after a crash, a hang or a protocol error.
struct WorkerStarts {
  int total = 0;
  int restarts = 0;  // of total, those that replaced a failed worker
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const { return "unversioned"; }
  virtual MetadataCapability* metadata() { return nullptr; }
  virtual AttentionCapability* attention() { return nullptr; }
  virtual SmallSeqCapability* small_seq() { return nullptr; }
  virtual ShardingCapability* sharding() { return nullptr; }
  virtual KvBufferCapability* kv_buffer() { return nullptr; }
  virtual ContextParallelCapability* context_parallel() { return nullptr; }
  // The optional outputs this backend produces (attention.hpp), for every
  // capability: all of them unless it says otherwise.
  virtual ProducedOutputs outputs() const { return {}; }
  // Its name() and version(), unless they depend on how it was started (an
  // `exec:` backend's name is its command line; its identity is its worker's).
  virtual BackendIdentity identity() const { return {name(), version()}; }
  // The device architecture the code under test runs on ("sm_90"), or "" when it
  // has none or does not say: what the `arch=` key of a known-failure list
  // matches (harness/test_lists.hpp; ATTN_ORACLE_ARCH overrides it).
  virtual std::string arch() const { return ""; }
  // The inputs this backend takes (input_domain.hpp): the generators draw inside
  // it, and every problem a property runs is asked of it (and of the
  // capability's `unsupported` hook) first. Every input unless it says otherwise.
  virtual InputDomain domain() const { return {}; }
  // True when the code under test runs outside this process (a worker,
  // process_backend.hpp): a crash or a hang there fails the case with
  // BackendFailure and leaves the suite running, so a runner need not put each
  // property in a child process of its own (isolation.hpp) and one worker can
  // serve a whole run.
  virtual bool isolates_itself() const { return false; }
  // Its worker's starts so far, for a backend that has one; nullopt otherwise.
  virtual std::optional<WorkerStarts> worker_starts() const { return std::nullopt; }

  bool has(Capability capability);
  std::vector<Capability> capabilities();
};

// Thrown by a backend whose code under test could not answer at all: a worker
// process (process_backend.hpp) that crashed, hung past its time limit or broke
// the protocol. The case being checked fails with what(); `log` (what the code
// under test printed on stderr) goes into the report. After a hang the property
// stops shrinking and drawing: every further hang would cost a time limit.
struct BackendFailure : std::runtime_error {
  BackendFailure(const std::string& message, std::string log_tail, bool hang)
      : std::runtime_error(message), log(std::move(log_tail)), hung(hang) {}
  std::string log;
  bool hung = false;
};

using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// `exec:COMMAND` names a process backend everywhere a backend name is taken:
// COMMAND (run by /bin/sh -c) is a worker speaking docs/protocol.md.
inline constexpr std::string_view kProcessBackendPrefix = "exec:";

class BackendRegistry {
 public:
  static BackendRegistry& instance();
  // Returns true so that it can initialise a static; a second add of a name replaces it.
  bool add(const std::string& name, BackendFactory factory);
  std::vector<std::string> names() const;  // in registration order
  // nullptr if unknown. An `exec:COMMAND` name always makes a process backend
  // (process_backend.hpp), registered or not; its worker starts on first use.
  std::unique_ptr<Backend> make(const std::string& name) const;

 private:
  std::vector<std::pair<std::string, BackendFactory>> factories_;
};

// Caller-owned outputs for AttentionCapability::attention_into, each tensor with
// kGuard elements before and after it. Guards and interiors start as one NaN bit
// pattern (kPoison); after the call every guard must still hold exactly that
// pattern and no interior element may be NaN (every logical output written,
// tokens that attend nothing included). Grads only when the problem is backward.
class GuardedAttentionBuffers {
 public:
  static constexpr int64_t kGuard = 64;
  static constexpr uint64_t kPoison = 0x7ff8'dead'beef'0bad;  // a quiet NaN with a payload

  // The sizes come from validate_attention; an invalid problem gives empty buffers.
  // An output the backend does not produce gets no buffer (a null pointer).
  explicit GuardedAttentionBuffers(const AttentionProblem& problem, const ProducedOutputs& produced = {});
  GuardedAttentionBuffers(const GuardedAttentionBuffers&) = delete;  // buffers() points inside
  GuardedAttentionBuffers& operator=(const GuardedAttentionBuffers&) = delete;
  const AttentionCapability::Buffers& buffers() const { return buffers_; }
  // "o: guard element 3 after the end is 0 (bits ...)", "lse[5] is NaN", or nullopt.
  std::optional<std::string> first_violation() const;

 private:
  struct Guarded {
    std::string name;
    std::vector<double> storage;  // kGuard + elems + kGuard
    int64_t elems = 0;
  };
  std::vector<Guarded> tensors_;
  AttentionCapability::Buffers buffers_;
};

}  // namespace attn_oracle::seam

#define ATTN_ORACLE_CONCAT_INNER(a, b) a##b
#define ATTN_ORACLE_CONCAT(a, b) ATTN_ORACLE_CONCAT_INNER(a, b)
// Registers `Type` (default-constructible, derived from attn_oracle::Backend).
#define ATTN_ORACLE_REGISTER_BACKEND(Type)                                               \
  static const bool ATTN_ORACLE_CONCAT(attn_oracle_registered_, __LINE__) =              \
      ::attn_oracle::BackendRegistry::instance().add(Type().name(), [] {                 \
        return std::unique_ptr<::attn_oracle::Backend>(new Type());                      \
      })
