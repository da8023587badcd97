// cudnn_plan.cpp: see cudnn_plan.hpp.
#include "cudnn_plan.hpp"

#include <algorithm>
#include <limits>

namespace attn_oracle::inline backends::cudnn {
namespace {

// One document per row, at the row's first token, on both sides.
bool fits_bshd(const Metadata& md, int64_t rows, int64_t tq, int64_t tkv) {
  if (md.documents() != rows || rows == 0) return false;
  for (int64_t s = 0; s < rows; ++s)
    if (md.ragged_offsets_q[s] != s * tq || md.ragged_offsets_kv[s] != s * tkv) return false;
  return true;
}

int64_t round_up_64(int64_t n) { return std::max<int64_t>(64, (n + 63) / 64 * 64); }

}  // namespace

Plan make_plan(const Metadata& md, int64_t rows, int64_t tq, int64_t tkv) {
  Plan plan;
  plan.docs = md.documents();
  plan.total_q = rows * tq, plan.total_kv = rows * tkv;
  plan.layout = fits_bshd(md, rows, tq, tkv) ? Layout::bshd : Layout::thd;
  int64_t longest_q = 0, longest_kv = 0;
  for (int64_t s = 0; s < plan.docs; ++s) {
    const int64_t lq = md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s];
    const int64_t lkv = md.cu_seqlens_kv[s + 1] - md.cu_seqlens_kv[s];
    plan.seq_len_q.push_back(static_cast<int32_t>(lq));
    plan.seq_len_kv.push_back(static_cast<int32_t>(lkv));
    plan.token_offset_q.push_back(md.ragged_offsets_q[s]);
    plan.token_offset_kv.push_back(md.ragged_offsets_kv[s]);
    longest_q = std::max(longest_q, lq), longest_kv = std::max(longest_kv, lkv);
  }
  plan.token_offset_q.push_back(plan.total_q);
  plan.token_offset_kv.push_back(plan.total_kv);
  if (plan.layout == Layout::bshd) {
    plan.s_max_q = tq, plan.s_max_kv = tkv;
  } else {
    plan.s_max_q = round_up_64(longest_q), plan.s_max_kv = round_up_64(longest_kv);
  }
  return plan;
}

std::vector<int64_t> element_offsets(const std::vector<int64_t>& token_offsets, int64_t heads, int64_t head_dim) {
  std::vector<int64_t> out(token_offsets.size());
  for (size_t i = 0; i < token_offsets.size(); ++i) out[i] = token_offsets[i] * heads * head_dim;
  return out;
}

std::vector<float> lse_from_stats(const Plan& plan, int64_t heads_q, const std::vector<float>& stats) {
  std::vector<float> lse(static_cast<size_t>(heads_q * plan.total_q), -std::numeric_limits<float>::infinity());
  for (int64_t s = 0; s < plan.docs; ++s)
    for (int64_t h = 0; h < heads_q; ++h)
      for (int64_t i = 0; i < plan.seq_len_q[s]; ++i)
        lse[h * plan.total_q + plan.token_offset_q[s] + i] = stats[(s * heads_q + h) * plan.s_max_q + i];
  return lse;
}

std::string describe(const Plan& plan) {
  return std::string(to_string(plan.layout)) + " S=" + std::to_string(plan.docs) +
         " s_max=" + std::to_string(plan.s_max_q) + "/" + std::to_string(plan.s_max_kv);
}

}  // namespace attn_oracle::backends::cudnn
