// process_backend.cpp: the seam's capabilities served by a worker process
// (process_backend.hpp, docs/protocol.md). Each capability call is one request
// and one reply; replies are `ok` (with arrays), `error` (a stable code),
// `unsupported` (a decline) or `exception` (the worker's backend raised
// something else: the case fails with it, the worker lives on).
#include "attn_oracle/seam/process_backend.hpp"

#include <algorithm>
#include <atomic>

#include "worker_process.hpp"

namespace attn_oracle::inline seam {
namespace {

using nlohmann::json;
using wire::Message;
using wire::Writer;

class Worker {
 public:
  explicit Worker(const std::string& command) : process_(command, worker_timeout_seconds()) {}

  bool serves(std::string_view capability) {
    for (const json& c : process_.hello()["capabilities"])
      if (c == capability) return true;
    return false;
  }
  bool has_unsupported_hook(std::string_view capability) {
    for (const json& c : process_.hello().value("unsupported_hooks", json::array()))
      if (c == capability) return true;
    return false;
  }
  // The hello's "kv_buffer_steps" (checked by WorkerProcess); every step when it has none.
  KvBufferSteps kv_buffer_steps() {
    const json& h = process_.hello();
    if (!h.contains("kv_buffer_steps")) return {};
    const json& steps = h["kv_buffer_steps"];
    auto has = [&](const char* name) { return std::find(steps.begin(), steps.end(), name) != steps.end(); };
    return KvBufferSteps{has("write_slice"), has("attend"), has("stream")};
  }
  // The hello's "context_parallel_ops" (checked by WorkerProcess): the optional
  // context-parallel ops it answers; none when it has none.
  bool serves_cp_op(std::string_view op) {
    for (const json& o : process_.hello().value("context_parallel_ops", json::array()))
      if (o == op) return true;
    return false;
  }
  bool flag(const char* key) { return process_.hello().value(key, false) == true; }
  // The hello's "outputs" (checked by WorkerProcess); all of them when it has none.
  ProducedOutputs outputs() {
    const json& h = process_.hello();
    const bool lse_in_input_dtype = h.value("lse_dtype", "float32") == "input";
    if (!h.contains("outputs")) return ProducedOutputs{.lse_in_input_dtype = lse_in_input_dtype};
    auto has = [&](const char* name) { return std::find(h["outputs"].begin(), h["outputs"].end(), name) != h["outputs"].end(); };
    return ProducedOutputs{has("lse"), has("gradients"), has("small_seq_p"), lse_in_input_dtype};
  }
  // The hello's "domain" (checked by WorkerProcess); every input when it has
  // none. Read once: every problem a property runs asks for it.
  const InputDomain& domain() {
    if (!domain_) {
      const json& h = process_.hello();
      domain_ = h.contains("domain") ? wire::read_domain(h["domain"]) : InputDomain{};
    }
    return *domain_;
  }
  std::string version() { return hello_text("name") + " " + hello_text("version") + " (" + wire::kWorkerProtocol + ")"; }
  BackendIdentity identity() { return {hello_text("name"), hello_text("version")}; }
  std::string arch() {
    const json& h = process_.hello();
    return h.contains("arch") && h["arch"].is_string() ? h["arch"].get<std::string>() : std::string();
  }
  WorkerStarts starts() const { return process_.starts(); }

  std::string hello_text(const char* key) {
    const json& h = process_.hello();
    return h.contains(key) && h[key].is_string() ? h[key].get<std::string>() : std::string("?");
  }

  // The reply to `request` (its op set here), or the worker's code for it.
  Expected<Message> ask(const std::string& op, Writer& request) {
    request.header["op"] = op;
    Message reply = process_.exchange(op, request.frame());
    const json& h = reply.header;
    if (h.contains("unsupported"))
      return Error{ErrorCode::unsupported, h["unsupported"].is_string() ? h["unsupported"].get<std::string>() : h["unsupported"].dump()};
    if (h.contains("error")) {
      const json& e = h["error"];
      const std::string code = e.is_object() && e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "";
      const auto parsed = error_code_from_string(code);
      if (!parsed) throw BackendFailure("the worker answered " + op + " with an unknown error code: " + e.dump().substr(0, 300), process_.stderr_tail(), false);
      return Error{*parsed, e.value("message", "")};
    }
    if (h.contains("exception")) {
      const json& e = h["exception"];
      throw BackendFailure("the worker's backend raised " + e.value("type", std::string("an exception")) + " in " + op + ": " +
                               e.value("message", std::string()),
                           e.value("traceback", std::string()) + process_.stderr_tail(), false);
    }
    if (h.value("ok", false) != true)
      throw BackendFailure("the worker's reply to " + op + " is neither ok, error, unsupported nor exception: " + h.dump().substr(0, 300),
                           process_.stderr_tail(), false);
    return reply;
  }

