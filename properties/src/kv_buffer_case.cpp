// kv_buffer_case.cpp: reading, writing and evaluating `op: "kv_buffer"` case
// files; see kv_buffer_case.hpp. Reading never throws: a malformed field gives
// bad_case naming it. Values are not validated here (an empty doc_lengths or
// m < 1 is the validator's code, which a fixture may pin).
// Tested by tests/kv_buffer_test.cpp and the kv_buffer fixtures (tests/fixtures_test.cpp).
#include "attn_oracle/kv_buffer_case.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/reference/kv_buffer.hpp"
#include "attn_oracle/reference_backend.hpp"

namespace attn_oracle {
namespace {

using nlohmann::json;

const std::set<std::string> kKeys = {"schema",   "op",       "note",  "expected", "doc_lengths", "micro_seq_tokens",
                                     "heads_q",  "heads_kv", "head_dim", "dtype", "scale",       "backward", "data"};

Error bad(const std::string& message) { return Error{ErrorCode::bad_case, message}; }

std::optional<int64_t> int64_of(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return v.get<int64_t>();
}

// `key` as an int64, or an error naming it.
std::optional<Error> read_int(const json& j, const char* key, int64_t& out) {
  if (!j.contains(key)) return bad(std::string(key) + ": missing");
  auto v = int64_of(j[key]);
  if (!v) return bad(std::string(key) + ": expected an integer in int64 range, found " + j[key].dump());
  out = *v;
  return std::nullopt;
}

std::optional<Error> read_shape(const json& j, AttentionShape& s) {
  if (auto e = read_int(j, "heads_q", s.heads_q)) return e;
  if (auto e = read_int(j, "heads_kv", s.heads_kv)) return e;
  if (auto e = read_int(j, "head_dim", s.head_dim)) return e;
  const json dtype = j.value("dtype", json());
  auto parsed = dtype.is_string() ? dtype_from_string(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) return bad("dtype: expected \"fp32\", \"fp16\" or \"bf16\", found " + dtype.dump());
  s.dtype = *parsed;
  if (auto it = j.find("scale"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) return bad("scale: expected a number, found " + it->dump());
    s.scale = it->get<double>();
  }
  if (auto it = j.find("backward"); it != j.end()) {
    if (!it->is_boolean()) return bad("backward: expected true or false, found " + it->dump());
    s.backward = it->get<bool>();
  }
  return std::nullopt;
}

json lse_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// [tokens][heads][dim] from a flat row-major tensor (f maps each value).
template <class F>
json nest3(const std::vector<double>& t, int64_t a, int64_t b, int64_t c, F f) {
  json out = json::array();
  for (int64_t i = 0; i < a; ++i) {
    json rows = json::array();
    for (int64_t h = 0; h < b; ++h) {
      json row = json::array();
      for (int64_t k = 0; k < c; ++k) row.push_back(f(t[(i * b + h) * c + k]));
      rows.push_back(std::move(row));
    }
    out.push_back(std::move(rows));
  }
  return out;
}

json plain(double x) { return json(x); }

}  // namespace

std::optional<Error> parse_kv_buffer_fields(const json& j, Case& c) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kKeys.count(it.key())) return bad(it.key() + ": unknown field");
  KvBufferProblem& p = c.kv_buffer;
  if (!j.contains("doc_lengths") || !j["doc_lengths"].is_array())
    return bad("doc_lengths: expected an array of integers");
  p.doc_lengths.clear();
  for (size_t i = 0; i < j["doc_lengths"].size(); ++i) {
    auto v = int64_of(j["doc_lengths"][i]);
    if (!v) return bad("doc_lengths[" + std::to_string(i) + "]: expected an integer, found " + j["doc_lengths"][i].dump());
    p.doc_lengths.push_back(*v);
  }
  if (auto e = read_int(j, "micro_seq_tokens", p.micro_seq_tokens)) return e;
  if (auto e = read_shape(j, p.shape)) return e;
  const json data = j.value("data", json());
  if (!data.is_object() || !data.contains("seed") || data.size() != 1 ||
      !(data["seed"].is_number_unsigned() || (data["seed"].is_number_integer() && data["seed"].get<int64_t>() >= 0)))
    return bad("data: expected {\"seed\": N} with N an unsigned 64-bit integer, found " + data.dump());
  c.data_seed = data["seed"].get<uint64_t>();
  return std::nullopt;
}

json kv_buffer_case_to_json(const Case& c) {
  const KvBufferProblem& p = c.kv_buffer;
  json j = {{"schema", kCaseSchema},           {"op", "kv_buffer"},
            {"doc_lengths", p.doc_lengths},    {"micro_seq_tokens", p.micro_seq_tokens},
            {"heads_q", p.shape.heads_q},      {"heads_kv", p.shape.heads_kv},
            {"head_dim", p.shape.head_dim},    {"dtype", std::string(to_string(p.shape.dtype))},
            {"backward", p.shape.backward},    {"data", {{"seed", c.data_seed.value_or(0)}}}};
  if (p.shape.scale) j["scale"] = *p.shape.scale;
  if (!c.note.empty()) j["note"] = c.note;
  if (c.expected) j["expected"] = *c.expected;
  return j;
}

Expected<AttentionInputs> kv_buffer_inputs(const Case& c) {
  if (c.op != CaseOp::kv_buffer) return bad("op " + std::string(to_string(c.op)) + " is not kv_buffer");
  return generate_kv_buffer_inputs(c.kv_buffer, c.data_seed.value_or(0));
}

