// process_backend.cpp: the seam's capabilities served by a worker process
// (process_backend.hpp, docs/protocol.md). Each capability call is one request
// and one reply; replies are `ok` (with arrays), `error` (a stable code),
// `unsupported` (a decline) or `exception` (the worker's backend raised
// something else: the case fails with it, the worker lives on).
#include "attn_oracle/seam/process_backend.hpp"

#include <algorithm>
#include <atomic>

#include "worker_process.hpp"

namespace attn_oracle {
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

class ProcessBackend final : public Backend {
 public:
  explicit ProcessBackend(std::string command)
      : command_(std::move(command)), worker_(command_), metadata_(worker_), attention_(worker_), small_seq_(worker_),
        sharding_(worker_), kv_buffer_(worker_) {}

  std::string name() const override { return std::string(kProcessBackendPrefix) + command_; }
  std::string version() const override { return worker_.version(); }
  // The worker's own name and version: the same however its command line is written.
  BackendIdentity identity() const override { return worker_.identity(); }
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

}  // namespace attn_oracle
