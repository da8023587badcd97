// sharding_case.cpp: mesh, specs and shapes of op sharding case files, and the
// evaluation eval prints (format in sharding_case.hpp). Reading never throws:
// a malformed field gives Error{bad_case} naming its path ("specs.k[2][1]").
#include "attn_oracle/sharding_case.hpp"

#include <limits>

namespace attn_oracle {
namespace {

using nlohmann::json;

struct JsonError {
  std::string message;
};

[[noreturn]] void fail(const std::string& message) { throw JsonError{message}; }

int64_t integer(const json& v, const std::string& path) {
  if (v.is_number_integer() &&
      !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    return v.get<int64_t>();
  fail(path + ": expected an integer in int64 range, found " + v.dump());
}

std::string axis_name(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path + ": expected an axis name (a string), found " + v.dump());
  return v.get<std::string>();
}

Mesh parse_mesh(const json& j) {
  if (!j.is_array()) fail("mesh: expected [[\"name\", size], ...], found " + j.dump());
  Mesh mesh;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string path = "mesh[" + std::to_string(i) + "]";
    if (!j[i].is_array() || j[i].size() != 2) fail(path + ": expected [\"name\", size], found " + j[i].dump());
    mesh.axes.push_back(MeshAxis{axis_name(j[i][0], path + "[0]"), integer(j[i][1], path + "[1]")});
  }
  return mesh;
}

// A dim: null, "axis" or ["a", "b"] (a list of one is that axis).
DimSharding parse_dim(const json& j, const std::string& path) {
  if (j.is_null()) return {};
  if (j.is_string()) return {j.get<std::string>()};
  if (!j.is_array() || j.empty()) fail(path + ": expected null, an axis name or a non-empty list of them, found " + j.dump());
  DimSharding dim;
  for (size_t i = 0; i < j.size(); ++i) dim.push_back(axis_name(j[i], path + "[" + std::to_string(i) + "]"));
  return dim;
}

PartitionSpec parse_spec(const json& specs, const char* name) {
  const std::string path = std::string("specs.") + name;
  auto it = specs.find(name);
  if (it == specs.end()) fail(path + ": missing");
  if (!it->is_array()) fail(path + ": expected a list with one entry per tensor dim, found " + it->dump());
  PartitionSpec spec;
  for (size_t d = 0; d < it->size(); ++d) spec.dims.push_back(parse_dim((*it)[d], path + "[" + std::to_string(d) + "]"));
  return spec;
}

json spec_to_json(const PartitionSpec& spec) {
  json out = json::array();
  for (const DimSharding& dim : spec.dims) {
    if (dim.empty()) out.push_back(nullptr);
    else if (dim.size() == 1) out.push_back(dim[0]);
    else out.push_back(dim);
  }
  return out;
}

constexpr const char* kShapeKeys[] = {"batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim"};

}  // namespace

Expected<Sharding> sharding_from_json(const json& j) {
  try {
    Sharding s;
    if (!j.contains("mesh")) fail("mesh: missing");
    s.mesh = parse_mesh(j["mesh"]);
    if (!j.contains("specs")) fail("specs: missing");
    const json& specs = j["specs"];
    if (!specs.is_object()) fail("specs: expected an object with q, k, v and segment_ids");
    for (auto it = specs.begin(); it != specs.end(); ++it)
      if (it.key() != "q" && it.key() != "k" && it.key() != "v" && it.key() != "segment_ids")
        fail("specs." + it.key() + ": unknown field");
    s.q = parse_spec(specs, "q");
    s.k = parse_spec(specs, "k");
    s.v = parse_spec(specs, "v");
    s.segment_ids = parse_spec(specs, "segment_ids");
    return s;
  } catch (const JsonError& e) {
    return Error{ErrorCode::bad_case, e.message};
  }
}

json mesh_to_json(const Mesh& mesh) {
  json out = json::array();
  for (const MeshAxis& a : mesh.axes) out.push_back(json::array({a.name, a.size}));
  return out;
}

json specs_to_json(const Sharding& s) {
  return {{"q", spec_to_json(s.q)}, {"k", spec_to_json(s.k)}, {"v", spec_to_json(s.v)},
          {"segment_ids", spec_to_json(s.segment_ids)}};
}

Expected<ShardedShapes> shapes_from_json(const json& j) {
  try {
    if (!j.is_object()) fail("shapes: expected an object with batch, q_len, kv_len, heads_q, heads_kv, head_dim");
    for (auto it = j.begin(); it != j.end(); ++it)
      if (std::find(std::begin(kShapeKeys), std::end(kShapeKeys), it.key()) == std::end(kShapeKeys))
        fail("shapes." + it.key() + ": unknown field");
    int64_t v[6];
    for (int i = 0; i < 6; ++i) {
      const std::string path = std::string("shapes.") + kShapeKeys[i];
      if (!j.contains(kShapeKeys[i])) fail(path + ": missing");
      v[i] = integer(j[kShapeKeys[i]], path);
    }
    return ShardedShapes{v[0], v[1], v[2], v[3], v[4], v[5]};
  } catch (const JsonError& e) {
    return Error{ErrorCode::bad_case, e.message};
  }
}

json shapes_to_json(const ShardedShapes& z) {
  return {{"batch", z.batch},     {"q_len", z.q_len},       {"kv_len", z.kv_len},
          {"heads_q", z.heads_q}, {"heads_kv", z.heads_kv}, {"head_dim", z.head_dim}};
}

Expected<std::optional<AttentionResult>> evaluate_sharding_case(ShardingCapability& cap, const Case& c) {
  if (c.sharding_shapes) {
    if (auto e = cap.validate_sharding(c.sharding, *c.sharding_shapes)) return *e;
    return std::optional<AttentionResult>();
  }
  const Expected<AttentionInputs> inputs = attention_inputs(c);
  if (!inputs) return inputs.error();
  Expected<AttentionResult> r = cap.sharded_attention(c.sharding, attention_problem(c), inputs.value());
  if (!r) return r.error();
  return std::optional<AttentionResult>(std::move(r).value());
}

json sharding_evaluation_to_json(const Case& c, const Expected<std::optional<AttentionResult>>& e) {
  if (!e) return error_to_json(e.error());
  if (!e.value()) return {{"ok", true}};
  return attention_result_to_json(attention_problem(c), *e.value());
}

}  // namespace attn_oracle
