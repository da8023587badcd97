// worker_protocol.cpp: frames and the data model on the wire (worker_protocol.hpp,
// docs/protocol.md). Tested by tests/process_backend_test.cpp.
#include "worker_protocol.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline seam::wire {
namespace {

static_assert(std::endian::native == std::endian::little, "the protocol's arrays are little-endian, as is this host");

using nlohmann::json;

constexpr const char* kDtypeNames[] = {"i64", "i32", "f64", "f32", "f16"};  // by Dtype

// The first bytes of garbage, printable and in hex, for the error message.
std::string show_bytes(std::string_view bytes) {
  const std::string_view head = bytes.substr(0, 16);
  std::string text, hex;
  for (unsigned char c : head) {
    text += c >= 32 && c < 127 ? static_cast<char>(c) : '.';
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x ", c);
    hex += buf;
  }
  if (!hex.empty()) hex.pop_back();
  return "\"" + text + "\" (" + hex + ")";
}

double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 31, fraction = h & 1023;
  double v = exponent == 0    ? std::ldexp(fraction, -24)
             : exponent == 31 ? (fraction ? NAN : INFINITY)
                              : std::ldexp(fraction + 1024, exponent - 25);
  return (h >> 15) ? -v : v;
}

// [name, dtype, shape] triples, checked, with their offsets into the payload.
std::vector<Array> arrays_of(const json& header, size_t& total) {
  std::vector<Array> out;
  total = 0;
  const json list = header.value("arrays", json::array());
  if (!list.is_array()) throw ProtocolError("header.arrays is not a list: " + list.dump().substr(0, 200));
  const size_t limit = static_cast<size_t>(memory_budget());
  for (const json& entry : list) {
    if (!entry.is_array() || entry.size() != 3 || !entry[0].is_string() || !entry[1].is_string() || !entry[2].is_array())
      throw ProtocolError("an entry of header.arrays is not [name, dtype, shape]: " + entry.dump().substr(0, 200));
    Array a;
    a.name = entry[0].get<std::string>();
    const auto dtype = dtype_from_string(entry[1].get<std::string>());
    if (!dtype) throw ProtocolError("array " + a.name + " has dtype " + entry[1].dump() + " (i64, i32, f64, f32, f16 are known)");
    a.dtype = *dtype;
    size_t elems = 1;
    for (const json& d : entry[2]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw ProtocolError("array " + a.name + " has a shape entry that is not a size: " + entry[2].dump());
      const auto n = static_cast<size_t>(d.get<int64_t>());
      if (n != 0 && elems > limit / n) throw ProtocolError("array " + a.name + " of shape " + entry[2].dump() + " is over the memory budget");
      elems *= n;
      a.shape.push_back(static_cast<int64_t>(n));
    }
    a.bytes = elems * dtype_bytes(a.dtype);
    a.offset = total;
    total += a.bytes;
    if (total > limit) throw ProtocolError("the arrays of one message are over the memory budget (" + std::to_string(total) + " bytes)");
    out.push_back(std::move(a));
  }
  return out;
}

const Array& array_or_throw(const Message& m, std::string_view name) {
  const Array* a = m.find(name);
  if (!a) throw ProtocolError("the reply lacks the array " + std::string(name));
  return *a;
}

template <class T>
T read_at(const std::string& payload, size_t at) {
  T v;
  std::memcpy(&v, payload.data() + at, sizeof v);
  return v;
}

// Shape `full` when it holds n elements, else [n]: a worker gets the layout it
// expects for a well-formed problem and can still name a malformed one.
Shape shaped(size_t n, const Shape& full) {
  return static_cast<size_t>(shape_product(full)) == n ? full : Shape{static_cast<int64_t>(n)};
}

int64_t header_int(const Message& m, const char* key) {
  const json& v = m.header.contains(key) ? m.header[key] : json();
  if (!v.is_number_integer()) throw ProtocolError(std::string("the reply's ") + key + " is not an integer: " + v.dump());
  return v.get<int64_t>();
}

}  // namespace

