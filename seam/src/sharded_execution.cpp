// sharded_execution.cpp: the host simulation of sharded attention (see
// sharded_execution.hpp for what it accepts and why). Order of a call: the
// problem's own validation (codes of docs/semantics.md#4-error-codes), [B, T] ids, the backend's
// spec validation (docs/semantics.md#9-sharding), the bottom-right limit, then the devices. Nothing
// runs before every check has passed.
#include "attn_oracle/seam/sharded_execution.hpp"

#include <algorithm>
#include <functional>

#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline seam {
namespace {

// rows x tokens block of a row-major [B, T] array.
std::vector<int64_t> slice_rows(const std::vector<int64_t>& a, int64_t T, int64_t row0, int64_t rows, int64_t t0,
                                int64_t tokens) {
  std::vector<int64_t> out;
  out.reserve(rows * tokens);
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), a.begin() + (row0 + r) * T + t0, a.begin() + (row0 + r) * T + t0 + tokens);
  return out;
}

// rows x tokens x heads block of a row-major [B, T, H, D] tensor; empty stays empty.
std::vector<double> slice_tensor(const std::vector<double>& x, int64_t T, int64_t H, int64_t D, int64_t row0,
                                 int64_t rows, int64_t t0, int64_t tokens, int64_t h0, int64_t heads) {
  std::vector<double> out;
  if (x.empty()) return out;
  out.reserve(rows * tokens * heads * D);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < tokens; ++t) {
      const auto at = x.begin() + (((row0 + r) * T + t0 + t) * H + h0) * D;
      out.insert(out.end(), at, at + heads * D);
    }
  return out;
}

// Writes (add = false) or adds a rows x tokens x heads block back into [B, T, H, D].
void scatter_tensor(std::vector<double>& x, const std::vector<double>& block, int64_t T, int64_t H, int64_t D,
                    int64_t row0, int64_t rows, int64_t t0, int64_t tokens, int64_t h0, int64_t heads, bool add) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < tokens && t0 + t < T; ++t)
      for (int64_t e = 0; e < heads * D; ++e) {
        double& to = x[(((row0 + r) * T + t0 + t) * H + h0) * D + e];
        const double from = block[((r * tokens + t) * heads) * D + e];
        to = add ? to + from : from;
      }
}

struct PreparedPiece {
  DevicePiece piece;
  AttentionProblem problem;
  AttentionInputs inputs;
};

using GatherFn = std::function<KvShard(const std::vector<KvShard>&)>;

// The shard the device at `seq_index` of p's sequence group holds.
KvShard kv_shard(const AttentionProblem& problem, const AttentionInputs& in, const ShardedShapes& z,
                 const DevicePiece& p, int64_t seq_index) {
  KvShard s{p.rows, p.kv_tokens, p.hkv, z.head_dim, {}, {}, {}, {}};
  const int64_t t0 = seq_index * p.kv_tokens;
  s.ids = slice_rows(problem.batch.kv.segment_ids.data, z.kv_len, p.row0, p.rows, t0, p.kv_tokens);
  s.pos = slice_rows(problem.batch.kv.segment_pos.data, z.kv_len, p.row0, p.rows, t0, p.kv_tokens);
  s.k = slice_tensor(in.k, z.kv_len, z.heads_kv, z.head_dim, p.row0, p.rows, t0, p.kv_tokens, p.hkv0, p.hkv);
  s.v = slice_tensor(in.v, z.kv_len, z.heads_kv, z.head_dim, p.row0, p.rows, t0, p.kv_tokens, p.hkv0, p.hkv);
  return s;
}

// A device's problem and inputs: its query chunk against the gathered K/V.
PreparedPiece prepare(const AttentionProblem& problem, const AttentionInputs& in, const ShardedShapes& z,
                      const DevicePiece& p, const GatherFn& gather) {
  std::vector<KvShard> shards;
  for (int64_t i = 0; i < p.seq_count; ++i) shards.push_back(kv_shard(problem, in, z, p, i));
  const KvShard kv = gather(shards);
  PreparedPiece out{p, problem, {}};
  PackedBatch& b = out.problem.batch;
  b.q.segment_ids = IntArray({p.rows, p.q_tokens}, slice_rows(problem.batch.q.segment_ids.data, z.q_len, p.row0, p.rows, p.q0, p.q_tokens));
  b.q.segment_pos = IntArray({p.rows, p.q_tokens}, slice_rows(problem.batch.q.segment_pos.data, z.q_len, p.row0, p.rows, p.q0, p.q_tokens));
  b.kv.segment_ids = IntArray({kv.rows, kv.tokens}, kv.ids);
  b.kv.segment_pos = IntArray({kv.rows, kv.tokens}, kv.pos);
  AttentionShape& s = out.problem.shape;
  s.heads_q = p.hq;
  s.heads_kv = p.hkv;
  s.scale = problem.shape.effective_scale();  // 1/sqrt(D) is the same on every device; said explicitly anyway
  out.inputs.q = slice_tensor(in.q, z.q_len, z.heads_q, z.head_dim, p.row0, p.rows, p.q0, p.q_tokens, p.hq0, p.hq);
  out.inputs.d_o = slice_tensor(in.d_o, z.q_len, z.heads_q, z.head_dim, p.row0, p.rows, p.q0, p.q_tokens, p.hq0, p.hq);
  out.inputs.k = kv.k;
  out.inputs.v = kv.v;
  return out;
}

