// sharding.cpp: mesh bookkeeping, the PartitionSpec printer and the validator of
// docs/semantics.md#9-sharding (precedence in sharding.hpp). Messages name the spec, the
// dim, the axis and the sizes involved.
#include "attn_oracle/model/sharding.hpp"

#include <set>

namespace attn_oracle::inline model {
namespace {

constexpr const char* kDimNames[] = {"batch", "sequence", "heads", "head_dim"};

std::string quoted(const std::string& name) { return "'" + name + "'"; }

std::string dim_to_string(const DimSharding& dim) {
  if (dim.empty()) return "None";
  if (dim.size() == 1) return quoted(dim[0]);
  std::string out = "(";
  for (size_t i = 0; i < dim.size(); ++i) out += (i ? ", " : "") + quoted(dim[i]);
  return out + ")";
}

Error error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

std::optional<Error> check_shapes(const ShardedShapes& s) {
  const std::pair<const char*, int64_t> sizes[] = {{"batch", s.batch},       {"q_len", s.q_len},
                                                   {"kv_len", s.kv_len},     {"heads_q", s.heads_q},
                                                   {"heads_kv", s.heads_kv}, {"head_dim", s.head_dim}};
  for (const auto& [name, size] : sizes)
    if (size < 1) return error(ErrorCode::bad_tensor_shape, std::string(name) + " is " + std::to_string(size) + ", must be >= 1");
  if (s.heads_q % s.heads_kv != 0)
    return error(ErrorCode::bad_heads, "heads_q=" + std::to_string(s.heads_q) + " is not a multiple of heads_kv=" +
                                           std::to_string(s.heads_kv));
  return std::nullopt;
}

std::optional<Error> check_mesh(const Mesh& mesh) {
  std::set<std::string> seen;
  for (size_t i = 0; i < mesh.axes.size(); ++i) {
    const MeshAxis& a = mesh.axes[i];
    const std::string at = "mesh axis " + std::to_string(i);
    if (a.name.empty()) return error(ErrorCode::sharding_bad_mesh, at + " has an empty name");
    if (!seen.insert(a.name).second) return error(ErrorCode::sharding_bad_mesh, at + " repeats the name " + quoted(a.name));
    if (a.size < 1)
      return error(ErrorCode::sharding_bad_mesh, at + " " + quoted(a.name) + " has size " + std::to_string(a.size) + ", must be >= 1");
  }
  return std::nullopt;
}

// Rank, then axes in order (unknown or repeated), then a sharded head_dim.
std::optional<Error> check_spec(const Mesh& mesh, const PartitionSpec& spec, const char* name, int64_t rank) {
  const std::string who = std::string(name) + "=" + spec.to_string();
  if (static_cast<int64_t>(spec.dims.size()) != rank)
    return error(ErrorCode::sharding_bad_spec, who + " has " + std::to_string(spec.dims.size()) + " entries for a rank-" +
                                                   std::to_string(rank) + " tensor");
  std::set<std::string> used;
  for (size_t d = 0; d < spec.dims.size(); ++d)
    for (const std::string& axis : spec.dims[d]) {
      const std::string where = who + ": dim " + std::to_string(d) + " uses axis " + quoted(axis);
      if (!mesh.axis_index(axis)) return error(ErrorCode::sharding_unknown_axis, where + ", which is not in the mesh");
      if (!used.insert(axis).second)
        return error(ErrorCode::sharding_repeated_axis, where + ", which this spec already uses (an axis splits one dim once)");
    }
  if (rank == kQkvRank && !spec.dims[kHeadDimDim].empty())
    return error(ErrorCode::sharding_bad_spec, who + ": dim 3 (head_dim) is sharded over " + dim_to_string(spec.dims[kHeadDimDim]) +
                                                   "; attention needs whole head vectors");
  return std::nullopt;
}

std::optional<Error> check_divisible(const Mesh& mesh, const PartitionSpec& spec, const char* name,
                                     const std::vector<int64_t>& sizes) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t n = shard_count(mesh, spec.dims[d]);
    if (sizes[d] % n != 0)
      return error(ErrorCode::sharding_not_divisible,
                   std::string(name) + " dim " + std::to_string(d) + " (" + kDimNames[d] + ") has size " + std::to_string(sizes[d]) +
                       ", not divisible by its " + std::to_string(n) + " shards over " + dim_to_string(spec.dims[d]) + " in " +
                       name + "_spec=" + spec.to_string());
  }
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------
// Mesh and specs
// ---------------------------------------------------------------------------

int64_t Mesh::device_count() const {
  int64_t n = 1;
  for (const MeshAxis& a : axes) n *= a.size;
  return n;
}

std::optional<size_t> Mesh::axis_index(std::string_view name) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == name) return i;
  return std::nullopt;
}