std::optional<Dtype> dtype_from_string(std::string_view name) {
  for (int i = 0; i < 5; ++i)
    if (name == kDtypeNames[i]) return static_cast<Dtype>(i);
  return std::nullopt;
}

size_t dtype_bytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::i64: case Dtype::f64: return 8;
    case Dtype::i32: case Dtype::f32: return 4;
    case Dtype::f16: return 2;
  }
  return 8;
}

const Array* Message::find(std::string_view name) const {
  for (const Array& a : arrays)
    if (a.name == name) return &a;
  return nullptr;
}

void Writer::add(const std::string& name, const Shape& shape, const std::vector<int64_t>& data) {
  arrays_.push_back(json::array({name, "i64", shape}));
  payload_.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(int64_t));
}

void Writer::add(const std::string& name, const Shape& shape, const std::vector<double>& data) {
  arrays_.push_back(json::array({name, "f64", shape}));
  payload_.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(double));
}

std::string Writer::frame() const {
  json h = header;
  if (!arrays_.empty()) h["arrays"] = arrays_;
  const std::string text = h.dump();
  const auto length = static_cast<uint32_t>(text.size());
  std::string out(kMagic);
  out.append(reinterpret_cast<const char*>(&length), sizeof length);
  out += text;
  out += payload_;
  return out;
}

std::optional<Message> FrameReader::next() {
  if (!pending_) {
    if (buffer_.size() < kPrefixBytes) {
      if (!std::string_view(kMagic).starts_with(std::string_view(buffer_).substr(0, kMagic.size())))
        throw ProtocolError("expected a frame starting with \"AOW1\", got " + show_bytes(buffer_));
      return std::nullopt;
    }
    if (std::string_view(buffer_).substr(0, kMagic.size()) != kMagic)
      throw ProtocolError("expected a frame starting with \"AOW1\", got " + show_bytes(buffer_));
    const auto length = read_at<uint32_t>(buffer_, kMagic.size());
    if (length > kMaxHeaderBytes)
      throw ProtocolError("a header of " + std::to_string(length) + " bytes (the limit is " + std::to_string(kMaxHeaderBytes) + ")");
    if (buffer_.size() < kPrefixBytes + length) return std::nullopt;
    const std::string text = buffer_.substr(kPrefixBytes, length);
    Message m;
    m.header = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (m.header.is_discarded() || !m.header.is_object())
      throw ProtocolError("the header is not a JSON object: " + show_bytes(text));
    m.arrays = arrays_of(m.header, payload_bytes_);
    buffer_.erase(0, kPrefixBytes + length);
    pending_ = std::move(m);
  }
  if (buffer_.size() < payload_bytes_) return std::nullopt;
  Message m = std::move(*pending_);
  pending_.reset();
  m.payload = buffer_.substr(0, payload_bytes_);
  buffer_.erase(0, payload_bytes_);
  return m;
}

std::vector<int64_t> ints(const Message& m, std::string_view name) {
  const Array& a = array_or_throw(m, name);
  const size_t n = a.bytes / dtype_bytes(a.dtype);
  std::vector<int64_t> out(n);
  if (a.dtype == Dtype::i64) std::memcpy(out.data(), m.payload.data() + a.offset, a.bytes);
  else if (a.dtype == Dtype::i32)
    for (size_t i = 0; i < n; ++i) out[i] = read_at<int32_t>(m.payload, a.offset + 4 * i);
  else throw ProtocolError("array " + std::string(name) + " holds " + kDtypeNames[int(a.dtype)] + ", not integers");
  return out;
}

