// sharding_bugs.cpp: the planted sharding bugs, each SimulatedSharding over the
// float64 reference with one override:
//  - validator_compares_only_q_with_k: V's spec is never compared, so Q == K
//    with V replicated (the shape error real stacks then hit deep inside) passes;
//  - gqa_exception_without_kv_head_divisibility: unsharded K/V heads are
//    accepted beside sharded Q heads whatever heads_kv is;
//  - gather_drops_last_shard_keys: the context-parallel all-gather of K/V
//    stops one shard short, so every query misses the last shard's keys.
#include "planted/planted_backends.hpp"

#include "attn_oracle/seam/sharded_execution.hpp"
#include "attn_oracle/reference/attention.hpp"

namespace attn_oracle::planted {
namespace {

class ValidatorComparesOnlyQWithK final : public SimulatedSharding {
 public:
  using SimulatedSharding::SimulatedSharding;
  std::optional<Error> validate_sharding(const Sharding& s, const ShardedShapes& z) override {
    std::optional<Error> e = attn_oracle::validate_sharding(s, z);
    if (e && e->code == ErrorCode::sharding_spec_mismatch && s.q == s.k) return std::nullopt;
    return e;
  }
};

class GqaExceptionWithoutDivisibility final : public SimulatedSharding {
 public:
  using SimulatedSharding::SimulatedSharding;
  std::optional<Error> validate_sharding(const Sharding& s, const ShardedShapes& z) override {
    std::optional<Error> e = attn_oracle::validate_sharding(s, z);
    if (e && e->code == ErrorCode::sharding_kv_heads_not_divisible) return std::nullopt;
    return e;
  }
};

class GatherDropsLastShard final : public SimulatedSharding {
 public:
  using SimulatedSharding::SimulatedSharding;
  KvShard all_gather_sequence(const std::vector<KvShard>& shards) override {
    if (shards.size() < 2) return concat_sequence(shards);
    return concat_sequence(std::vector<KvShard>(shards.begin(), shards.end() - 1));
  }
};

// Devices run the dense reference; the sharding is `Simulation` over it.
template <class Simulation>
class ShardingBugBackend final : public Backend, AttentionCapability {
 public:
  explicit ShardingBugBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return ref::attention_dense_masked(p, in);
  }
  bool token_level_mask() const override { return true; }
  ShardingCapability* sharding() override { return &sharding_; }

 private:
  std::string name_;
  Simulation sharding_{static_cast<AttentionCapability&>(*this)};
};

template <class Simulation>
PlantedBug bug(const std::string& name, const std::string& what, const std::string& property) {
  return {name, property, what, [name] { return std::unique_ptr<Backend>(new ShardingBugBackend<Simulation>(name)); }};
}

}  // namespace

std::vector<PlantedBug> sharding_bugs() {
  const std::string rejects = "sharding/invalidTriplesAreRejectedWithTheExactMessage";
  return {
      bug<ValidatorComparesOnlyQWithK>("validator_compares_only_q_with_k", "the spec check compares Q with K only, so a V sharded unlike them passes", rejects),
      bug<GqaExceptionWithoutDivisibility>("gqa_exception_without_kv_head_divisibility", "unsharded K/V heads accepted beside Q heads sharded over more devices than heads_kv can split", rejects),
      bug<GatherDropsLastShard>("gather_drops_last_shard_keys", "the context-parallel all-gather of K/V stops one shard short", "sharding/validTriplesMatchTheUnshardedRun"),
  };
}

}  // namespace attn_oracle::planted
