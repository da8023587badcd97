// sharding_op.cpp: the `sharding` op (sharding_case.hpp): mesh, specs, then
// shapes (validation only) or the attention fields (a sharded run); evaluation
// on a sharding capability; judgement (codes and messages exactly, a run by the
// tolerance rule against the unsharded float64 reference) and coverage.
// Reading never throws out of case_from_json: a malformed field gives
// Error{bad_case} naming its path ("specs.k[2][1]").
// Tested by tests/sharding_test.cpp (round trips, errors) and the fixtures.
#include "attn_oracle/cases/sharding_case.hpp"

#include <algorithm>

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/seam/sharded_execution.hpp"
#include "attention_fields.hpp"
#include "case_json.hpp"
#include "judging.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;
using case_json::fail;

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
    mesh.axes.push_back(MeshAxis{axis_name(j[i][0], path + "[0]"), case_json::int_field(j[i][1], path + "[1]")});
  }
  return mesh;
}

// A dim: null, "axis" or ["a", "b"] (a list of one is that axis).
DimSharding parse_dim(const json& j, const std::string& path) {
  if (j.is_null()) return {};
  if (j.is_string()) return {j.get<std::string>()};
  if (!j.is_array() || j.empty())
    fail(path + ": expected null, an axis name or a non-empty list of them, found " + j.dump());
  DimSharding dim;
  for (size_t i = 0; i < j.size(); ++i) dim.push_back(axis_name(j[i], path + "[" + std::to_string(i) + "]"));
  return dim;
}