std::vector<double> floats(const Message& m, std::string_view name) {
  const Array& a = array_or_throw(m, name);
  const size_t n = a.bytes / dtype_bytes(a.dtype);
  std::vector<double> out(n);
  switch (a.dtype) {
    case Dtype::f64: std::memcpy(out.data(), m.payload.data() + a.offset, a.bytes); break;
    case Dtype::f32: for (size_t i = 0; i < n; ++i) out[i] = read_at<float>(m.payload, a.offset + 4 * i); break;
    case Dtype::f16: for (size_t i = 0; i < n; ++i) out[i] = half_to_double(read_at<uint16_t>(m.payload, a.offset + 2 * i)); break;
    default: throw ProtocolError("array " + std::string(name) + " holds " + kDtypeNames[int(a.dtype)] + ", not floats");
  }
  return out;
}

std::optional<std::vector<double>> optional_floats(const Message& m, std::string_view name) {
  if (!m.find(name)) return std::nullopt;
  return floats(m, name);
}

const Shape& shape_of(const Message& m, std::string_view name) { return array_or_throw(m, name).shape; }

// ----------------------------------------------------------------- the data model
void put_batch(Writer& w, const PackedBatch& b) {
  w.header["batch"] = {{"mask", to_string(b.mask)}, {"window", {b.window.left, b.window.right}}, {"max_segments", b.max_segments}};
  w.add("q_segment_ids", b.q.segment_ids.shape, b.q.segment_ids.data);
  w.add("q_segment_pos", b.q.segment_pos.shape, b.q.segment_pos.data);
  w.add("kv_segment_ids", b.kv.segment_ids.shape, b.kv.segment_ids.data);
  w.add("kv_segment_pos", b.kv.segment_pos.shape, b.kv.segment_pos.data);
}

json shape_json(const AttentionShape& s) {
  json scale = nullptr;  // JSON has no NaN or infinity: those travel as strings, as in case files
  if (s.scale) scale = std::isnan(*s.scale) ? json("nan") : std::isinf(*s.scale) ? json(*s.scale > 0 ? "inf" : "-inf") : json(*s.scale);
  return {{"heads_q", s.heads_q}, {"heads_kv", s.heads_kv}, {"head_dim", s.head_dim}, {"scale", scale},
          {"dtype", to_string(s.dtype)}, {"backward", s.backward}};
}

void put_problem(Writer& w, const AttentionProblem& p) {
  put_batch(w, p.batch);
  w.header["shape"] = shape_json(p.shape);
}

void put_inputs(Writer& w, const AttentionProblem& p, const AttentionInputs& in, const std::string& prefix) {
  int64_t rows = 0, tq = 0, tkv = 0;
  if (const Expected<BatchLayout> l = validate_shapes(p.batch)) rows = l->rows(), tq = l->q_len, tkv = l->kv_len;
  const Shape qs{rows, tq, p.shape.heads_q, p.shape.head_dim}, kvs{rows, tkv, p.shape.heads_kv, p.shape.head_dim};
  w.add(prefix + "q", shaped(in.q.size(), qs), in.q);
  w.add(prefix + "k", shaped(in.k.size(), kvs), in.k);
  w.add(prefix + "v", shaped(in.v.size(), kvs), in.v);
  if (p.shape.backward) w.add(prefix + "do", shaped(in.d_o.size(), qs), in.d_o);
}

json sharding_json(const Sharding& s) {
  json mesh = json::array();
  for (const MeshAxis& a : s.mesh.axes) mesh.push_back(json::array({a.name, a.size}));
  auto spec = [](const PartitionSpec& p) { return json(p.dims); };
  return {{"mesh", mesh}, {"q", spec(s.q)}, {"k", spec(s.k)}, {"v", spec(s.v)}, {"segment_ids", spec(s.segment_ids)}};
}

json sharded_shapes_json(const ShardedShapes& s) {
  return {{"batch", s.batch}, {"q_len", s.q_len}, {"kv_len", s.kv_len},
          {"heads_q", s.heads_q}, {"heads_kv", s.heads_kv}, {"head_dim", s.head_dim}};
}