  // The worker's reason to decline, when it announced an unsupported hook for `capability`.
  std::optional<std::string> unsupported(const std::string& capability, Writer& request) {
    if (!has_unsupported_hook(capability)) return std::nullopt;
    request.header["capability"] = capability;
    const Expected<Message> r = ask("unsupported", request);
    if (!r && r.error().code == ErrorCode::unsupported) return r.error().message;
    return std::nullopt;  // an invalid problem is the call's to reject
  }

  // A typed read of a reply: a reply that lacks what the seam needs fails the case.
  template <class F>
  auto read(const std::string& op, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const wire::ProtocolError& e) {
      throw BackendFailure("the worker's reply to " + op + " is malformed: " + e.what(), process_.stderr_tail(), false);
    }
  }

 private:
  WorkerProcess process_;
  std::optional<InputDomain> domain_;
};

template <class T, class F>
Expected<T> reply_as(Worker& w, const std::string& op, const Expected<Message>& reply, F&& read) {
  if (!reply) return reply.error();
  return w.read(op, [&] { return read(reply.value()); });
}

class ProcessMetadata final : public MetadataCapability {
 public:
  explicit ProcessMetadata(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const PackedBatch& batch) override {
    Writer r;
    wire::put_batch(r, batch);
    return w_.unsupported("metadata", r);
  }
  Expected<Metadata> metadata(const PackedBatch& batch) override {
    Writer r;
    wire::put_batch(r, batch);
    return reply_as<Metadata>(w_, "metadata", w_.ask("metadata", r), wire::read_metadata);
  }

 private:
  Worker& w_;
};

class ProcessAttention final : public AttentionCapability {
 public:
  explicit ProcessAttention(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const AttentionProblem& p) override {
    Writer r;
    wire::put_problem(r, p);
    return w_.unsupported("attention", r);
  }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    Writer r;
    wire::put_problem(r, p);
    wire::put_inputs(r, p, in);
    return reply_as<AttentionResult>(w_, "attention", w_.ask("attention", r),
                                     [&](const Message& m) { return wire::read_attention_result(m, p.shape.backward, w_.outputs()); });
  }
  bool token_level_mask() const override { return token_level_mask_; }
  bool token_level_mask_ = false;

 private:
  Worker& w_;
};

class ProcessSmallSeq final : public SmallSeqCapability {
 public:
  explicit ProcessSmallSeq(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const AttentionProblem& p) override {
    Writer r;
    wire::put_problem(r, p);
    return w_.unsupported("small_seq", r);
  }
  Expected<SmallSeqResult> small_seq(const AttentionProblem& p, const AttentionInputs& in) override {
    Writer r;
    wire::put_problem(r, p);
    wire::put_inputs(r, p, in);
    return reply_as<SmallSeqResult>(w_, "small_seq", w_.ask("small_seq", r),
                                    [&](const Message& m) { return wire::read_small_seq_result(m, p.shape.backward, w_.outputs()); });
  }

 private:
  Worker& w_;
};

class ProcessSharding final : public ShardingCapability {
 public:
  explicit ProcessSharding(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const Sharding& s, const ShardedShapes& shapes) override {
    Writer r;
    r.header["sharding"] = wire::sharding_json(s);
    r.header["shapes"] = wire::sharded_shapes_json(shapes);
    return w_.unsupported("sharding", r);
  }
  std::optional<Error> validate_sharding(const Sharding& s, const ShardedShapes& shapes) override {
    Writer r;
    r.header["sharding"] = wire::sharding_json(s);
    r.header["shapes"] = wire::sharded_shapes_json(shapes);
    const Expected<Message> reply = w_.ask("validate_sharding", r);
    return reply ? std::nullopt : std::optional<Error>(reply.error());
  }
  Expected<AttentionResult> sharded_attention(const Sharding& s, const AttentionProblem& p, const AttentionInputs& in) override {
    Writer r;
    r.header["sharding"] = wire::sharding_json(s);
    wire::put_problem(r, p);
    wire::put_inputs(r, p, in);
    return reply_as<AttentionResult>(w_, "sharded_attention", w_.ask("sharded_attention", r),
                                     [&](const Message& m) { return wire::read_attention_result(m, p.shape.backward, w_.outputs()); });
  }
  bool token_level_mask() const override { return token_level_mask_; }
  bool token_level_mask_ = false;

