// sharding_generators.hpp: RapidCheck generators of sharded attention calls
// (docs/semantics.md#9-sharding), drawn as a small layout that shrinks towards fewer devices,
// fewer rows and shorter sequences:
//  - a mesh of 1..3 of the axes 'fsdp', 'context', 'tensor' (in that order) and
//    1..8 devices; each axis draws its own size and a role: unused, batch,
//    sequence or heads (axes sharing a dim form a tuple, in mesh order or
//    reversed), so every valid spec is well formed. An axis shrinks alone
//    (dropped, size towards 1, role towards unused), so a shard count another
//    axis gives survives its shrinking;
//  - sizes as multiples of the shard counts: rows and tokens per shard 1..3,
//    kv heads per shard 1..2, GQA groups 1..2; K/V take the GQA/MQA head-dim
//    exception (unsharded heads) sometimes when Q's heads are sharded;
//  - a [B, T] packed batch (up to 3 documents a row, offset positions,
//    trailing padding in padding kinds), every mask kind, windows sometimes; a
//    sharded sequence draws top-left instead of bottom-right kinds
//    (sharded_execution.hpp says why).
// Invalid calls mutate one valid layout once and carry the code it must give.
//
// Checked by tests/sharding_test.cpp: valid draws pass the reference validator,
// invalid ones give exactly their code.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/model/sharding.hpp"

namespace attn_oracle::inline properties {

struct ShardingDraw {
  Sharding sharding;
  AttentionProblem problem;  // [B, T] ids and positions
  uint64_t seed = 0;         // generate_inputs(problem, seed)
};

struct InvalidShardingDraw {
  ShardingDraw draw;
  ErrorCode expected;
};

rc::Gen<ShardingDraw> sharding_draw();
rc::Gen<InvalidShardingDraw> invalid_sharding_draw();

// The op sharding case of a draw (data by seed).
Case sharding_case(const ShardingDraw& draw);

void showValue(const ShardingDraw& draw, std::ostream& os);
void showValue(const InvalidShardingDraw& draw, std::ostream& os);

}  // namespace attn_oracle::properties
