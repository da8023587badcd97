// case_file.cpp: reading and writing `attn-oracle.case/1` case files (DESIGN
// section 9), and the JSON that `attn-oracle eval` prints for results.
//
// Reading is strict and never throws: every malformed field gives an Error whose
// message names the field path ("q.segment_ids[1]", "tensors.k[0][2]"):
//  - bad_case: not JSON, wrong schema or op, a missing or unknown field, a wrong
//    type, a ragged nested array, arrays nested deeper than 16 levels, a
//    non-integer id, an integer outside int64, a number that is not finite;
//  - bad_mask / bad_window: the mask and window of DESIGN section 2;
//  - bad_tensor_shape: explicit tensors whose nested shape is not the problem's
//    [extra.., B, T, H, D] (checked only when the problem itself is valid, so
//    the validator's precedence is kept).
// Values are not validated here (M < 1 is bad_max_segments from validate()).
// `small_seq` cases (DESIGN section 6) have exactly the attention fields;
// `kv_buffer` cases are read and written by kv_buffer_case.cpp; `sharding`
// cases have mesh and specs (sharding_case.cpp) and then either shapes or the
// attention fields, never both.
//
// Tested by tests/case_file_test.cpp (round trips, every error path) and
// tests/fixtures_test.cpp (every fixture evaluates to its `expected`).
#include "attn_oracle/case_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "attn_oracle/kv_buffer_case.hpp"
#include "attn_oracle/sharding_case.hpp"
#include "attn_oracle/validate.hpp"