 private:
  Worker& w_;
};

// K/V-buffer tensors are one row (R = 1): [N, H, D]; a buffer [tokens, 2, Hkv, D].
class ProcessKvBuffer final : public KvBufferCapability {
 public:
  explicit ProcessKvBuffer(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const KvBufferProblem& p) override {
    Writer r;
    r.header["problem"] = wire::kv_problem_json(p);
    return w_.unsupported("kv_buffer", r);
  }
  KvBufferSteps steps() const override { return w_.kv_buffer_steps(); }
  Expected<MicroSequenceMetadata> micro_sequence(const KvBufferProblem& p, int64_t i) override {
    Writer r;
    r.header["problem"] = wire::kv_problem_json(p);
    r.header["i"] = i;
    return reply_as<MicroSequenceMetadata>(w_, "kv_micro_sequence", w_.ask("kv_micro_sequence", r), wire::read_micro_sequence);
  }
  std::optional<Error> write_slice(const KvBufferProblem& p, int64_t i, const std::vector<double>& slice,
                                   std::vector<double>& buffer) override {
    Writer r;
    r.header["problem"] = wire::kv_problem_json(p);
    r.header["i"] = i;
    r.add("slice", buffer_shape(p, slice.size()), slice);
    r.add("buffer", buffer_shape(p, buffer.size()), buffer);
    const Expected<Message> reply = w_.ask("kv_write_slice", r);
    if (!reply) return reply.error();
    buffer = w_.read("kv_write_slice", [&] { return wire::floats(reply.value(), "buffer"); });
    return std::nullopt;
  }
  Expected<AttentionResult> attend(const KvBufferProblem& p, int64_t i, const AttentionInputs& micro,
                                   const std::vector<double>& buffer, std::vector<double>* grad_buffer) override {
    Writer r;
    r.header["problem"] = wire::kv_problem_json(p);
    r.header["i"] = i;
    r.add("q", rows_shape(micro.q.size(), p.shape.heads_q, p.shape.head_dim), micro.q);
    if (p.shape.backward) r.add("do", rows_shape(micro.d_o.size(), p.shape.heads_q, p.shape.head_dim), micro.d_o);
    r.add("buffer", buffer_shape(p, buffer.size()), buffer);
    if (grad_buffer) r.add("grad_buffer", buffer_shape(p, grad_buffer->size()), *grad_buffer);
    const Expected<Message> reply = w_.ask("kv_attend", r);
    if (!reply) return reply.error();
    return w_.read("kv_attend", [&] {
      AttentionResult out{wire::floats(reply.value(), "o"), wire::floats(reply.value(), "lse"), std::nullopt};
      if (p.shape.backward) out.grads = AttentionGradients{wire::floats(reply.value(), "dq"), {}, {}};
      if (grad_buffer) *grad_buffer = wire::floats(reply.value(), "grad_buffer");
      return out;
    });
  }
  Expected<AttentionResult> stream(const KvBufferProblem& p, const AttentionInputs& in) override {
    Writer r;
    r.header["problem"] = wire::kv_problem_json(p);
    r.add("q", rows_shape(in.q.size(), p.shape.heads_q, p.shape.head_dim), in.q);
    r.add("k", rows_shape(in.k.size(), p.shape.heads_kv, p.shape.head_dim), in.k);
    r.add("v", rows_shape(in.v.size(), p.shape.heads_kv, p.shape.head_dim), in.v);
    if (p.shape.backward) r.add("do", rows_shape(in.d_o.size(), p.shape.heads_q, p.shape.head_dim), in.d_o);
    return reply_as<AttentionResult>(w_, "kv_stream", w_.ask("kv_stream", r),
                                     [&](const Message& m) { return wire::read_attention_result(m, p.shape.backward, w_.outputs()); });
  }

 private:
  // [n / (H*D), H, D] when it divides, else flat.
  static Shape rows_shape(size_t n, int64_t heads, int64_t dim) {
    const auto row = static_cast<size_t>(std::max<int64_t>(1, heads * dim));
    return n % row == 0 && heads > 0 && dim > 0 ? Shape{int64_t(n / row), heads, dim} : Shape{int64_t(n)};
  }
  static Shape buffer_shape(const KvBufferProblem& p, size_t n) {
    const Shape rows = rows_shape(n, 2 * p.shape.heads_kv, p.shape.head_dim);
    return rows.size() == 3 ? Shape{rows[0], 2, p.shape.heads_kv, p.shape.head_dim} : rows;
  }
  Worker& w_;
};

