// sharded_execution.hpp: sharded attention (docs/semantics.md#9-sharding) simulated on the
// host, shared by every backend that implements ShardingCapability on top of its
// own attention.
//
// Every device of the mesh gets the rows, query tokens and heads its coordinates
// select (sharding.hpp: row-major device numbering, tuples first-axis major).
// Context parallelism: K/V, with the kv ids and positions, are sharded over the
// sequence like Q and all-gathered along it before the device runs, so each
// device attends its query chunk against the whole key sequence; dK/dV come back
// summed over the sequence shards (the reduce-scatter, done on the gathered
// tensors). Under the GQA/MQA exception a device keeps the block of kv heads its
// query heads read. Devices that differ only on axes Q does not use are replicas:
// they run, and the one at coordinate 0 is gathered.
//
// One place runs a device's piece: DeviceRunner. HostDeviceRunner calls an
// AttentionCapability (the reference, or a backend's kernels / CPU twins); a
// real multi-device runner would implement the same call. The sequence
// all-gather is a virtual step so that a broken collective can be planted.
//
// What a sequence shard preserves, and so what this simulation accepts:
//  - position-based kinds (no_mask, padding, causal, padding_causal, windows):
//    a query chunk keeps its positions and sees every key, so every mask entry
//    is the unsharded one;
//  - bottom-right kinds count each document's tokens in the row (docs/semantics.md#2-the-attention-mask); a
//    query chunk holds fewer of them, which moves the diagonal, so a sharded
//    sequence with a bottom-right kind is `unsupported` (batch and head shards
//    are fine);
//  - kernels apply the index rule on trimmed runs (docs/semantics.md#the-kernels-index-rule-and-representability) and a query chunk
//    that starts inside a document has offset positions: its per-device problem
//    is often not representable. device_problems() exposes every per-device
//    problem so that a caller can check ref::representability on each.
//
// Tested by tests/sharding_test.cpp (planning, gather, no device runs on an
// invalid call) and by the sharding properties.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/model/sharding.hpp"

namespace attn_oracle::inline seam {

// Runs one device's piece of a sharded call.
class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  virtual Expected<AttentionResult> run_piece(int64_t device, const AttentionProblem& piece,
                                              const AttentionInputs& inputs) = 0;
};

// The host simulation of a device: the backend's attention on the piece.
class HostDeviceRunner final : public DeviceRunner {
 public:
  explicit HostDeviceRunner(AttentionCapability& attention) : attention_(attention) {}
  Expected<AttentionResult> run_piece(int64_t, const AttentionProblem& piece, const AttentionInputs& inputs) override {
    return attention_.attention(piece, inputs);
  }

 private:
  AttentionCapability& attention_;
};

// Where one device's piece lies in the unsharded tensors.
struct DevicePiece {
  int64_t device = 0;
  int64_t row0 = 0, rows = 0;         // batch rows
  int64_t q0 = 0, q_tokens = 0;       // query chunk
  int64_t kv0 = 0, kv_tokens = 0;     // this device's own K/V sequence shard (before the gather)
  int64_t hq0 = 0, hq = 0;            // query heads
  int64_t hkv0 = 0, hkv = 0;          // kv heads those query heads read
  int64_t seq_index = 0, seq_count = 1;
  bool primary = true;                // coordinate 0 on every axis Q's spec leaves unused
};

// The pieces of a valid call, in device order.
std::vector<DevicePiece> plan_pieces(const Sharding& sharding, const ShardedShapes& shapes);

// K/V of `rows` rows over `tokens` tokens with their ids and positions.
struct KvShard {
  int64_t rows = 0, tokens = 0, heads = 0, head_dim = 0;
  std::vector<int64_t> ids, pos;  // [rows, tokens]
  std::vector<double> k, v;       // [rows, tokens, heads, head_dim]
};

// The shards of one sequence group concatenated along the tokens, in order.
KvShard concat_sequence(const std::vector<KvShard>& shards);

class SimulatedSharding : public ShardingCapability {
 public:
  // Every device runs `attention`; token_level_mask() is that capability's.
  explicit SimulatedSharding(AttentionCapability& attention);
  // A runner of the caller's (a real device, a recording one in tests);
  // `token_level_mask`: whether its devices realise the token-level mask on any input.
  SimulatedSharding(DeviceRunner& runner, bool token_level_mask);

  std::optional<Error> validate_sharding(const Sharding& sharding, const ShardedShapes& shapes) override;
  Expected<AttentionResult> sharded_attention(const Sharding& sharding, const AttentionProblem& problem,
                                              const AttentionInputs& inputs) override;
  bool token_level_mask() const override { return attention_ ? attention_->token_level_mask() : token_level_mask_; }

  // The context-parallel all-gather: one sequence group's shards, in sequence
  // order, to the whole sequence (gathered token t is unsharded kv token t).
  virtual KvShard all_gather_sequence(const std::vector<KvShard>& shards) { return concat_sequence(shards); }

 private:
  std::unique_ptr<HostDeviceRunner> own_runner_;
  DeviceRunner* runner_;
  AttentionCapability* attention_ = nullptr;
  bool token_level_mask_ = false;
};

// The unsharded sizes of a validated problem with [B, T] ids and positions;
// `unsupported` for extra leading dims (sharded calls take [B, T] ids).
Expected<ShardedShapes> sharded_shapes(const AttentionProblem& problem);

// Every device's attention problem for a call the reference validator accepts,
// with the default gather; an error otherwise (the code sharded_attention gives).
Expected<std::vector<AttentionProblem>> device_problems(const Sharding& sharding, const AttentionProblem& problem);

}  // namespace attn_oracle::seam
