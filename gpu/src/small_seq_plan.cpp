// small_seq_plan.cpp: validation and document list of the small-seq problem
// (small_seq_plan.hpp), shared by the CPU twin and the CUDA wrapper. Written
// independently of the reference's small_seq_documents (same codes, same order);
// tests/small_seq_twin_test.cpp compares the two on every error path.
#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/gpu/small_seq/small_seq_plan.hpp"

#include <climits>
#include <string>

#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle::gpu {
namespace {



// One run of equal ids [begin, end) of a row side.
int64_t run_end(const RowRef& r, int64_t begin) {
  int64_t end = begin + 1;
  while (end < r.len && r.ids[end] == r.ids[begin]) ++end;
  return end;
}

// The documents of one broadcast row, appended to the plan. Ids of a valid row
// increase along each side (docs/semantics.md#1-inputs), so one merge pass pairs q runs with kv
// runs.
std::optional<Error> add_row_documents(const MetadataParams& mp, int64_t row, SmallSeqPlan& plan) {
  const RowRef q = row_ref(mp, mp.q, row), kv = row_ref(mp, mp.kv, row);
  for (int64_t t = 0; t < kv.len; ++t) plan.kv_pos[row * kv.len + t] = kv.pos[t];
  int64_t kv_at = 0;
  for (int64_t t = 0; t < q.len;) {
    const int64_t id = q.ids[t], end = run_end(q, t);
    if (id == 0) {
      t = end;
      continue;
    }
    const std::string where = "row " + std::to_string(row) + ", token " + std::to_string(t) + ": document id " +
                              std::to_string(id) + " has ";
    if (end - t != 1)
      return Error{ErrorCode::small_seq_query_count,
                   where + std::to_string(end - t) + " query tokens, expected exactly 1"};
    while (kv_at < kv.len && (kv.ids[kv_at] == 0 || kv.ids[kv_at] < id)) kv_at = run_end(kv, kv_at);
    const int64_t keys = kv_at < kv.len && kv.ids[kv_at] == id ? run_end(kv, kv_at) - kv_at : 0;
    if (keys == 0 || keys > kSmallSeqMaxKeys)
      return Error{ErrorCode::small_seq_key_count,
                   where + std::to_string(keys) + " kv tokens, expected 1.." + std::to_string(kSmallSeqMaxKeys)};
    plan.q_token.push_back(row * q.len + t);
    plan.first_key.push_back(row * kv.len + kv_at);
    plan.q_pos.push_back(q.pos[t]);
    plan.keys.push_back(static_cast<int32_t>(keys));
    plan.max_keys = plan.max_keys > keys ? plan.max_keys : static_cast<int>(keys);
    t = end;
  }
  return std::nullopt;
}

}  // namespace

Expected<SmallSeqPlan> plan_small_seq(const AttentionProblem& problem, const AttentionInputs& inputs) {
  // The batch errors of docs/semantics.md#input-validation-in-precedence-order, from the production
  // metadata path.
  if (auto md = metadata_twin(problem.batch); !md) return md.error();
  const AttentionShape& s = problem.shape;
  if (auto e = check_heads(s)) return *e;
  auto prepared = prepare_batch(problem.batch);
  if (!prepared) return prepared.error();
  const MetadataParams& mp = prepared->params;
  if (auto e = check_tensor_memory(prepared->extra, mp.batch, mp.q.len, mp.kv.len, s)) return *e;
  SmallSeqPlan plan;
  plan.rows = mp.rows, plan.tq = mp.q.len, plan.tkv = mp.kv.len;
  plan.hq = s.heads_q, plan.hkv = s.heads_kv, plan.d = s.head_dim;
  plan.kv_pos.assign(static_cast<size_t>(plan.rows * plan.tkv), 0);
  for (int64_t row = 0; row < mp.rows; ++row)
    if (auto e = add_row_documents(mp, row, plan)) return *e;
  if (auto e = check_tensor_size("q", inputs.q, plan.q_elems())) return *e;
  if (auto e = check_tensor_size("k", inputs.k, plan.kv_elems())) return *e;
  if (auto e = check_tensor_size("v", inputs.v, plan.kv_elems())) return *e;
  if (auto e = check_tensor_size("do", inputs.d_o, s.backward ? plan.q_elems() : 0)) return *e;
  if (auto e = check_attention_values(s, inputs, plan.tq, plan.tkv)) return *e;
  return plan;
}

SmallSeqParams small_seq_shape_params(const AttentionProblem& problem, const SmallSeqPlan& plan) {
  SmallSeqParams p;
  p.docs = plan.docs();
  p.total_q = plan.rows * plan.tq, p.total_kv = plan.rows * plan.tkv;
  p.heads_q = static_cast<int>(plan.hq), p.heads_kv = static_cast<int>(plan.hkv), p.head_dim = static_cast<int>(plan.d);
  p.scale = static_cast<float>(problem.shape.effective_scale());
  p.mask = static_cast<int>(problem.batch.mask);
  p.window_left = problem.batch.window.left, p.window_right = problem.batch.window.right;
  p.dtype = static_cast<int>(problem.shape.dtype);
  return p;
}

}  // namespace attn_oracle::gpu