std::vector<int64_t> Mesh::coordinates(int64_t device) const {
  std::vector<int64_t> coords(axes.size());
  for (size_t i = axes.size(); i-- > 0;) {
    coords[i] = device % axes[i].size;
    device /= axes[i].size;
  }
  return coords;
}

std::string PartitionSpec::to_string() const {
  std::string out = "PartitionSpec(";
  for (size_t d = 0; d < dims.size(); ++d) out += (d ? ", " : "") + dim_to_string(dims[d]);
  return out + ")";
}

PartitionSpec partition_spec(std::vector<DimSharding> dims) { return PartitionSpec{std::move(dims)}; }

int64_t shard_count(const Mesh& mesh, const DimSharding& dim) {
  int64_t n = 1;
  for (const std::string& axis : dim) n *= mesh.axes[mesh.axis_index(axis).value()].size;
  return n;
}

int64_t shard_index(const Mesh& mesh, const DimSharding& dim, const std::vector<int64_t>& coords) {
  int64_t index = 0;
  for (const std::string& axis : dim) {
    const size_t a = mesh.axis_index(axis).value();
    index = index * mesh.axes[a].size + coords[a];
  }
  return index;
}

std::string spec_mismatch_message(const PartitionSpec& q, const PartitionSpec& k, const PartitionSpec& v) {
  return "Q, K, and V sharding specs must be identical but received q_spec=" + q.to_string() +
         ", k_spec=" + k.to_string() + ", v_spec=" + v.to_string();
}

bool uses_gqa_head_exception(const Sharding& s) {
  if (!(s.k == s.v) || s.q.dims.size() != s.k.dims.size() || s.q.dims.size() != kQkvRank) return false;
  for (int64_t d = 0; d < kQkvRank; ++d)
    if (d != kHeadsDim && s.q.dims[d] != s.k.dims[d]) return false;
  return !s.q.dims[kHeadsDim].empty() && s.k.dims[kHeadsDim].empty();
}

// ---------------------------------------------------------------------------
// The validator
// ---------------------------------------------------------------------------

std::optional<Error> validate_sharding(const Sharding& s, const ShardedShapes& shapes) {
  if (auto e = check_shapes(shapes)) return e;
  if (auto e = check_mesh(s.mesh)) return e;
  if (auto e = check_spec(s.mesh, s.q, "q_spec", kQkvRank)) return e;
  if (auto e = check_spec(s.mesh, s.k, "k_spec", kQkvRank)) return e;
  if (auto e = check_spec(s.mesh, s.v, "v_spec", kQkvRank)) return e;
  if (auto e = check_spec(s.mesh, s.segment_ids, "segment_ids_spec", kSegmentIdsRank)) return e;

  const bool identical = s.q == s.k && s.k == s.v;
  const bool gqa = uses_gqa_head_exception(s);
  if (!identical && !gqa) return error(ErrorCode::sharding_spec_mismatch, spec_mismatch_message(s.q, s.k, s.v));

  const PartitionSpec want_ids = partition_spec({s.q.dims[kBatchDim], s.q.dims[kSequenceDim]});
  if (!(s.segment_ids == want_ids))
    return error(ErrorCode::sharding_segment_ids_mismatch,
                 "segment ids and positions must shard [B, T] as q_spec=" + s.q.to_string() +
                     " shards its batch and sequence dims, i.e. " + want_ids.to_string() + ", but received segment_ids_spec=" +
                     s.segment_ids.to_string());

  const ShardedShapes& z = shapes;
  if (auto e = check_divisible(s.mesh, s.q, "q", {z.batch, z.q_len, z.heads_q, z.head_dim})) return e;
  if (auto e = check_divisible(s.mesh, s.k, "k", {z.batch, z.kv_len, z.heads_kv, z.head_dim})) return e;
  if (auto e = check_divisible(s.mesh, s.v, "v", {z.batch, z.kv_len, z.heads_kv, z.head_dim})) return e;
  const int64_t head_shards = shard_count(s.mesh, s.q.dims[kHeadsDim]);
  if (gqa && z.heads_kv % head_shards != 0)
    return error(ErrorCode::sharding_kv_heads_not_divisible,
                 "q_spec=" + s.q.to_string() + " shards the heads over " + dim_to_string(s.q.dims[kHeadsDim]) + " (" +
                     std::to_string(head_shards) + " shards) while k_spec=" + s.k.to_string() + " and v_spec=" +
                     s.v.to_string() + " leave them unsharded (GQA/MQA); heads_kv=" + std::to_string(z.heads_kv) +
                     " is not divisible by " + std::to_string(head_shards) + ", so a device's query heads would not read a whole block of kv heads");
  return std::nullopt;
}

}  // namespace attn_oracle::model