std::optional<Error> sequence_shard_supported(const AttentionProblem& problem, const std::vector<DevicePiece>& pieces) {
  if (pieces.empty() || pieces[0].seq_count == 1 || !is_bottom_right(problem.batch.mask)) return std::nullopt;
  return Error{ErrorCode::unsupported,
               "mask " + std::string(to_string(problem.batch.mask)) + " with the sequence split into " +
                   std::to_string(pieces[0].seq_count) +
                   " shards: bottom-right kinds count a document's tokens in the row (docs/semantics.md#2-the-attention-mask), which a "
                   "sequence shard changes; shard the sequence only with no_mask, padding, causal or padding_causal"};
}

// Everything before the devices run: validation, then the pieces.
using ValidateFn = std::function<std::optional<Error>(const Sharding&, const ShardedShapes&)>;

Expected<std::vector<DevicePiece>> checked_pieces(const ValidateFn& validate, const Sharding& sharding,
                                                  const AttentionProblem& problem, const AttentionInputs* inputs) {
  if (auto sizes = validate_attention(problem, inputs); !sizes) return sizes.error();
  const Expected<ShardedShapes> shapes = sharded_shapes(problem);
  if (!shapes) return shapes.error();
  if (auto e = validate(sharding, shapes.value())) return *e;
  std::vector<DevicePiece> pieces = plan_pieces(sharding, shapes.value());
  if (auto e = sequence_shard_supported(problem, pieces)) return *e;
  return pieces;
}

}  // namespace

// ---------------------------------------------------------------------------
// Planning and gathering
// ---------------------------------------------------------------------------

std::vector<DevicePiece> plan_pieces(const Sharding& s, const ShardedShapes& z) {
  const Mesh& mesh = s.mesh;
  std::vector<bool> used(mesh.axes.size(), false);
  for (const DimSharding& dim : s.q.dims)
    for (const std::string& axis : dim) used[mesh.axis_index(axis).value()] = true;
  const int64_t n_rows = shard_count(mesh, s.q.dims[kBatchDim]);
  const int64_t n_seq = shard_count(mesh, s.q.dims[kSequenceDim]);
  const int64_t n_heads = shard_count(mesh, s.q.dims[kHeadsDim]);
  std::vector<DevicePiece> pieces;
  for (int64_t d = 0; d < mesh.device_count(); ++d) {
    const std::vector<int64_t> c = mesh.coordinates(d);
    DevicePiece p;
    p.device = d;
    p.rows = z.batch / n_rows;
    p.row0 = shard_index(mesh, s.q.dims[kBatchDim], c) * p.rows;
    p.seq_count = n_seq;
    p.seq_index = shard_index(mesh, s.q.dims[kSequenceDim], c);
    p.q_tokens = z.q_len / n_seq;
    p.q0 = p.seq_index * p.q_tokens;
    p.kv_tokens = z.kv_len / n_seq;
    p.kv0 = p.seq_index * p.kv_tokens;
    // Query heads by Q's spec; kv heads follow them (identical specs shard them
    // alike, the GQA/MQA exception keeps the block the query heads read).
    const int64_t head_index = shard_index(mesh, s.q.dims[kHeadsDim], c);
    p.hq = z.heads_q / n_heads;
    p.hq0 = head_index * p.hq;
    p.hkv = z.heads_kv / n_heads;
    p.hkv0 = head_index * p.hkv;
    for (size_t a = 0; a < c.size(); ++a) p.primary = p.primary && (used[a] || c[a] == 0);
    pieces.push_back(p);
  }
  return pieces;
}

KvShard concat_sequence(const std::vector<KvShard>& shards) {
  KvShard out;
  if (shards.empty()) return out;
  out.rows = shards[0].rows;
  out.heads = shards[0].heads;
  out.head_dim = shards[0].head_dim;
  for (const KvShard& s : shards) out.tokens += s.tokens;
  const int64_t width = out.heads * out.head_dim;
  for (int64_t r = 0; r < out.rows; ++r)
    for (const KvShard& s : shards) {
      out.ids.insert(out.ids.end(), s.ids.begin() + r * s.tokens, s.ids.begin() + (r + 1) * s.tokens);
      out.pos.insert(out.pos.end(), s.pos.begin() + r * s.tokens, s.pos.begin() + (r + 1) * s.tokens);
      if (s.k.empty()) continue;
      out.k.insert(out.k.end(), s.k.begin() + r * s.tokens * width, s.k.begin() + (r + 1) * s.tokens * width);
      out.v.insert(out.v.end(), s.v.begin() + r * s.tokens * width, s.v.begin() + (r + 1) * s.tokens * width);
    }
  return out;
}