// Context parallelism (backend.hpp): the layout travels in the header as "cp",
// the unsharded tensors [B, T, H, D] in row order; outputs come back rank-major.
// An optional op the worker does not answer (its hello's context_parallel_ops)
// is the seam's own: without validate_cp_layout the suite's validate_cp is the
// worker's validation, and a layout it rejects answers its code without reaching
// the worker; without cp_reorder the worker's permutation is applied; without
// cp_balance_bound no balance is promised.
class ProcessContextParallel final : public ContextParallelCapability {
 public:
  explicit ProcessContextParallel(Worker& w) : w_(w) {}
  std::optional<std::string> unsupported(const CpLayout& l, const AttentionProblem& p) override {
    Writer r;
    put_request(r, l, p);
    return w_.unsupported("context_parallel", r);
  }
  bool serves(CpOp op) const override {
    switch (op) {
      case CpOp::rank_metadata: return w_.serves_cp_op("cp_rank_metadata");
      case CpOp::rank_attention: return w_.serves_cp_op("cp_rank_attention");
      case CpOp::run: return w_.serves_cp_op("cp_attention");
    }
    return false;
  }
  std::optional<Error> validate_layout(const CpLayout& l, const AttentionProblem& p) override {
    if (!w_.serves_cp_op("validate_cp_layout")) return validate_cp(l, p);
    Writer r;
    put_request(r, l, p);
    const Expected<Message> reply = w_.ask("validate_cp_layout", r);
    return reply ? std::nullopt : std::optional<Error>(reply.error());
  }
  Expected<std::vector<int64_t>> permutation(const CpLayout& l, const AttentionProblem& p) override {
    if (auto e = suite_validation(l, p)) return *e;
    Writer r;
    put_request(r, l, p);
    return reply_as<std::vector<int64_t>>(w_, "cp_permutation", w_.ask("cp_permutation", r), [&](const Message& m) {
      return wire::read_permutation(m, p.batch.q.segment_ids.shape);
    });
  }
  Expected<std::vector<double>> reorder(const CpLayout& l, const AttentionProblem& p, const std::vector<double>& values,
                                        int64_t width, bool inverse) override {
    if (!w_.serves_cp_op("cp_reorder")) return ContextParallelCapability::reorder(l, p, values, width, inverse);
    if (auto e = suite_validation(l, p)) return *e;
    Writer r;
    put_request(r, l, p);
    r.header["width"] = width;
    r.header["inverse"] = inverse;
    const Shape& ids = p.batch.q.segment_ids.shape;
    const bool fits = ids.size() == 2 && width > 0 && static_cast<int64_t>(values.size()) == ids[0] * ids[1] * width;
    r.add("values", fits ? Shape{ids[0], ids[1], width} : Shape{static_cast<int64_t>(values.size())}, values);
    return reply_as<std::vector<double>>(w_, "cp_reorder", w_.ask("cp_reorder", r), [&](const Message& m) {
      std::vector<double> out = wire::floats(m, "values");
      if (out.size() != values.size())
        throw wire::ProtocolError("values holds " + std::to_string(out.size()) + " numbers where " +
                                  std::to_string(values.size()) + " were sent");
      return out;
    });
  }
  Expected<Metadata> rank_metadata(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) override {
    if (auto e = suite_validation(l, p)) return *e;
    Writer r;
    put_request(r, l, p);
    r.header["rank"] = rank;
    r.header["step"] = step;
    return reply_as<Metadata>(w_, "cp_rank_metadata", w_.ask("cp_rank_metadata", r), wire::read_metadata);
  }
  Expected<AttentionResult> rank_attention(const CpLayout& l, const AttentionProblem& p, const AttentionInputs& in,
                                           int64_t rank, int64_t step) override {
    if (auto e = suite_validation(l, p)) return *e;
    Writer r;
    put_request(r, l, p);
    wire::put_inputs(r, p, in);
    r.header["rank"] = rank;
    r.header["step"] = step;
    return reply_as<AttentionResult>(w_, "cp_rank_attention", w_.ask("cp_rank_attention", r), [&](const Message& m) {
      AttentionResult out = wire::read_attention_result(m, /*backward=*/false, w_.outputs());
      check_sizes(l, p, out, /*one_rank=*/true, w_.outputs().lse);
      return out;
    });
  }
  Expected<AttentionResult> cp_attention(const CpLayout& l, const AttentionProblem& p, const AttentionInputs& in) override {
    if (auto e = suite_validation(l, p)) return *e;
    Writer r;
    put_request(r, l, p);
    wire::put_inputs(r, p, in);
    return reply_as<AttentionResult>(w_, "cp_attention", w_.ask("cp_attention", r), [&](const Message& m) {
      AttentionResult out = wire::read_attention_result(m, p.shape.backward, w_.outputs());
      check_sizes(l, p, out, /*one_rank=*/false, w_.outputs().lse);
      return out;
    });
  }
  std::optional<double> balance_bound(const CpLayout& l, const AttentionProblem& p) override {
    if (!w_.serves_cp_op("cp_balance_bound")) return std::nullopt;
    Writer r;
    put_request(r, l, p);
    const Expected<Message> reply = w_.ask("cp_balance_bound", r);
    if (!reply) return std::nullopt;  // an error or a decline promises nothing
    return w_.read("cp_balance_bound", [&] { return wire::read_balance_bound(reply.value()); });
  }
  bool token_level_mask() const override { return token_level_mask_; }
  bool token_level_mask_ = false;

