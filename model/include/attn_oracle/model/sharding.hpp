// sharding.hpp: the data model and validator of docs/semantics.md#9-sharding.
//
// A mesh is named axes with sizes; devices are numbered row-major over the axes
// in mesh order (the first axis is the slowest). A partition spec gives, per
// tensor dim, no axis, one axis, or a tuple of axes; a tuple splits the dim into
// the product of its axis sizes with the first axis major, as JAX does. Tensors:
//   q [B, Tq, Hq, D], k and v [B, Tkv, Hkv, D] (BSHD), segment ids [B, T].
// One segment-ids spec covers both sides' ids and positions (they shard as Q's
// batch and sequence dims, which K shares).
//
// Specs print as Python does: PartitionSpec('fsdp', None, ('a', 'b'), None). A
// tuple of one axis is the same sharding as that axis and prints as the axis.
//
// validate_sharding: the first violation wins, in this order (each a code):
//  0. shapes: a size < 1 (bad_tensor_shape), heads_q % heads_kv (bad_heads);
//  1. the mesh: an empty or repeated axis name, a size < 1 (sharding_bad_mesh);
//  2. each spec on its own, in the order q, k, v, segment ids: its length is not
//     the tensor's rank or the head_dim (dim 3) is sharded (sharding_bad_spec);
//     scanning dims then axes in order, an axis not in the mesh
//     (sharding_unknown_axis) or one already used in this spec
//     (sharding_repeated_axis), whichever comes first;
//  3. Q/K/V agreement: the three specs are identical, or K and V are identical
//     and equal to Q except that their head dim is unsharded where Q's is
//     sharded (GQA/MQA); else sharding_spec_mismatch with exactly the message
//     of docs/semantics.md#9-sharding;
//  4. the segment-ids spec equals Q's batch and sequence dims
//     (sharding_segment_ids_mismatch);
//  5. divisibility: every dim of q, k, v (in that order, dims in order) by its
//     shard count (sharding_not_divisible); then, under the GQA/MQA exception,
//     heads_kv by the shard count of Q's heads (sharding_kv_heads_not_divisible,
//     docs/semantics.md#9-sharding: the shard count of Q's heads divides heads_kv; each device then reads
//     a whole block of kv heads).
// Structure before agreement before sizes: a spec that names a missing axis has
// no shard count to compare, and the docs/semantics.md#9-sharding message must name the specs as
// given, before any shape is looked at.
//
// Tested by tests/sharding_test.cpp (printer, every code, precedence, the pinned
// message) and by the sharding properties.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline model {

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  bool operator==(const MeshAxis&) const = default;
};

struct Mesh {
  std::vector<MeshAxis> axes;  // order matters: device numbering is row-major over it
  int64_t device_count() const;
  std::optional<size_t> axis_index(std::string_view name) const;
  // A device's coordinate on every axis, in mesh order.
  std::vector<int64_t> coordinates(int64_t device) const;
  bool operator==(const Mesh&) const = default;
};

// The axes one tensor dim is split over: {} = None, {a} = 'a', {a, b} = ('a', 'b').
using DimSharding = std::vector<std::string>;

struct PartitionSpec {
  std::vector<DimSharding> dims;
  std::string to_string() const;  // PartitionSpec('fsdp', None, None, None)
  bool operator==(const PartitionSpec&) const = default;
};

// Shorthand for tests and generators: PartitionSpec of the given dims.
PartitionSpec partition_spec(std::vector<DimSharding> dims);

// The mesh and the four specs of one sharded attention call.
struct Sharding {
  Mesh mesh;
  PartitionSpec q, k, v, segment_ids;
  bool operator==(const Sharding&) const = default;
};

// The unsharded sizes the specs apply to.
struct ShardedShapes {
  int64_t batch = 1, q_len = 1, kv_len = 1;
  int64_t heads_q = 1, heads_kv = 1, head_dim = 1;
  bool operator==(const ShardedShapes&) const = default;
};

inline constexpr int64_t kQkvRank = 4;         // [B, T, H, D]
inline constexpr int64_t kSegmentIdsRank = 2;  // [B, T]
enum QkvDim : int64_t { kBatchDim = 0, kSequenceDim = 1, kHeadsDim = 2, kHeadDimDim = 3 };

// Product of the sizes of the dim's axes (1 for None); axes must be in the mesh.
int64_t shard_count(const Mesh& mesh, const DimSharding& dim);
// Which of shard_count pieces a device at `coords` holds: mixed radix, first axis major.
int64_t shard_index(const Mesh& mesh, const DimSharding& dim, const std::vector<int64_t>& coords);

// Exactly the message of docs/semantics.md#9-sharding for these specs.
std::string spec_mismatch_message(const PartitionSpec& q, const PartitionSpec& k, const PartitionSpec& v);

// True when K and V use the GQA/MQA head-dim exception of docs/semantics.md#9-sharding
// (identical to each other, equal to Q except an unsharded head dim where Q's
// is sharded). Structure only: the head-count proviso is validate_sharding's.
bool uses_gqa_head_exception(const Sharding& s);

// Every check above, first violation wins; nullopt when the call is valid.
std::optional<Error> validate_sharding(const Sharding& sharding, const ShardedShapes& shapes);

}  // namespace attn_oracle::model