Expected<ShardedShapes> sharded_shapes(const AttentionProblem& problem) {
  const Expected<BatchLayout> layout = validate_shapes(problem.batch);
  if (!layout) return layout.error();
  const BatchLayout& l = layout.value();
  if (problem.batch.q.segment_ids.rank() != 2 || problem.batch.kv.segment_ids.rank() != 2 ||
      problem.batch.q.segment_pos.rank() != 2 || problem.batch.kv.segment_pos.rank() != 2)
    return Error{ErrorCode::unsupported, "sharded attention takes [B, T] segment ids and positions; q ids " +
                                             shape_to_string(problem.batch.q.segment_ids.shape) + ", kv ids " +
                                             shape_to_string(problem.batch.kv.segment_ids.shape) + " have extra leading dims"};
  const AttentionShape& s = problem.shape;
  return ShardedShapes{l.batch, l.q_len, l.kv_len, s.heads_q, s.heads_kv, s.head_dim};
}

// ---------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------

SimulatedSharding::SimulatedSharding(AttentionCapability& attention)
    : own_runner_(std::make_unique<HostDeviceRunner>(attention)), runner_(own_runner_.get()), attention_(&attention) {}

SimulatedSharding::SimulatedSharding(DeviceRunner& runner, bool token_level_mask)
    : runner_(&runner), token_level_mask_(token_level_mask) {}

std::optional<Error> SimulatedSharding::validate_sharding(const Sharding& sharding, const ShardedShapes& shapes) {
  return attn_oracle::validate_sharding(sharding, shapes);
}

Expected<AttentionResult> SimulatedSharding::sharded_attention(const Sharding& sharding, const AttentionProblem& problem,
                                                               const AttentionInputs& in) {
  const ValidateFn validate = [this](const Sharding& s, const ShardedShapes& z) { return validate_sharding(s, z); };
  const Expected<std::vector<DevicePiece>> pieces = checked_pieces(validate, sharding, problem, &in);
  if (!pieces) return pieces.error();
  const ShardedShapes z = sharded_shapes(problem).value();
  const int64_t D = z.head_dim;
  AttentionResult out;
  out.o.assign(z.batch * z.q_len * z.heads_q * D, 0.0);
  out.lse.assign(z.batch * z.heads_q * z.q_len, 0.0);
  if (problem.shape.backward)
    out.grads = AttentionGradients{std::vector<double>(out.o.size(), 0.0), std::vector<double>(z.batch * z.kv_len * z.heads_kv * D, 0.0),
                                   std::vector<double>(z.batch * z.kv_len * z.heads_kv * D, 0.0)};
  const GatherFn gather = [this](const std::vector<KvShard>& shards) { return all_gather_sequence(shards); };
  for (const DevicePiece& p : pieces.value()) {
    const PreparedPiece piece = prepare(problem, in, z, p, gather);
    Expected<AttentionResult> r = runner_->run_piece(p.device, piece.problem, piece.inputs);
    if (!r) return Error{r.error().code, "device " + std::to_string(p.device) + ": " + r.error().message};
    if (!p.primary) continue;
    const int64_t gathered = piece.problem.batch.kv.segment_ids.shape[1];
    scatter_tensor(out.o, r->o, z.q_len, z.heads_q, D, p.row0, p.rows, p.q0, p.q_tokens, p.hq0, p.hq, false);
    for (int64_t row = 0; row < p.rows; ++row)  // lse [B, Hq, Tq]
      for (int64_t h = 0; h < p.hq; ++h)
        std::copy_n(r->lse.begin() + (row * p.hq + h) * p.q_tokens, p.q_tokens,
                    out.lse.begin() + ((p.row0 + row) * z.heads_q + p.hq0 + h) * z.q_len + p.q0);
    if (!out.grads || !r->grads) continue;
    scatter_tensor(out.grads->dq, r->grads->dq, z.q_len, z.heads_q, D, p.row0, p.rows, p.q0, p.q_tokens, p.hq0, p.hq, false);
    // Gathered token t is kv token t: the reduce-scatter sums every query chunk's share.
    scatter_tensor(out.grads->dk, r->grads->dk, z.kv_len, z.heads_kv, D, p.row0, p.rows, 0, gathered, p.hkv0, p.hkv, true);
    scatter_tensor(out.grads->dv, r->grads->dv, z.kv_len, z.heads_kv, D, p.row0, p.rows, 0, gathered, p.hkv0, p.hkv, true);
  }
  return out;
}

Expected<std::vector<AttentionProblem>> device_problems(const Sharding& sharding, const AttentionProblem& problem) {
  const Expected<std::vector<DevicePiece>> pieces = checked_pieces(attn_oracle::validate_sharding, sharding, problem, nullptr);
  if (!pieces) return pieces.error();
  const ShardedShapes z = sharded_shapes(problem).value();
  std::vector<AttentionProblem> out;
  for (const DevicePiece& p : pieces.value()) out.push_back(prepare(problem, AttentionInputs{}, z, p, concat_sequence).problem);
  return out;
}

}  // namespace attn_oracle::seam