 private:
  static void put_request(Writer& r, const CpLayout& l, const AttentionProblem& p) {
    r.header["cp"] = wire::cp_layout_json(l);
    wire::put_problem(r, p);
  }
  std::optional<Error> suite_validation(const CpLayout& l, const AttentionProblem& p) {
    return w_.serves_cp_op("validate_cp_layout") ? std::nullopt : validate_cp(l, p);
  }
  // The suite un-permutes a run by index: an array of another size than a valid
  // layout gives is a malformed reply (model/context_parallel.hpp).
  static void check_sizes(const CpLayout& l, const AttentionProblem& p, const AttentionResult& r, bool one_rank, bool lse) {
    if (const std::optional<Error> e = cp_result_shape_error(l, p, r, one_rank, lse)) throw wire::ProtocolError(e->message);
  }
  Worker& w_;
};

class ProcessBackend final : public Backend {
 public:
  explicit ProcessBackend(std::string command)
      : command_(std::move(command)), worker_(command_), metadata_(worker_), attention_(worker_), small_seq_(worker_),
        sharding_(worker_), kv_buffer_(worker_), context_parallel_(worker_) {}

  std::string name() const override { return std::string(kProcessBackendPrefix) + command_; }
  std::string version() const override { return worker_.version(); }
  // The worker's own name and version: the same however its command line is written.
  BackendIdentity identity() const override { return worker_.identity(); }
  std::string arch() const override { return worker_.arch(); }
  MetadataCapability* metadata() override { return worker_.serves("metadata") ? &metadata_ : nullptr; }
  AttentionCapability* attention() override {
    attention_.token_level_mask_ = worker_.flag("token_level_mask");
    return worker_.serves("attention") ? &attention_ : nullptr;
  }
  SmallSeqCapability* small_seq() override { return worker_.serves("small_seq") ? &small_seq_ : nullptr; }
  ShardingCapability* sharding() override {
    sharding_.token_level_mask_ = worker_.flag("token_level_mask");
    return worker_.serves("sharding") ? &sharding_ : nullptr;
  }
  KvBufferCapability* kv_buffer() override { return worker_.serves("kv_buffer") ? &kv_buffer_ : nullptr; }
  ContextParallelCapability* context_parallel() override {
    context_parallel_.token_level_mask_ = worker_.flag("token_level_mask");
    return worker_.serves("context_parallel") ? &context_parallel_ : nullptr;
  }
  ProducedOutputs outputs() const override { return worker_.outputs(); }
  InputDomain domain() const override { return worker_.domain(); }
  // A crash or a hang stays in the worker: the case fails and the worker restarts.
  bool isolates_itself() const override { return true; }
  std::optional<WorkerStarts> worker_starts() const override { return worker_.starts(); }

 private:
  std::string command_;
  mutable Worker worker_;  // version() is const; asking it starts the worker
  ProcessMetadata metadata_;
  ProcessAttention attention_;
  ProcessSmallSeq small_seq_;
  ProcessSharding sharding_;
  ProcessKvBuffer kv_buffer_;
  ProcessContextParallel context_parallel_;
};

}  // namespace

namespace {
std::atomic<double> g_worker_timeout{0.0};  // 0: not set, kDefaultWorkerTimeout
}  // namespace

double worker_timeout_seconds() {
  const double set = g_worker_timeout.load();
  return set > 0 ? set : kDefaultWorkerTimeout;
}

void set_worker_timeout_seconds(double seconds) { g_worker_timeout.store(seconds > 0 ? seconds : 0.0); }

std::unique_ptr<Backend> make_process_backend(const std::string& command) {
  return std::make_unique<ProcessBackend>(command);
}

}  // namespace attn_oracle::seam