namespace attn_oracle {
namespace {

using nlohmann::json;

// Internal only: every reading error unwinds to case_from_json, which returns it.
struct CaseError {
  Error error;
};

[[noreturn]] void fail(ErrorCode code, const std::string& message) {
  throw CaseError{Error{code, message}};
}
[[noreturn]] void fail(const std::string& message) { fail(ErrorCode::bad_case, message); }

constexpr std::string_view kOpNames[] = {"metadata", "attention", "small_seq", "kv_buffer",
                                         "sharding"};

// ---------------------------------------------------------------------------
// Scalars and fields
// ---------------------------------------------------------------------------

const json& required(const json& object, const char* key, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) fail(path + key + ": missing");
  return *it;
}

std::optional<int64_t> as_int64(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return v.get<int64_t>();
}

int64_t int_field(const json& v, const std::string& path, ErrorCode code = ErrorCode::bad_case) {
  if (auto x = as_int64(v)) return *x;
  fail(code, path + ": expected an integer in int64 range, found " + v.dump());
}

// JSON has no NaN or Inf, but a literal like 1e999 parses to inf.
double number_field(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path + ": expected a number, found " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(path + ": expected a finite number, found " + v.dump());
  return x;
}

void reject_unknown_keys(const json& object, const std::set<std::string>& known,
                         const std::string& path) {
  for (auto it = object.begin(); it != object.end(); ++it)
    if (!known.count(it.key())) fail(path + it.key() + ": unknown field");
}

// ---------------------------------------------------------------------------
// Nested arrays <-> (shape, row-major data)
// ---------------------------------------------------------------------------

// Deeper nesting is no tensor of ours; refusing it keeps flatten()'s recursion shallow.
constexpr size_t kMaxArrayRank = 16;

// The shape read off the first element at every level; flatten() checks the rest.
Shape nested_shape(const json& j, const std::string& path) {
  Shape shape;
  for (const json* p = &j; p->is_array(); p = &(*p)[0]) {
    if (shape.size() == kMaxArrayRank)
      fail(path + ": arrays nested deeper than " + std::to_string(kMaxArrayRank) + " levels");
    shape.push_back(static_cast<int64_t>(p->size()));
    if (p->empty()) break;
  }
  return shape;
}

template <class T, class Leaf>
void flatten(const json& j, const Shape& shape, size_t depth, const std::string& path,
             std::vector<T>& out, Leaf leaf) {
  if (depth == shape.size()) {
    if (j.is_array()) fail(path + ": ragged array: found an array where a number belongs");
    out.push_back(leaf(j, path));
    return;
  }
  if (!j.is_array())
    fail(path + ": ragged array: expected an array of length " + std::to_string(shape[depth]) +
         ", found " + j.dump());
  if (static_cast<int64_t>(j.size()) != shape[depth])
    fail(path + ": ragged array: length " + std::to_string(j.size()) + ", expected " +
         std::to_string(shape[depth]));
  for (size_t i = 0; i < j.size(); ++i)
    flatten(j[i], shape, depth + 1, path + "[" + std::to_string(i) + "]", out, leaf);
}

IntArray parse_int_array(const json& j, const std::string& path) {
  IntArray a;
  a.shape = nested_shape(j, path);
  flatten(j, a.shape, 0, path, a.data,
          [](const json& v, const std::string& p) { return int_field(v, p); });
  return a;
}

std::vector<double> parse_double_array(const json& j, const std::string& path, Shape& shape) {
  std::vector<double> data;
  shape = nested_shape(j, path);
  flatten(j, shape, 0, path, data, number_field);
  return data;
}

// Nested array of `shape` over `data`; a flat list when the sizes disagree.
template <class T, class Convert>
json nest(const Shape& shape, const std::vector<T>& data, Convert convert, size_t depth = 0,
          int64_t offset = 0) {
  if (shape_product(shape) != static_cast<int64_t>(data.size())) {
    json flat = json::array();
    for (const T& x : data) flat.push_back(convert(x));
    return flat;
  }
  if (depth == shape.size()) return convert(data[offset]);
  json out = json::array();
  const int64_t stride = shape_product(Shape(shape.begin() + depth + 1, shape.end()));
  for (int64_t i = 0; i < shape[depth]; ++i)
    out.push_back(nest(shape, data, convert, depth + 1, offset + i * stride));
  return out;
}

template <class T>
json nest(const Shape& shape, const std::vector<T>& data) {
  return nest(shape, data, [](const T& x) { return json(x); });
}

// ---------------------------------------------------------------------------
// The packed batch
// ---------------------------------------------------------------------------

PackedSide parse_side(const json& j, const std::string& name) {
  if (!j.is_object()) fail(name + ": expected an object with segment_ids and segment_pos");
  reject_unknown_keys(j, {"segment_ids", "segment_pos"}, name + ".");
  PackedSide side;
  side.segment_ids = parse_int_array(required(j, "segment_ids", name + "."), name + ".segment_ids");
  side.segment_pos = parse_int_array(required(j, "segment_pos", name + "."), name + ".segment_pos");
  return side;
}

Window parse_window(const json& j) {
  if (!j.is_array() || j.size() != 2)
    fail(ErrorCode::bad_window, "window: expected [left, right], found " + j.dump());
  return Window{int_field(j[0], "window[0]", ErrorCode::bad_window),
                int_field(j[1], "window[1]", ErrorCode::bad_window)};
}

MaskKind parse_mask(const json& j) {
  if (j.is_string())
    if (auto kind = mask_kind_from_string(j.get<std::string>())) return *kind;
  fail(ErrorCode::bad_mask, "mask: unknown mask kind " + j.dump() +
                                " (expected no_mask, padding, causal, padding_causal, "
                                "causal_bottom_right or padding_causal_bottom_right)");
}

PackedBatch parse_batch(const json& j) {
  PackedBatch b;
  b.mask = parse_mask(required(j, "mask", ""));
  if (auto it = j.find("window"); it != j.end()) b.window = parse_window(*it);
  b.max_segments = int_field(required(j, "max_segments", ""), "max_segments");
  b.q = parse_side(required(j, "q", ""), "q");
  b.kv = parse_side(required(j, "kv", ""), "kv");
  return b;
}

json side_to_json(const PackedSide& s) {
  return {{"segment_ids", nest(s.segment_ids.shape, s.segment_ids.data)},
          {"segment_pos", nest(s.segment_pos.shape, s.segment_pos.data)}};
}

// ---------------------------------------------------------------------------
// Attention fields
// ---------------------------------------------------------------------------

// The nested shapes of q (k, v) for a valid problem: extra + [B, T, H, D].
struct TensorShapes { Shape q, kv; };

std::optional<TensorShapes> tensor_shapes(const AttentionProblem& p) {
  const auto layout = validate_shapes(p.batch);
  if (!layout) return std::nullopt;
  const BatchLayout& l = layout.value();
  TensorShapes t{l.extra, l.extra};
  t.q.insert(t.q.end(), {l.batch, l.q_len, p.shape.heads_q, p.shape.head_dim});
  t.kv.insert(t.kv.end(), {l.batch, l.kv_len, p.shape.heads_kv, p.shape.head_dim});
  return t;
}

std::vector<double> parse_tensor(const json& tensors, const char* name, const Shape* expected) {
  const std::string path = std::string("tensors.") + name;
  Shape shape;
  std::vector<double> data = parse_double_array(required(tensors, name, "tensors."), path, shape);
  if (expected && shape != *expected)
    fail(ErrorCode::bad_tensor_shape, path + ": shape " + shape_to_string(shape) +
                                          ", expected " + shape_to_string(*expected));
  return data;
}

AttentionInputs parse_tensors(const json& j, const AttentionProblem& problem) {
  if (!j.is_object()) fail("tensors: expected an object with q, k, v (and do)");
  const bool backward = problem.shape.backward;
  if (!backward && j.contains("do")) fail("tensors.do: given but backward is false");
  reject_unknown_keys(j, {"q", "k", "v", "do"}, "tensors.");
  // Shapes are compared only when the problem is valid: otherwise the
  // validator's own code (which takes precedence) is what eval reports.
  std::optional<TensorShapes> shapes;
  if (validate_attention(problem)) shapes = tensor_shapes(problem);
  const Shape* q_shape = shapes ? &shapes->q : nullptr;
  const Shape* kv_shape = shapes ? &shapes->kv : nullptr;
  AttentionInputs in;
  in.q = parse_tensor(j, "q", q_shape);
  in.k = parse_tensor(j, "k", kv_shape);
  in.v = parse_tensor(j, "v", kv_shape);
  if (backward) in.d_o = parse_tensor(j, "do", q_shape);
  return in;
}

void parse_attention(const json& j, Case& c) {
  AttentionShape& s = c.attention;
  s.heads_q = int_field(required(j, "heads_q", ""), "heads_q");
  s.heads_kv = int_field(required(j, "heads_kv", ""), "heads_kv");
  s.head_dim = int_field(required(j, "head_dim", ""), "head_dim");
  const json& dtype = required(j, "dtype", "");
  auto parsed = dtype.is_string() ? dtype_from_string(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) fail("dtype: expected \"fp32\", \"fp16\" or \"bf16\", found " + dtype.dump());
  s.dtype = *parsed;
  if (auto it = j.find("scale"); it != j.end() && !it->is_null())
    s.scale = number_field(*it, "scale");
  if (auto it = j.find("backward"); it != j.end()) {
    if (!it->is_boolean()) fail("backward: expected true or false, found " + it->dump());
    s.backward = it->get<bool>();
  }
  const bool has_data = j.contains("data"), has_tensors = j.contains("tensors");
  if (has_data == has_tensors) fail("data, tensors: exactly one of them is required");
  if (has_tensors) {
    c.tensors = parse_tensors(j["tensors"], attention_problem(c));
    return;
  }
  const json& data = j["data"];
  if (!data.is_object()) fail("data: expected {\"seed\": N}, found " + data.dump());
  reject_unknown_keys(data, {"seed"}, "data.");
  const json& seed = required(data, "seed", "data.");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    fail("data.seed: expected an unsigned 64-bit integer, found " + seed.dump());
  c.data_seed = seed.get<uint64_t>();
}

json attention_fields_to_json(const Case& c) {
  const AttentionShape& s = c.attention;
  json j = {{"heads_q", s.heads_q},   {"heads_kv", s.heads_kv},
            {"head_dim", s.head_dim}, {"dtype", std::string(to_string(s.dtype))},
            {"backward", s.backward}};
  if (s.scale) j["scale"] = *s.scale;
  if (c.data_seed) j["data"] = {{"seed", *c.data_seed}};
  if (c.tensors) {
    const auto shapes = tensor_shapes(attention_problem(c));
    const Shape none{-1};  // never matches: writes a flat list
    const Shape& q = shapes ? shapes->q : none;
    const Shape& kv = shapes ? shapes->kv : none;
    json t = {{"q", nest(q, c.tensors->q)}, {"k", nest(kv, c.tensors->k)},
              {"v", nest(kv, c.tensors->v)}};
    if (s.backward) t["do"] = nest(q, c.tensors->d_o);
    j["tensors"] = std::move(t);
  }
  return j;
}

// ---------------------------------------------------------------------------
// The case
// ---------------------------------------------------------------------------

CaseOp parse_op(const json& j) {
  const json& op = required(j, "op", "");
  for (size_t i = 0; i < std::size(kOpNames); ++i)
    if (op.is_string() && op.get<std::string>() == kOpNames[i]) return static_cast<CaseOp>(i);
  fail("op: unknown op " + op.dump() +
       " (expected metadata, attention, small_seq, kv_buffer or sharding)");
}

// attention and small_seq share the attention fields.
bool has_attention_fields(CaseOp op) { return op == CaseOp::attention || op == CaseOp::small_seq; }

const std::set<std::string> kMetadataKeys = {"schema", "op",  "note", "mask",    "window",
                                             "max_segments", "q", "kv", "expected"};
const std::set<std::string> kAttentionKeys = {"heads_q", "heads_kv", "head_dim", "dtype", "scale",
                                              "backward", "data", "tensors"};

// op sharding: mesh and specs, then shapes (validation only) or a batch with
// the attention fields (the sharded run), never both.
void parse_sharding_fields(const json& j, Case& c) {
  auto sharding = sharding_from_json(j);
  if (!sharding) fail(sharding.error().message);
  c.sharding = sharding.value();
  std::set<std::string> known = {"schema", "op", "note", "expected", "mesh", "specs"};
  if (!j.contains("mask")) {
    known.insert("shapes");
    reject_unknown_keys(j, known, "");
    auto shapes = shapes_from_json(required(j, "shapes", ""));
    if (!shapes) fail(shapes.error().message);
    c.sharding_shapes = shapes.value();
    return;
  }
  if (j.contains("shapes")) fail("shapes: not allowed beside a packed batch, whose shapes and heads are the call's");
  known.insert(kMetadataKeys.begin(), kMetadataKeys.end());
  known.insert(kAttentionKeys.begin(), kAttentionKeys.end());
  reject_unknown_keys(j, known, "");
  c.batch = parse_batch(j);
  parse_attention(j, c);
}

Case parse_case(const json& j) {
  if (!j.is_object()) fail("case: expected a JSON object");
  const json& schema = required(j, "schema", "");
  if (schema != kCaseSchema)
    fail("schema: expected \"" + std::string(kCaseSchema) + "\", found " + schema.dump());
  Case c;
  c.op = parse_op(j);
  if (auto it = j.find("note"); it != j.end()) {
    if (!it->is_string()) fail("note: expected a string, found " + it->dump());
    c.note = it->get<std::string>();
  }
  if (auto it = j.find("expected"); it != j.end()) c.expected = *it;
  if (c.op == CaseOp::kv_buffer) {
    if (auto e = parse_kv_buffer_fields(j, c)) fail(e->code, e->message);
    return c;
  }
  if (c.op == CaseOp::sharding) {
    parse_sharding_fields(j, c);
    return c;
  }
  std::set<std::string> known = kMetadataKeys;
  if (has_attention_fields(c.op)) known.insert(kAttentionKeys.begin(), kAttentionKeys.end());
  reject_unknown_keys(j, known, "");
  c.batch = parse_batch(j);
  if (has_attention_fields(c.op)) parse_attention(j, c);
  return c;
}

// ---------------------------------------------------------------------------
// Writing: one key per line in a fixed order, arrays of numbers on one line.
// ---------------------------------------------------------------------------

constexpr std::string_view kKeyOrder[] = {
    "schema",  "op",    "note",  "mesh", "specs", "shapes",   "mask",      "window",  "max_segments", "doc_lengths", "micro_seq_tokens", "heads_q",
    "heads_kv", "head_dim", "dtype", "scale", "backward", "q", "kv", "data", "tensors",
    "expected"};

void write_pretty(std::ostream& os, const json& j, int indent);

void write_object(std::ostream& os, const json& j, int indent) {
  std::vector<std::string> keys;
  for (std::string_view k : kKeyOrder)
    if (j.contains(std::string(k))) keys.emplace_back(k);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(std::begin(kKeyOrder), std::end(kKeyOrder), it.key()) == std::end(kKeyOrder))
      keys.push_back(it.key());
  const std::string pad(indent + 2, ' ');
  os << "{\n";
  for (size_t i = 0; i < keys.size(); ++i) {
    os << pad << json(keys[i]).dump() << ": ";
    write_pretty(os, j[keys[i]], indent + 2);
    os << (i + 1 < keys.size() ? ",\n" : "\n");
  }
  os << std::string(indent, ' ') << "}";
}