json kv_problem_json(const KvBufferProblem& p) {
  return {{"doc_lengths", p.doc_lengths}, {"micro_seq_tokens", p.micro_seq_tokens}, {"shape", shape_json(p.shape)}};
}

namespace {
// `data` nested by `shape`; flat when the two disagree, so that nothing is lost.
json nested(const Shape& shape, const std::vector<int64_t>& data) {
  if (static_cast<size_t>(shape_product(shape)) != data.size() || shape.empty()) return json(data);
  size_t at = 0;
  const auto nest = [&](const auto& self, size_t dim) -> json {
    json out = json::array();
    for (int64_t i = 0; i < shape[dim]; ++i) out.push_back(dim + 1 == shape.size() ? json(data[at++]) : self(self, dim + 1));
    return out;
  };
  return nest(nest, 0);
}
}  // namespace

// The same spelling as cases/src/context_parallel_op.cpp's cp_layout_to_json,
// which the seam cannot include.
json cp_layout_json(const CpLayout& l) {
  json j = {{"size", l.cp}, {"strategy", std::string(to_string(l.strategy))}, {"balance", std::string(to_string(l.balance))}};
  if (l.balance == CpBalance::striped || l.stripe != 1) j["stripe"] = l.stripe;
  if (!l.indices.data.empty() || l.balance == CpBalance::explicit_indices) j["indices"] = nested(l.indices.shape, l.indices.data);
  return j;
}

Metadata read_metadata(const Message& m) {
  const Shape& shape = shape_of(m, "q_seqlens");
  if (shape.size() < 2) throw ProtocolError("q_seqlens must be [..., B, M]; the reply's has shape " + shape_to_string(shape));
  Metadata md;
  md.extra.assign(shape.begin(), shape.end() - 2);
  md.batch = shape[shape.size() - 2];
  md.max_segments = shape.back();
  md.q_seqlens = ints(m, "q_seqlens"), md.kv_seqlens = ints(m, "kv_seqlens");
  md.q_offsets = ints(m, "q_offsets"), md.kv_offsets = ints(m, "kv_offsets");
  md.cu_seqlens_q = ints(m, "cu_seqlens_q"), md.cu_seqlens_kv = ints(m, "cu_seqlens_kv");
  md.ragged_offsets_q = ints(m, "ragged_offsets_q"), md.ragged_offsets_kv = ints(m, "ragged_offsets_kv");
  // The optional fields (metadata.hpp), judged when the reply holds them.
  const auto scalar = [&](const char* name, std::optional<int64_t>& out) {
    if (!m.find(name)) return;
    const std::vector<int64_t> v = ints(m, name);
    if (v.size() != 1) throw ProtocolError(std::string(name) + " must be one integer; the reply's has " + std::to_string(v.size()));
    out = v[0];
  };
  scalar("max_seqlen_q", md.max_seqlen_q), scalar("max_seqlen_kv", md.max_seqlen_kv);
  if (m.find("indices_q")) md.indices_q = ints(m, "indices_q");
  if (m.find("indices_kv")) md.indices_kv = ints(m, "indices_kv");
  return md;
}

namespace {
std::optional<AttentionGradients> read_grads(const Message& m, bool backward) {
  if (!backward) return std::nullopt;
  return AttentionGradients{floats(m, "dq"), floats(m, "dk"), floats(m, "dv")};
}
}  // namespace

AttentionResult read_attention_result(const Message& m, bool backward, const ProducedOutputs& produced) {
  return AttentionResult{floats(m, "o"), produced.lse ? floats(m, "lse") : std::vector<double>{},
                         read_grads(m, backward && produced.gradients)};
}

SmallSeqResult read_small_seq_result(const Message& m, bool backward, const ProducedOutputs& produced) {
  return SmallSeqResult{floats(m, "o"), produced.small_seq_p ? floats(m, "p") : std::vector<double>{},
                        read_grads(m, backward && produced.gradients)};
}