json micro_sequence_to_json(const MicroSequenceMetadata& md) {
  return {{"index", md.index},
          {"begin", md.begin},
          {"end", md.end},
          {"first_document_begin", md.first_document_begin},
          {"cu_seqlens_q", md.cu_seqlens_q},
          {"cu_seqlens_k", md.cu_seqlens_k},
          {"q_document", md.q_document},
          {"q_position", md.q_position},
          {"kv_document", md.kv_document},
          {"kv_position", md.kv_position}};
}

json kv_buffer_result_to_json(const KvBufferProblem& p, const std::vector<MicroSequenceMetadata>& plans,
                              const AttentionResult& r) {
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  const int64_t hq = p.shape.heads_q, hkv = p.shape.heads_kv, d = p.shape.head_dim;
  json micro = json::array();
  for (const MicroSequenceMetadata& md : plans) micro.push_back(micro_sequence_to_json(md));
  json j = {{"micro_sequences", micro}, {"o", nest3(r.o, n, hq, d, plain)}, {"lse", nest3(r.lse, 1, hq, n, lse_or_null)[0]}};
  if (r.grads) {
    j["dq"] = nest3(r.grads->dq, n, hq, d, plain);
    j["dk"] = nest3(r.grads->dk, n, hkv, d, plain);
    j["dv"] = nest3(r.grads->dv, n, hkv, d, plain);
  }
  return j;
}

json evaluate_kv_buffer_case(KvBufferCapability& cap, const Case& c) {
  auto inputs = kv_buffer_inputs(c);
  if (!inputs) return error_to_json(inputs.error());
  const KvBufferProblem& p = c.kv_buffer;
  if (validate_kv_buffer(p))
    if (auto reason = cap.unsupported(p)) return error_to_json(Error{ErrorCode::unsupported, *reason});
  auto sizes = validate_kv_buffer(p, &inputs.value());
  if (!sizes) {  // the capability must reject it with the validator's code
    auto r = cap.stream(p, inputs.value());
    return r ? json{{"accepted", "an invalid kv_buffer problem"}} : error_to_json(r.error());
  }
  std::vector<MicroSequenceMetadata> plans;
  for (int64_t i = 0; i < sizes->micro_sequences; ++i) {
    auto md = cap.micro_sequence(p, i);
    if (!md) return error_to_json(md.error());
    plans.push_back(md.value());
  }
  auto r = cap.stream(p, inputs.value());
  if (!r) return error_to_json(r.error());
  return kv_buffer_result_to_json(p, plans, r.value());
}

}  // namespace attn_oracle

namespace attn_oracle {
namespace {

// Numbers to `rel` relative, integers and the rest exactly; differences into `lines`.
void diff(const nlohmann::json& got, const nlohmann::json& want, const std::string& path, double rel,
          std::vector<std::string>& lines) {
  if (got.is_array() && want.is_array() && got.size() == want.size()) {
    for (size_t i = 0; i < got.size(); ++i) diff(got[i], want[i], path + "[" + std::to_string(i) + "]", rel, lines);
    return;
  }
  if (got.is_object() && want.is_object() && got.size() == want.size()) {
    for (auto it = want.begin(); it != want.end(); ++it)
      diff(got.value(it.key(), nlohmann::json()), it.value(), path + "." + it.key(), rel, lines);
    return;
  }
  const bool close = got.is_number_float() && want.is_number() &&
                     std::fabs(got.get<double>() - want.get<double>()) <= rel * std::max(1.0, std::fabs(want.get<double>()));
  if (got != want && !close) lines.push_back(path + ": got " + got.dump() + ", want " + want.dump());
}

}  // namespace

int replay_kv_buffer_case(Backend& backend, const Case& c, std::ostream& os) {
  KvBufferCapability* cap = backend.kv_buffer();
  if (!cap) return os << "backend " << backend.name() << " lacks the kv_buffer capability\n", 1;
  const nlohmann::json got = evaluate_kv_buffer_case(*cap, c);
  const nlohmann::json want = evaluate_kv_buffer_case(reference_kv_buffer(), c);
  std::vector<std::string> lines;
  if (got.contains("error") || want.contains("error")) {
    diff(got.contains("error") ? got["error"]["code"] : got, want.contains("error") ? want["error"]["code"] : want,
         "error.code", 0.0, lines);
  } else {
    diff(got["micro_sequences"], want["micro_sequences"], "micro_sequences", 0.0, lines);
    const AttentionInputs in = kv_buffer_inputs(c).value();
    const auto streamed = cap->stream(c.kv_buffer, in);
    const auto oracle = ref::kv_buffer_whole_sequence(c.kv_buffer, in);
    for (const ToleranceCheck& t : check_attention_tolerance(whole_sequence_problem(c.kv_buffer), in, streamed.value(),
                                                             oracle.value()))
      if (!t.pass) lines.push_back(t.describe());
  }
  if (c.expected) {
    std::vector<std::string> expected_lines;
    if (c.expected->contains("error"))
      diff(want.contains("error") ? want["error"]["code"] : want, (*c.expected)["error"]["code"], "expected.error.code", 0.0,
           expected_lines);
    else
      diff(want, *c.expected, "expected", 1e-12, expected_lines);
    for (const std::string& l : expected_lines) lines.push_back("reference disagrees with the case's expected result: " + l);
  }
  os << (lines.empty() ? "PASS" : "FAIL") << "\n";
  for (size_t i = 0; i < lines.size() && i < 20; ++i) os << "  " << lines[i] << "\n";
  return lines.empty() ? 0 : 3;
}

}  // namespace attn_oracle