// Arrays and objects of scalars on one line: `[1, 1, 0]`, `{"code": "bad_mask"}`.
void write_inline(std::ostream& os, const json& j) {
  const auto dump = [](const json& x) { return x.dump(-1, ' ', false, json::error_handler_t::replace); };
  if (!j.is_structured() || j.empty()) {
    os << dump(j);
    return;
  }
  os << (j.is_array() ? "[" : "{");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it != j.begin()) os << ", ";
    if (j.is_object()) os << dump(it.key()) << ": ";
    os << dump(it.value());
  }
  os << (j.is_array() ? "]" : "}");
}

void write_pretty(std::ostream& os, const json& j, int indent) {
  const bool nested = j.is_structured() && std::any_of(j.begin(), j.end(), [](const json& e) {
                        return e.is_structured();
                      });
  if (!nested) return write_inline(os, j);
  if (j.is_object()) return write_object(os, j, indent);
  const std::string pad(indent + 2, ' ');
  os << "[\n";
  for (size_t i = 0; i < j.size(); ++i) {
    os << pad;
    write_pretty(os, j[i], indent + 2);
    os << (i + 1 < j.size() ? ",\n" : "\n");
  }
  os << std::string(indent, ' ') << "]";
}

}  // namespace

std::string_view to_string(CaseOp op) { return kOpNames[static_cast<size_t>(op)]; }