MicroSequenceMetadata read_micro_sequence(const Message& m) {
  MicroSequenceMetadata md;
  md.index = header_int(m, "index"), md.begin = header_int(m, "begin"), md.end = header_int(m, "end");
  md.first_document_begin = header_int(m, "first_document_begin");
  md.cu_seqlens_q = ints(m, "cu_seqlens_q"), md.cu_seqlens_k = ints(m, "cu_seqlens_k");
  md.q_document = ints(m, "q_document"), md.q_position = ints(m, "q_position");
  md.kv_document = ints(m, "kv_document"), md.kv_position = ints(m, "kv_position");
  return md;
}

std::vector<int64_t> read_permutation(const Message& m, const Shape& ids_shape) {
  const Shape& shape = shape_of(m, "permutation");
  if (shape != ids_shape)
    throw ProtocolError("permutation must be [B, T] = " + shape_to_string(ids_shape) +
                        ", the shape of the segment ids; the reply's has shape " + shape_to_string(shape));
  return ints(m, "permutation");
}

std::optional<double> read_balance_bound(const Message& m) {
  const json& v = m.header.contains("bound") ? m.header["bound"] : json();
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) throw ProtocolError("the reply's bound is " + v.dump().substr(0, 100) + ": a number, or null for no promise");
  return v.get<double>();
}

namespace {

[[noreturn]] void bad_domain(const std::string& key, const std::string& want, const nlohmann::json& got) {
  throw ProtocolError("domain." + key + " is " + got.dump().substr(0, 100) + ": " + want);
}

bool domain_flag(const std::string& key, const nlohmann::json& v) {
  if (!v.is_boolean()) bad_domain(key, "true or false", v);
  return v.get<bool>();
}

// A list of names, each read by `parse` (nullopt: not a known name).
template <class T, class Parse>
std::vector<T> domain_names(const std::string& key, const nlohmann::json& v, Parse parse, const std::string& known) {
  if (!v.is_array()) bad_domain(key, "a list of " + known, v);
  std::vector<T> out;
  for (const nlohmann::json& name : v) {
    const std::optional<T> parsed = name.is_string() ? parse(name.get<std::string>()) : std::nullopt;
    if (!parsed) bad_domain(key, "a list of " + known + ", and " + name.dump().substr(0, 40) + " is not one", v);
    out.push_back(*parsed);
  }
  return out;
}

std::vector<int64_t> domain_sizes(const std::string& key, const nlohmann::json& v, int64_t least) {
  const std::string want = "a list of integers >= " + std::to_string(least);
  if (!v.is_array()) bad_domain(key, want, v);
  std::vector<int64_t> out;
  for (const nlohmann::json& n : v) {
    if (!n.is_number_integer() || n.get<int64_t>() < least) bad_domain(key, want, v);
    out.push_back(n.get<int64_t>());
  }
  return out;
}

// {"tokens": [16, 64], "rows": [1, 2], "max_segments": [8], "heads": [[2, 1]]}
SizeMenu read_size_menu(const nlohmann::json& v) {
  const std::string heads_want = "a list of [heads_q, heads_kv] pairs, heads_q a multiple of heads_kv >= 1";
  if (!v.is_object()) bad_domain("sizes", "an object with tokens, rows, max_segments and heads lists", v);
  SizeMenu m;
  for (const auto& [key, list] : v.items()) {
    if (key == "tokens") m.tokens = domain_sizes("sizes.tokens", list, 0);
    else if (key == "rows") m.rows = domain_sizes("sizes.rows", list, 1);
    else if (key == "max_segments") m.max_segments = domain_sizes("sizes.max_segments", list, 1);
    else if (key == "heads") {
      if (!list.is_array()) bad_domain("sizes.heads", heads_want, list);
      for (const nlohmann::json& pair : list) {
        const std::vector<int64_t> qk = pair.is_array() && pair.size() == 2 ? domain_sizes("sizes.heads", pair, 1)
                                                                            : std::vector<int64_t>{};
        if (qk.size() != 2 || qk[0] % qk[1] != 0) bad_domain("sizes.heads", heads_want, list);
        m.heads.emplace_back(qk[0], qk[1]);
      }
    } else {
      throw ProtocolError("domain's sizes has the unknown key \"" + key + "\" (known: tokens, rows, max_segments, heads)");
    }
  }
  return m;
}

}  // namespace

