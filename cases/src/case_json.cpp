// case_json.cpp: the shared readers and writers of case-file fields (case_json.hpp).
// Tested by tests/case_file_test.cpp (every error path names its field).
#include "case_json.hpp"

#include <cmath>
#include <limits>

namespace attn_oracle::inline cases::case_json {

void fail(ErrorCode code, const std::string& message) { throw CaseFieldError{Error{code, message}}; }

const std::set<std::string>& envelope_keys() {
  static const std::set<std::string> keys = {"schema", "op", "note", "expected", "property"};
  return keys;
}

void reject_unknown_keys(const json& object, const std::set<std::string>& known, const std::string& path) {
  for (auto it = object.begin(); it != object.end(); ++it)
    if (!known.count(it.key()) && !(path.empty() && envelope_keys().count(it.key())))
      fail(path + it.key() + ": unknown field");
}

const json& required(const json& object, const char* key, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) fail(path + key + ": missing");
  return *it;
}

int64_t int_field(const json& v, const std::string& path, ErrorCode code) {
  const bool too_big = v.is_number_unsigned() &&
                       v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (v.is_number_integer() && !too_big) return v.get<int64_t>();
  fail(code, path + ": expected an integer in int64 range, found " + v.dump());
}

uint64_t seed_field(const json& v, const std::string& path) {
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) return v.get<uint64_t>();
  fail(path + ": expected an unsigned 64-bit integer, found " + v.dump());
}

// JSON has no NaN or Inf, but a literal like 1e999 parses to inf.
double number_field(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path + ": expected a number, found " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(path + ": expected a finite number, found " + v.dump());
  return x;
}

bool bool_field(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path + ": expected true or false, found " + v.dump());
  return v.get<bool>();
}

// ---------------------------------------------------------------------------
// Nested arrays
// ---------------------------------------------------------------------------
namespace {

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
void flatten(const json& j, const Shape& shape, size_t depth, const std::string& path, std::vector<T>& out,
             Leaf leaf) {
  if (depth == shape.size()) {
    if (j.is_array()) fail(path + ": ragged array: found an array where a number belongs");
    out.push_back(leaf(j, path));
    return;
  }
  if (!j.is_array())
    fail(path + ": ragged array: expected an array of length " + std::to_string(shape[depth]) + ", found " +
         j.dump());
  if (static_cast<int64_t>(j.size()) != shape[depth])
    fail(path + ": ragged array: length " + std::to_string(j.size()) + ", expected " + std::to_string(shape[depth]));
  for (size_t i = 0; i < j.size(); ++i)
    flatten(j[i], shape, depth + 1, path + "[" + std::to_string(i) + "]", out, leaf);
}

template <class T, class Convert>
json nest_as(const Shape& shape, const std::vector<T>& data, Convert convert, size_t depth = 0, int64_t offset = 0) {
  if (shape_product(shape) != static_cast<int64_t>(data.size())) {
    json flat = json::array();
    for (const T& x : data) flat.push_back(convert(x));
    return flat;
  }
  if (depth == shape.size()) return convert(data[offset]);
  json out = json::array();
  const int64_t stride = shape_product(Shape(shape.begin() + depth + 1, shape.end()));
  for (int64_t i = 0; i < shape[depth]; ++i) out.push_back(nest_as(shape, data, convert, depth + 1, offset + i * stride));
  return out;
}

}  // namespace

IntArray parse_int_array(const json& j, const std::string& path) {
  IntArray a;
  a.shape = nested_shape(j, path);
  flatten(j, a.shape, 0, path, a.data, [](const json& v, const std::string& p) { return int_field(v, p); });
  return a;
}

std::vector<double> parse_double_array(const json& j, const std::string& path, Shape& shape) {
  std::vector<double> data;
  shape = nested_shape(j, path);
  flatten(j, shape, 0, path, data, number_field);
  return data;
}