Expected<Case> case_from_json(const json& j) {
  try {
    return parse_case(j);
  } catch (const CaseError& e) {
    return e.error;
  } catch (const std::exception& e) {
    return Error{ErrorCode::bad_case, std::string("case: ") + e.what()};
  }
}

Expected<Case> read_case_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::bad_case, path + ": cannot open the file"};
  try {
    return case_from_json(json::parse(in));
  } catch (const std::exception& e) {
    return Error{ErrorCode::bad_case, path + ": not valid JSON: " + e.what()};
  }
}

json case_to_json(const Case& c) {
  if (c.op == CaseOp::kv_buffer) return kv_buffer_case_to_json(c);
  if (c.op == CaseOp::sharding && c.sharding_shapes) {
    json j = {{"schema", kCaseSchema}, {"op", "sharding"}, {"mesh", mesh_to_json(c.sharding.mesh)},
              {"specs", specs_to_json(c.sharding)}, {"shapes", shapes_to_json(*c.sharding_shapes)}};
    if (!c.note.empty()) j["note"] = c.note;
    if (c.expected) j["expected"] = *c.expected;
    return j;
  }
  const PackedBatch& b = c.batch;
  json j = {{"schema", kCaseSchema},
            {"op", std::string(to_string(c.op))},
            {"mask", std::string(to_string(b.mask))},
            {"window", {b.window.left, b.window.right}},
            {"max_segments", b.max_segments},
            {"q", side_to_json(b.q)},
            {"kv", side_to_json(b.kv)}};
  if (!c.note.empty()) j["note"] = c.note;
  if (has_attention_fields(c.op) || c.op == CaseOp::sharding) j.update(attention_fields_to_json(c));
  if (c.op == CaseOp::sharding) j.update({{"mesh", mesh_to_json(c.sharding.mesh)}, {"specs", specs_to_json(c.sharding)}});
  if (c.expected) j["expected"] = *c.expected;
  return j;
}

