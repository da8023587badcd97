// worker_protocol.hpp (internal): the frames of docs/protocol.md and the data
// model on the wire. A frame is
//   "AOW1" | u32 little-endian header length | header (JSON, UTF-8) | payload
// where header["arrays"] lists [name, dtype, shape] triples and the payload is
// their raw little-endian bytes back to back, in that order. Anything else
// (a wrong magic, a header that is not a JSON object, an array list that does
// not describe the payload) is a ProtocolError naming what was wrong.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/seam/input_domain.hpp"
#include "attn_oracle/model/kv_buffer.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/sharding.hpp"
#include "attn_oracle/model/small_seq.hpp"

namespace attn_oracle::inline seam::wire {

// The protocol this build speaks (docs/protocol.md); a worker's hello must name it.
inline constexpr const char* kWorkerProtocol = "attn-oracle-worker/1";

inline constexpr std::string_view kMagic = "AOW1";
inline constexpr size_t kPrefixBytes = 8;                   // magic + header length
inline constexpr uint32_t kMaxHeaderBytes = 16u << 20;      // a longer header is garbage, not a header

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Dtype { i64, i32, f64, f32, f16 };
std::optional<Dtype> dtype_from_string(std::string_view name);
size_t dtype_bytes(Dtype dtype);

struct Array {
  std::string name;
  Dtype dtype = Dtype::f64;
  Shape shape;
  size_t offset = 0;  // into Message::payload
  size_t bytes = 0;
};

struct Message {
  nlohmann::json header;
  std::vector<Array> arrays;
  std::string payload;
  const Array* find(std::string_view name) const;
};

// A request or reply being built: header fields, then arrays appended.
class Writer {
 public:
  nlohmann::json header = nlohmann::json::object();
  void add(const std::string& name, const Shape& shape, const std::vector<int64_t>& data);
  void add(const std::string& name, const Shape& shape, const std::vector<double>& data);
  std::string frame() const;

 private:
  nlohmann::json arrays_ = nlohmann::json::array();
  std::string payload_;
};

// Bytes in, whole messages out.
class FrameReader {
 public:
  void feed(const char* data, size_t n) { buffer_.append(data, n); }
  // The next whole message, or nullopt while more bytes are needed.
  std::optional<Message> next();
  size_t buffered() const { return buffer_.size(); }

 private:
  std::string buffer_;
  std::optional<Message> pending_;  // header parsed, payload still arriving
  size_t payload_bytes_ = 0;
};

// Typed reads of a message's arrays, widened; ProtocolError when the array is
// missing (unless optional) or holds another kind of number.
std::vector<int64_t> ints(const Message& m, std::string_view name);
std::vector<double> floats(const Message& m, std::string_view name);
std::optional<std::vector<double>> optional_floats(const Message& m, std::string_view name);
const Shape& shape_of(const Message& m, std::string_view name);

// ----------------------------------------------------------------- the data model
void put_batch(Writer& w, const PackedBatch& batch);
nlohmann::json shape_json(const AttentionShape& shape);
void put_problem(Writer& w, const AttentionProblem& problem);
// q, k, v (and do when backward) as [R, T, H, D] when the batch is valid and
// the sizes agree, else flat: the worker's own validation names the problem.
void put_inputs(Writer& w, const AttentionProblem& problem, const AttentionInputs& inputs, const std::string& prefix = "");
nlohmann::json sharding_json(const Sharding& sharding);
nlohmann::json sharded_shapes_json(const ShardedShapes& shapes);
nlohmann::json kv_problem_json(const KvBufferProblem& problem);
// A context-parallel layout as a case file's "cp" field spells it:
// {"size", "strategy", "balance"}, "stripe" (striped, or any stripe but 1) and
// "indices" nested by their shape (explicit_indices, or any given).
nlohmann::json cp_layout_json(const CpLayout& layout);

Metadata read_metadata(const Message& m);
// An output the worker does not produce (its hello's "outputs") is not read.
AttentionResult read_attention_result(const Message& m, bool backward, const ProducedOutputs& produced);
SmallSeqResult read_small_seq_result(const Message& m, bool backward, const ProducedOutputs& produced);
MicroSequenceMetadata read_micro_sequence(const Message& m);
// The reply's "permutation": integers of exactly `ids_shape` ([B, T]).
std::vector<int64_t> read_permutation(const Message& m, const Shape& ids_shape);
// The reply's "bound": a number, or null for no promise.
std::optional<double> read_balance_bound(const Message& m);

// The hello's "domain" object (docs/protocol.md): every key optional, an
// unknown key, mask kind or dtype, or a value of the wrong type is a
// ProtocolError naming the key.
InputDomain read_domain(const nlohmann::json& domain);

}  // namespace attn_oracle::seam::wire