json nest(const Shape& shape, const std::vector<int64_t>& data) {
  return nest_as(shape, data, [](int64_t x) { return json(x); });
}
json float_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  return x;
}
json nest(const Shape& shape, const std::vector<double>& data) { return nest_as(shape, data, float_json); }

// ---------------------------------------------------------------------------
// The packed batch and the attention shape
// ---------------------------------------------------------------------------
namespace {

PackedSide parse_side(const json& j, const std::string& name) {
  if (!j.is_object()) fail(name + ": expected an object with segment_ids and segment_pos");
  reject_unknown_keys(j, {"segment_ids", "segment_pos"}, name + ".");
  PackedSide side;
  side.segment_ids = parse_int_array(required(j, "segment_ids", name + "."), name + ".segment_ids");
  side.segment_pos = parse_int_array(required(j, "segment_pos", name + "."), name + ".segment_pos");
  return side;
}

Window parse_window(const json& j) {
  if (!j.is_array() || j.size() != 2) fail(ErrorCode::bad_window, "window: expected [left, right], found " + j.dump());
  return Window{int_field(j[0], "window[0]", ErrorCode::bad_window), int_field(j[1], "window[1]", ErrorCode::bad_window)};
}

MaskKind parse_mask(const json& j) {
  if (j.is_string())
    if (auto kind = mask_kind_from_string(j.get<std::string>())) return *kind;
  fail(ErrorCode::bad_mask, "mask: unknown mask kind " + j.dump() +
                                " (expected no_mask, padding, causal, padding_causal, "
                                "causal_bottom_right or padding_causal_bottom_right)");
}

json side_to_json(const PackedSide& s) {
  return {{"segment_ids", nest(s.segment_ids.shape, s.segment_ids.data)},
          {"segment_pos", nest(s.segment_pos.shape, s.segment_pos.data)}};
}

}  // namespace

const std::set<std::string>& batch_keys() {
  static const std::set<std::string> keys = {"mask", "window", "max_segments", "q", "kv"};
  return keys;
}

PackedBatch parse_batch(const json& j) {
  PackedBatch b;
  b.mask = parse_mask(required(j, "mask"));
  if (auto it = j.find("window"); it != j.end()) b.window = parse_window(*it);
  b.max_segments = int_field(required(j, "max_segments"), "max_segments");
  b.q = parse_side(required(j, "q"), "q");
  b.kv = parse_side(required(j, "kv"), "kv");
  return b;
}

json batch_to_json(const PackedBatch& b) {
  return {{"mask", std::string(to_string(b.mask))},
          {"window", {b.window.left, b.window.right}},
          {"max_segments", b.max_segments},
          {"q", side_to_json(b.q)},
          {"kv", side_to_json(b.kv)}};
}

const std::set<std::string>& shape_keys() {
  static const std::set<std::string> keys = {"heads_q", "heads_kv", "head_dim", "dtype", "scale", "backward"};
  return keys;
}

AttentionShape parse_shape(const json& j) {
  AttentionShape s;
  s.heads_q = int_field(required(j, "heads_q"), "heads_q");
  s.heads_kv = int_field(required(j, "heads_kv"), "heads_kv");
  s.head_dim = int_field(required(j, "head_dim"), "head_dim");
  const json& dtype = required(j, "dtype");
  auto parsed = dtype.is_string() ? dtype_from_string(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) fail("dtype: expected \"fp32\", \"fp16\" or \"bf16\", found " + dtype.dump());
  s.dtype = *parsed;
  if (auto it = j.find("scale"); it != j.end() && !it->is_null()) s.scale = number_field(*it, "scale");
  if (auto it = j.find("backward"); it != j.end()) s.backward = bool_field(*it, "backward");
  return s;
}

json shape_to_json(const AttentionShape& s) {
  json j = {{"heads_q", s.heads_q},   {"heads_kv", s.heads_kv},
            {"head_dim", s.head_dim}, {"dtype", std::string(to_string(s.dtype))},
            {"backward", s.backward}};
  if (s.scale) j["scale"] = *s.scale;
  return j;
}

}  // namespace attn_oracle::cases::case_json