PartitionSpec parse_spec(const json& specs, const char* name) {
  const std::string path = std::string("specs.") + name;
  const json& spec = case_json::required(specs, name, "specs.");
  if (!spec.is_array()) fail(path + ": expected a list with one entry per tensor dim, found " + spec.dump());
  PartitionSpec out;
  for (size_t d = 0; d < spec.size(); ++d) out.dims.push_back(parse_dim(spec[d], path + "[" + std::to_string(d) + "]"));
  return out;
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

Sharding parse_sharding(const json& j) {
  Sharding s;
  s.mesh = parse_mesh(case_json::required(j, "mesh"));
  const json& specs = case_json::required(j, "specs");
  if (!specs.is_object()) fail("specs: expected an object with q, k, v and segment_ids");
  case_json::reject_unknown_keys(specs, {"q", "k", "v", "segment_ids"}, "specs.");
  s.q = parse_spec(specs, "q");
  s.k = parse_spec(specs, "k");
  s.v = parse_spec(specs, "v");
  s.segment_ids = parse_spec(specs, "segment_ids");
  return s;
}

constexpr const char* kShapeKeys[] = {"batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim"};

ShardedShapes parse_shapes(const json& j) {
  if (!j.is_object()) fail("shapes: expected an object with batch, q_len, kv_len, heads_q, heads_kv, head_dim");
  case_json::reject_unknown_keys(j, std::set<std::string>(std::begin(kShapeKeys), std::end(kShapeKeys)), "shapes.");
  int64_t v[6];
  for (int i = 0; i < 6; ++i) v[i] = case_json::int_field(case_json::required(j, kShapeKeys[i], "shapes."), std::string("shapes.") + kShapeKeys[i]);
  return ShardedShapes{v[0], v[1], v[2], v[3], v[4], v[5]};
}

json shapes_to_json(const ShardedShapes& z) {
  return {{"batch", z.batch},     {"q_len", z.q_len},       {"kv_len", z.kv_len},
          {"heads_q", z.heads_q}, {"heads_kv", z.heads_kv}, {"head_dim", z.head_dim}};
}

// The call's shapes (a run's are its batch's), when they can be read.
std::optional<ShardedShapes> shapes_of(const ShardingCase& c) {
  if (const auto* shapes = std::get_if<ShardedShapes>(&c.call)) return *shapes;
  const auto shapes = sharded_shapes(std::get<AttentionCase>(c.call).problem);
  return shapes ? std::optional<ShardedShapes>(shapes.value()) : std::nullopt;
}

std::optional<std::string> declined(Backend& backend, const ShardingCase& c) {
  const auto shapes = shapes_of(c);
  if (!shapes) return std::nullopt;
  const auto* run = std::get_if<AttentionCase>(&c.call);
  if (auto reason = sharding_declines(backend, c.sharding, *shapes, run ? &run->problem : nullptr))
    return declined_by(backend, *reason);
  return std::nullopt;
}

// A shapes-only case: nullopt when accepted. A run: the gathered result.
Expected<std::optional<AttentionResult>> evaluate_call(ShardingCapability& cap, const ShardingCase& c) {
  if (const auto* shapes = std::get_if<ShardedShapes>(&c.call)) {
    if (auto e = cap.validate_sharding(c.sharding, *shapes)) return *e;
    return std::optional<AttentionResult>();
  }
  const AttentionCase& a = std::get<AttentionCase>(c.call);
  const Expected<AttentionInputs> inputs = attention_inputs(a);
  if (!inputs) return inputs.error();
  Expected<AttentionResult> r = cap.sharded_attention(c.sharding, a.problem, inputs.value());
  if (!r) return r.error();
  return std::optional<AttentionResult>(std::move(r).value());
}

// Kernels realise the token-level mask only on representable per-device problems.
std::optional<std::string> unrepresentable_device(const AttentionProblem& problem, const Sharding& sharding) {
  const auto pieces = device_problems(sharding, problem);
  if (!pieces) return std::nullopt;
  for (const AttentionProblem& piece : pieces.value())
    if (const auto r = ref::representability(piece.batch); !r.representable)
      return "a device's problem is not representable (docs/semantics.md#the-kernels-index-rule-and-representability): " + r.first_difference;
  return std::nullopt;
}

class ShardingOp final : public TypedCaseOp<ShardingCase> {
 public:
  std::string_view name() const override { return "sharding"; }
  Capability capability() const override { return Capability::sharding; }
  double expected_tolerance() const override { return 1e-12; }
  bool pins_error_messages() const override { return true; }  // docs/semantics.md#9-sharding pins them

  CasePayload read(const json& j) const override {
    ShardingCase c;
    c.sharding = parse_sharding(j);
    std::set<std::string> known = {"mesh", "specs"};
    if (!j.contains("mask")) {
      known.insert("shapes");
      case_json::reject_unknown_keys(j, known);
      c.call = parse_shapes(case_json::required(j, "shapes"));
      return c;
    }
    if (j.contains("shapes"))
      fail("shapes: not allowed beside a packed batch, whose shapes and heads are the call's");
    known.insert(case_json::attention_keys().begin(), case_json::attention_keys().end());
    case_json::reject_unknown_keys(j, known);
    c.call = case_json::parse_attention_case(j);
    return c;
  }

 protected:
  json write_fields(const ShardingCase& c) const override {
    json j = {{"mesh", mesh_to_json(c.sharding.mesh)}, {"specs", specs_to_json(c.sharding)}};
    if (const auto* shapes = std::get_if<ShardedShapes>(&c.call)) j["shapes"] = shapes_to_json(*shapes);
    else j.update(case_json::attention_case_to_json(std::get<AttentionCase>(c.call)));
    return j;
  }

  Evaluation evaluate_on(Backend& backend, const ShardingCase& c) const override {
    ShardingCapability* cap = backend.sharding();
    if (!cap) return Evaluation::missing(backend, capability());
    if (auto why = declined(backend, c)) return Evaluation::declined_because(*why);
    const auto r = evaluate_call(*cap, c);
    if (!r) return Evaluation::of(r.error());
    if (!r.value()) return Evaluation::of(json{{"ok", true}});
    return Evaluation::of(attention_result_to_json(std::get<AttentionCase>(c.call).problem, *r.value()));
  }

  Judgement judge_on(Backend& backend, const ShardingCase& c) const override {
    Judgement j;
    ShardingCapability* cap = backend.sharding();
    if (!cap) return j.skip(missing_capability(backend, capability())), j;
    if (auto why = declined(backend, c)) return j.skip(*why), j;
    const auto* run = std::get_if<AttentionCase>(&c.call);
    if (run && !cap->token_level_mask())
      if (auto why = unrepresentable_device(run->problem, c.sharding)) return j.skip(*why), j;
    const auto got = evaluate_call(*cap, c);
    std::unique_ptr<Backend> reference = make_reference_backend();
    const auto want = evaluate_call(*reference->sharding(), c);
    if (!got && !want && got.error().code == want.error().code && got.error().message != want.error().message)
      return j.fail("error message (docs/semantics.md#9-sharding pins it): backend \"" + got.error().message + "\", reference \"" +
                    want.error().message + "\""), j;
    if (judge_errors(got, want, j)) return j;
    if (!run) return j.note("both accept the sharding"), j;
    const AttentionInputs inputs = attention_inputs(*run).value();
    const Expected<AttentionResult> unsharded = ref::attention_dense_masked(run->problem, inputs);
    if (!unsharded) return j.fail("the reference rejects the unsharded problem: " + describe(unsharded.error())), j;
    judge_tolerance(check_attention_tolerance(run->problem, inputs, *got.value(), unsharded.value()), j);
    return j;
  }

  CoverageCell coverage_of(const ShardingCase& c) const override {
    const auto* run = std::get_if<AttentionCase>(&c.call);
    CoverageCell cell = run ? batch_coverage(run->problem.batch) : CoverageCell{"-", {}, {}};
    if (run) add_shape_coverage(run->problem.shape, cell);
    const Sharding& s = c.sharding;
    if (s.mesh.device_count() > 1) cell.layouts.insert("devices>1");
    if (s.q.dims.size() > kSequenceDim && shard_count(s.mesh, s.q.dims[kSequenceDim]) > 1)
      cell.layouts.insert("context parallel");
    return cell;
  }

  CaseSize size_of(const ShardingCase& c) const override {
    CaseSize size;
    if (const auto* run = std::get_if<AttentionCase>(&c.call)) size = batch_size(run->problem.batch);
    else if (const auto* z = std::get_if<ShardedShapes>(&c.call)) size = CaseSize{z->batch, std::max(z->q_len, z->kv_len), 1};
    size.devices = c.sharding.mesh.device_count();
    return size;
  }
};

}  // namespace

const CaseOp& sharding_op() {
  static const ShardingOp op;
  return op;
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

Expected<Sharding> sharding_from_json(const json& j) {
  try {
    return parse_sharding(j);
  } catch (const case_json::CaseFieldError& e) {
    return e.error;
  }
}

}  // namespace attn_oracle::cases