bool write_case_file(const std::string& path, const Case& c) {
  try {
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p);
    if (!out) return false;
    write_pretty(out, case_to_json(c), 0);
    out << "\n";
    out.close();
    return static_cast<bool>(out);
  } catch (const std::exception&) {
    return false;
  }
}

AttentionProblem attention_problem(const Case& c) { return AttentionProblem{c.batch, c.attention}; }

// Explicit tensors are rounded to the dtype here (not in the Case, so files
// round-trip): the reference must compute what the device was asked to compute.
Expected<AttentionInputs> attention_inputs(const Case& c) {
  if (!has_attention_fields(c.op) && !(c.op == CaseOp::sharding && !c.sharding_shapes))
    return Error{ErrorCode::bad_case, "op " + std::string(to_string(c.op)) + " has no attention inputs"};
  const AttentionProblem problem = attention_problem(c);
  if (c.data_seed) return generate_inputs(problem, *c.data_seed);
  if (!c.tensors) return Error{ErrorCode::bad_case, "data, tensors: the case has neither"};
  AttentionInputs in = *c.tensors;
  for (auto* t : {&in.q, &in.k, &in.v, &in.d_o})
    for (double& x : *t) x = round_to_dtype(x, problem.shape.dtype);
  return in;
}

// ---------------------------------------------------------------------------
// Results as eval prints them
// ---------------------------------------------------------------------------

