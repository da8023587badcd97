// small_seq_documents.cpp: the small-sequence problem of
// docs/semantics.md#8-small-sequence-problems as data: every q run of every broadcast row checked
// as a document (one query token, 1..16 keys) and listed in row-major order. Validation order:
// batch, heads, then documents in order (query count, then key count of each), then
// tensor sizes, so a shape error in q cannot hide a small-seq violation.
// Tested by tests/small_seq_reference_test.cpp (every error path).
#include <string>
#include <vector>

#include "attn_oracle/model/small_seq.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline model {
namespace {

std::string where(int64_t row, int64_t token) {
  return "row " + std::to_string(row) + ", token " + std::to_string(token);
}

// Every q run of every broadcast row, checked as a small-seq document.
Expected<std::vector<SmallSeqDocument>> list_documents(const PackedBatch& batch,
                                                       const BatchLayout& layout) {
  std::vector<SmallSeqDocument> docs;
  for (int64_t r = 0; r < layout.rows(); ++r) {
    const RowView q = side_row(batch.q, layout.q_extra, layout, r);
    const RowView kv = side_row(batch.kv, layout.kv_extra, layout, r);
    for (int64_t t = 0; t < q.len;) {
      const int64_t id = q.ids[t];
      int64_t end = t + 1;
      while (end < q.len && q.ids[end] == id) ++end;
      if (id == 0) {
        t = end;
        continue;
      }
      if (end - t != 1)
        return Error{ErrorCode::small_seq_query_count,
                     where(r, t) + ": document id " + std::to_string(id) + " has " +
                         std::to_string(end - t) + " query tokens, expected exactly 1"};
      // Ids are contiguous runs on the kv side too (validated), so the first
      // match and the count describe the document's keys.
      int64_t first = -1, keys = 0;
      for (int64_t j = 0; j < kv.len; ++j)
        if (kv.ids[j] == id) {
          if (first < 0) first = j;
          ++keys;
        }
      if (keys == 0 || keys > kSmallSeqMaxKeys)
        return Error{ErrorCode::small_seq_key_count,
                     "row " + std::to_string(r) + ": document id " + std::to_string(id) + " has " +
                         std::to_string(keys) + " kv tokens, expected 1.." +
                         std::to_string(kSmallSeqMaxKeys)};
      docs.push_back(SmallSeqDocument{r, t, first, keys});
      t = end;
    }
  }
  return docs;
}

}  // namespace

Expected<std::vector<SmallSeqDocument>> small_seq_documents(const AttentionProblem& problem,
                                                            const AttentionInputs* inputs) {
  auto heads = validate_attention(problem);  // batch, then heads
  if (!heads) return heads.error();
  const BatchLayout layout = validate_shapes(problem.batch).value();
  auto docs = list_documents(problem.batch, layout);
  if (!docs) return docs.error();
  if (inputs != nullptr) {
    auto sizes = validate_attention(problem, inputs);
    if (!sizes) return sizes.error();
  }
  return docs;
}

}  // namespace attn_oracle::model