InputDomain read_domain(const nlohmann::json& domain) {
  if (!domain.is_object()) throw ProtocolError("domain is " + domain.dump().substr(0, 100) + ": an object");
  InputDomain d;
  for (const auto& [key, v] : domain.items()) {
    if (key == "self_attention_only") d.self_attention_only = domain_flag(key, v);
    else if (key == "no_padding") d.no_padding = domain_flag(key, v);
    else if (key == "positions_from_zero") d.positions_from_zero = domain_flag(key, v);
    else if (key == "one_sequence_a_row") d.one_sequence_a_row = domain_flag(key, v);
    else if (key == "extra_dims") d.extra_dims = domain_flag(key, v);
    else if (key == "positions_extra_dims") d.positions_extra_dims = domain_flag(key, v);
    else if (key == "windows") d.windows = domain_flag(key, v);
    else if (key == "causal_windows_only") d.causal_windows_only = domain_flag(key, v);
    else if (key == "max_position") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_domain(key, "an integer >= 0 (0: no limit)", v);
      d.max_position = v.get<int64_t>();
    } else if (key == "max_rows") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_domain(key, "an integer >= 0 (0: no limit)", v);
      d.max_rows = v.get<int64_t>();
    } else if (key == "mask_kinds") {
      d.mask_kinds = domain_names<MaskKind>(key, v, mask_kind_from_string,
                                            "mask kinds (no_mask, padding, causal, padding_causal, causal_bottom_right, "
                                            "padding_causal_bottom_right)");
    } else if (key == "dtypes") {
      d.dtypes = domain_names<attn_oracle::Dtype>(key, v, [](std::string_view n) { return attn_oracle::dtype_from_string(n); },
                                     "dtypes (fp32, fp16, bf16)");
    } else if (key == "head_dims") {
      if (!v.is_array()) bad_domain(key, "a list of head dims >= 1", v);
      for (const nlohmann::json& dim : v) {
        if (!dim.is_number_integer() || dim.get<int64_t>() < 1) bad_domain(key, "a list of head dims >= 1", v);
        d.head_dims.push_back(dim.get<int64_t>());
      }
    } else if (key == "sizes") {
      d.sizes = read_size_menu(v);
    } else if (key == "cp_strategies") {
      d.cp_strategies = domain_names<CpStrategy>(key, v, cp_strategy_from_string, "cp strategies (all_gather, ring, all_to_all)");
    } else if (key == "cp_balances") {
      d.cp_balances = domain_names<CpBalance>(key, v, cp_balance_from_string,
                                              "cp balances (contiguous, dual_chunk_swap, striped, head_tail, explicit_indices)");
    } else if (key == "cp_sizes") {
      d.cp_sizes = domain_sizes(key, v, 1);
    } else if (key == "cp_stripes") {
      d.cp_stripes = domain_sizes(key, v, 1);
    } else {
      throw ProtocolError("domain has the unknown key \"" + key +
                          "\" (known: self_attention_only, no_padding, positions_from_zero, one_sequence_a_row, "
                          "max_rows, extra_dims, positions_extra_dims, max_position, mask_kinds, windows, "
                          "causal_windows_only, dtypes, head_dims, sizes, cp_strategies, cp_balances, cp_sizes, cp_stripes)");
    }
  }
  return d;
}

}  // namespace attn_oracle::seam::wire