json metadata_to_json(const Metadata& md) {
  Shape seqlens = md.extra, offsets = md.extra;
  seqlens.insert(seqlens.end(), {md.batch, md.max_segments});
  offsets.insert(offsets.end(), {md.batch, md.max_segments + 1});
  return {{"q_seqlens", nest(seqlens, md.q_seqlens)},
          {"kv_seqlens", nest(seqlens, md.kv_seqlens)},
          {"q_offsets", nest(offsets, md.q_offsets)},
          {"kv_offsets", nest(offsets, md.kv_offsets)},
          {"cu_seqlens_q", md.cu_seqlens_q},
          {"cu_seqlens_kv", md.cu_seqlens_kv},
          {"ragged_offsets_q", md.ragged_offsets_q},
          {"ragged_offsets_kv", md.ragged_offsets_kv}};
}

json attention_result_to_json(const AttentionProblem& problem, const AttentionResult& r) {
  const auto shapes = tensor_shapes(problem);
  Shape q{-1}, kv{-1}, lse{-1};  // flat lists when the problem has no valid shape
  if (shapes) {
    q = shapes->q;
    kv = shapes->kv;
    lse = Shape(q.begin(), q.end() - 2);  // extra + [B, Tq] -> extra + [B, Hq, Tq]
    lse.insert(lse.end() - 1, problem.shape.heads_q);
  }
  auto finite_or_null = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  json j = {{"o", nest(q, r.o)}, {"lse", nest(lse, r.lse, finite_or_null)}};
  if (r.grads) {
    j["dq"] = nest(q, r.grads->dq);
    j["dk"] = nest(kv, r.grads->dk);
    j["dv"] = nest(kv, r.grads->dv);
  }
  return j;
}

// P is [docs][Hq][16]; docs is read off its size.
json small_seq_result_to_json(const AttentionProblem& problem, const SmallSeqResult& r) {
  const auto shapes = tensor_shapes(problem);
  const Shape q = shapes ? shapes->q : Shape{-1}, kv = shapes ? shapes->kv : Shape{-1};
  const int64_t row = std::max<int64_t>(1, problem.shape.heads_q) * kSmallSeqMaxKeys;
  const Shape p = r.p.size() % row == 0 ? Shape{static_cast<int64_t>(r.p.size()) / row, problem.shape.heads_q, kSmallSeqMaxKeys} : Shape{-1};
  json j = {{"o", nest(q, r.o)}, {"p", nest(p, r.p)}};
  if (r.grads) {
    j["dq"] = nest(q, r.grads->dq);
    j["dk"] = nest(kv, r.grads->dk);
    j["dv"] = nest(kv, r.grads->dv);
  }
  return j;
}

json error_to_json(const Error& e) {
  return {{"error", {{"code", std::string(to_string(e.code))}, {"message", e.message}}}};
}

}  // namespace attn_oracle
