// sharding_rules.cpp: the sharding validity rules of docs/semantics.md#4-error-codes
// as a table, one row per rule in precedence order (independent_rules.hpp). It
// shares no code with model/src/sharding.cpp: shard counts, the GQA/MQA
// exception and the divisibility pairs are stated here again, the last as one
// row per (tensor, dim, the size it splits) so that the row for K's sequence
// reads kv_len in plain sight. The model's PartitionSpec printer is used only to
// say which spec a message must name.
#include <functional>
#include <set>

#include "attn_oracle/properties/independent_rules.hpp"

namespace attn_oracle::inline properties {
namespace {

// The product of the sizes of the named axes; nullopt if one is not in the mesh.
std::optional<int64_t> devices_splitting(const Mesh& mesh, const DimSharding& axes) {
  int64_t n = 1;
  for (const std::string& name : axes) {
    bool found = false;
    for (const MeshAxis& a : mesh.axes)
      if (a.name == name) n *= a.size, found = true;
    if (!found) return std::nullopt;
  }
  return n;
}

struct SpecEntry {
  const char* name;  // as the messages spell it: "q_spec"
  PartitionSpec Sharding::*spec;
  size_t rank;
};
constexpr SpecEntry kSpecs[] = {{"q_spec", &Sharding::q, 4}, {"k_spec", &Sharding::k, 4},
                                {"v_spec", &Sharding::v, 4}, {"segment_ids_spec", &Sharding::segment_ids, 2}};

// One row per tensor dim that must divide by its shard count, in the order the
// section checks them: q, k, v, and inside each batch, sequence, heads, head_dim.
struct DivisibleEntry {
  const char* tensor;
  PartitionSpec Sharding::*spec;
  size_t dim;
  const char* dim_name;
  int64_t ShardedShapes::*size;
};
constexpr DivisibleEntry kDivisible[] = {
    {"q", &Sharding::q, 0, "batch", &ShardedShapes::batch},      {"q", &Sharding::q, 1, "sequence", &ShardedShapes::q_len},
    {"q", &Sharding::q, 2, "heads", &ShardedShapes::heads_q},    {"q", &Sharding::q, 3, "head_dim", &ShardedShapes::head_dim},
    {"k", &Sharding::k, 0, "batch", &ShardedShapes::batch},      {"k", &Sharding::k, 1, "sequence", &ShardedShapes::kv_len},
    {"k", &Sharding::k, 2, "heads", &ShardedShapes::heads_kv},   {"k", &Sharding::k, 3, "head_dim", &ShardedShapes::head_dim},
    {"v", &Sharding::v, 0, "batch", &ShardedShapes::batch},      {"v", &Sharding::v, 1, "sequence", &ShardedShapes::kv_len},
    {"v", &Sharding::v, 2, "heads", &ShardedShapes::heads_kv},   {"v", &Sharding::v, 3, "head_dim", &ShardedShapes::head_dim},
};

constexpr size_t kHeads = 2;

// GQA/MQA: K and V alike, equal to Q in every dim but the heads, which Q shards and they do not.
bool kv_leave_q_heads_unsharded(const Sharding& s) {
  if (!(s.k == s.v) || !s.k.dims[kHeads].empty() || s.q.dims[kHeads].empty()) return false;
  for (size_t d = 0; d < 4; ++d) {
    const bool same = s.k.dims[d] == s.q.dims[d];
    const bool excepted = d == kHeads && s.k.dims[d].empty() && !s.q.dims[d].empty();
    if (!same && !excepted) return false;
  }
  return true;
}

struct Call {
  const Sharding& s;
  const ShardedShapes& z;
};

// A rule: its code, its statement, and what a message names when `broken` says so.
struct Rule {
  ErrorCode code;
  std::string statement;
  std::function<std::optional<std::string>(const Call&)> broken;
};

std::vector<Rule> rules() {
  std::vector<Rule> out;
  out.push_back({ErrorCode::bad_tensor_shape, "every size is at least 1", [](const Call& c) -> std::optional<std::string> {
                   const std::pair<const char*, int64_t> sizes[] = {{"batch", c.z.batch},     {"q_len", c.z.q_len},
                                                                    {"kv_len", c.z.kv_len},   {"heads_q", c.z.heads_q},
                                                                    {"heads_kv", c.z.heads_kv}, {"head_dim", c.z.head_dim}};
                   for (const auto& [name, size] : sizes)
                     if (size < 1) return std::string(name) + " is " + std::to_string(size);
                   return std::nullopt;
                 }});
  out.push_back({ErrorCode::bad_heads, "heads_q is a multiple of heads_kv", [](const Call& c) -> std::optional<std::string> {
                   if (c.z.heads_q % c.z.heads_kv == 0) return std::nullopt;
                   return "heads_q=" + std::to_string(c.z.heads_q);
                 }});
  out.push_back({ErrorCode::sharding_bad_mesh, "mesh axes have distinct non-empty names and sizes >= 1",
                 [](const Call& c) -> std::optional<std::string> {
                   for (size_t i = 0; i < c.s.mesh.axes.size(); ++i) {
                     const MeshAxis& a = c.s.mesh.axes[i];
                     bool repeated = false;
                     for (size_t j = 0; j < i; ++j) repeated = repeated || c.s.mesh.axes[j].name == a.name;
                     if (a.name.empty() || repeated || a.size < 1) return "mesh axis " + std::to_string(i);
                   }
                   return std::nullopt;
                 }});
  for (const SpecEntry& e : kSpecs) {
    const std::string who = e.name;
    out.push_back({ErrorCode::sharding_bad_spec, who + " has one entry per tensor dim", [e](const Call& c) -> std::optional<std::string> {
                     const PartitionSpec& spec = c.s.*e.spec;
                     if (spec.dims.size() == e.rank) return std::nullopt;
                     return std::string(e.name) + "=" + spec.to_string();
                   }});
    // Unknown and repeated axes: whichever an in-order scan meets first.
    for (const ErrorCode code : {ErrorCode::sharding_unknown_axis, ErrorCode::sharding_repeated_axis})
      out.push_back({code, who + " names mesh axes, each once", [e, code](const Call& c) -> std::optional<std::string> {
                       const PartitionSpec& spec = c.s.*e.spec;
                       std::multiset<std::string> seen;
                       for (size_t d = 0; d < spec.dims.size(); ++d)
                         for (const std::string& axis : spec.dims[d]) {
                           const bool unknown = !devices_splitting(c.s.mesh, {axis});
                           const bool again = seen.count(axis) > 0;
                           seen.insert(axis);
                           if (!unknown && !again) continue;
                           const ErrorCode first = unknown ? ErrorCode::sharding_unknown_axis : ErrorCode::sharding_repeated_axis;
                           if (first != code) return std::nullopt;  // the other row of the pair
                           return std::string(e.name) + "=" + spec.to_string() + ": dim " + std::to_string(d) + " uses axis '" + axis + "'";
                         }
                       return std::nullopt;
                     }});
    if (e.rank == 4)
      out.push_back({ErrorCode::sharding_bad_spec, who + " leaves head_dim whole", [e](const Call& c) -> std::optional<std::string> {
                       const PartitionSpec& spec = c.s.*e.spec;
                       if (spec.dims[3].empty()) return std::nullopt;
                       return std::string(e.name) + "=" + spec.to_string() + ": dim 3 (head_dim)";
                     }});
  }
  out.push_back({ErrorCode::sharding_spec_mismatch, "Q, K, V specs are identical, or K = V leave Q's sharded heads unsharded",
                 [](const Call& c) -> std::optional<std::string> {
                   if ((c.s.q == c.s.k && c.s.k == c.s.v) || kv_leave_q_heads_unsharded(c.s)) return std::nullopt;
                   return "q_spec=" + c.s.q.to_string() + ", k_spec=" + c.s.k.to_string() + ", v_spec=" + c.s.v.to_string();
                 }});
  out.push_back({ErrorCode::sharding_segment_ids_mismatch, "segment ids shard as Q's batch and sequence dims",
                 [](const Call& c) -> std::optional<std::string> {
                   if (c.s.segment_ids.dims[0] == c.s.q.dims[0] && c.s.segment_ids.dims[1] == c.s.q.dims[1]) return std::nullopt;
                   return "segment_ids_spec=" + c.s.segment_ids.to_string();
                 }});
  for (const DivisibleEntry& e : kDivisible)
    out.push_back({ErrorCode::sharding_not_divisible,
                   std::string(e.tensor) + " " + e.dim_name + " divides by its shard count",
                   [e](const Call& c) -> std::optional<std::string> {
                     const int64_t size = c.z.*e.size;
                     if (size % *devices_splitting(c.s.mesh, (c.s.*e.spec).dims[e.dim]) == 0) return std::nullopt;
                     return std::string(e.tensor) + " dim " + std::to_string(e.dim) + " (" + e.dim_name + ") has size " +
                            std::to_string(size) + ",";
                   }});
  out.push_back({ErrorCode::sharding_kv_heads_not_divisible, "under the GQA/MQA exception heads_kv divides by Q's head shards",
                 [](const Call& c) -> std::optional<std::string> {
                   if (!kv_leave_q_heads_unsharded(c.s)) return std::nullopt;
                   if (c.z.heads_kv % *devices_splitting(c.s.mesh, c.s.q.dims[kHeads]) == 0) return std::nullopt;
                   return "heads_kv=" + std::to_string(c.z.heads_kv);
                 }});
  return out;
}

}  // namespace

std::optional<RuleVerdict> sharding_rules_verdict(const Sharding& sharding, const ShardedShapes& shapes) {
  static const std::vector<Rule> table = rules();
  const Call call{sharding, shapes};
  for (const Rule& r : table)
    if (std::optional<std::string> names = r.broken(call)) return RuleVerdict{r.code, r.statement, "", *names};
  return std::nullopt;
}

std::vector<std::string> sharding_rule_edges(const Sharding& s, const ShardedShapes& z) {
  std::vector<std::string> edges;
  if (s.k.dims.size() != 4 || s.q.dims.size() != 4 || s.v.dims.size() != 4) return edges;
  const auto count = [&](const PartitionSpec& spec, size_t d) { return devices_splitting(s.mesh, spec.dims[d]).value_or(1); };
  const int64_t k_seq = count(s.k, 1);
  if (k_seq > 1 && z.q_len != z.kv_len) {
    edges.push_back("edge K/V split along the sequence, q_len != kv_len");
    if ((z.q_len % k_seq == 0) != (z.kv_len % k_seq == 0)) edges.push_back("edge exactly one of q_len, kv_len divides");
  }
  if (z.heads_q > z.heads_kv) edges.push_back(z.heads_kv == 1 ? "edge MQA" : "edge GQA");
  if (kv_leave_q_heads_unsharded(s)) {
    edges.push_back("edge GQA/MQA head exception");
    if (z.heads_kv % count(s.q, kHeads) != 0) edges.push_back("edge heads_kv not divisible by Q's head shards");
  }
  if (!(s.k == s.v)) edges.push_back("edge K and V specs differ");
  if (s.q == s.k && !(s.k == s.v)) edges.push_back("edge only V differs");
  return edges;
}

}  // namespace attn_oracle::properties
